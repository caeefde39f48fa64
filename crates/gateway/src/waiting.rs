//! Calls waiting on something, held where each call's ticket finds it at once: the gateway's
//! deadlines under tokio (`deadlines`), and in the madsim cluster a gateway's timeouts and the
//! replies its store calls wait for.
//!
//! - [`Slots`]: each waiting call's value in a slot it takes and gives back. A call's
//!   [`Ticket`] names its slot and the slot's use, so a ticket kept after its call left
//!   reaches nothing, even once the slot serves another call. Taking a slot and giving it back
//!   cost a few instructions, where an ordered map's insertion and removal walk and rebalance
//!   its nodes.
//! - [`ByDeadline`]: [`Slots`] with each call's deadline, the calls taken out by deadline
//!   (ties in arrival order, as an ordered map keyed by deadline and arrival would give
//!   them). Deadlines of one length come in order, so a new one goes at the end (else it is
//!   placed by a binary search); a call that leaves only empties its slot, and its deadline
//!   stays behind until the earliest deadlines are read past it, or until the stale ones
//!   outnumber the live.

use std::collections::VecDeque;

/// A waiting call's place: its slot, and which use of the slot it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket {
    slot: u32,
    used: u32,
}

impl Ticket {
    /// The ticket as one number (to send with a message, say), and back.
    pub fn to_u64(self) -> u64 {
        (u64::from(self.used) << 32) | u64::from(self.slot)
    }

    /// The ticket [`Ticket::to_u64`] made `n` from.
    pub fn from_u64(n: u64) -> Ticket {
        Ticket {
            slot: n as u32,
            used: (n >> 32) as u32,
        }
    }
}

/// Each waiting call's value, in slots taken and given back.
#[derive(Debug)]
pub struct Slots<V> {
    /// Each slot's value (`None`: free) and its use, counted up as it is taken.
    slots: Vec<(Option<V>, u32)>,
    free: Vec<u32>,
    live: usize,
}

impl<V> Default for Slots<V> {
    fn default() -> Self {
        Slots {
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
        }
    }
}

impl<V> Slots<V> {
    /// Keeps `value` for a new call; its ticket.
    pub fn insert(&mut self, value: V) -> Ticket {
        let slot = self.free.pop().unwrap_or_else(|| {
            self.slots.push((None, 0));
            u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 calls waiting")
        });
        let (v, used) = &mut self.slots[slot as usize];
        *used = used.wrapping_add(1);
        *v = Some(value);
        self.live += 1;
        Ticket { slot, used: *used }
    }

    /// Whether `t`'s call still waits.
    pub fn holds(&self, t: &Ticket) -> bool {
        self.slots
            .get(t.slot as usize)
            .is_some_and(|(v, used)| *used == t.used && v.is_some())
    }

    /// `t`'s call's value, while it waits.
    pub fn get_mut(&mut self, t: &Ticket) -> Option<&mut V> {
        match self.slots.get_mut(t.slot as usize) {
            Some((v, used)) if *used == t.used => v.as_mut(),
            _ => None,
        }
    }

    /// Takes `t`'s call out: its value, if it still waited.
    pub fn remove(&mut self, t: &Ticket) -> Option<V> {
        let (v, used) = self.slots.get_mut(t.slot as usize)?;
        if *used != t.used {
            return None;
        }
        let v = v.take()?;
        self.free.push(t.slot);
        self.live -= 1;
        Some(v)
    }

    /// Every waiting call's value.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.slots.iter().filter_map(|(v, _)| v.as_ref())
    }

    /// How many calls wait.
    pub fn len(&self) -> usize {
        self.live
    }

    /// Whether no call waits.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }
}

/// Waiting calls with their deadlines ([`Slots`] and the deadlines in order).
#[derive(Debug)]
pub struct ByDeadline<T, V> {
    slots: Slots<V>,
    /// Every waiting call's deadline and ticket, by deadline (ties in arrival order), and
    /// stale ones (their calls gone).
    order: VecDeque<(T, Ticket)>,
}

impl<T, V> Default for ByDeadline<T, V> {
    fn default() -> Self {
        ByDeadline {
            slots: Slots::default(),
            order: VecDeque::new(),
        }
    }
}

impl<T: Ord + Copy, V> ByDeadline<T, V> {
    /// Keeps `value` for a call waiting until `at`; its ticket.
    pub fn insert(&mut self, at: T, value: V) -> Ticket {
        let ticket = self.slots.insert(value);
        if self.order.back().is_none_or(|(last, _)| *last <= at) {
            self.order.push_back((at, ticket));
        } else {
            let i = self.order.partition_point(|(t, _)| *t <= at);
            self.order.insert(i, (at, ticket));
        }
        if self.order.len() > 2 * self.slots.len() + 64 {
            let slots = &self.slots;
            self.order.retain(|(_, t)| slots.holds(t));
        }
        ticket
    }

    /// `t`'s call's value, while it waits.
    pub fn get_mut(&mut self, t: &Ticket) -> Option<&mut V> {
        self.slots.get_mut(t)
    }

    /// Takes `t`'s call out: its value, if it still waited.
    pub fn remove(&mut self, t: &Ticket) -> Option<V> {
        self.slots.remove(t)
    }

    /// The earliest deadline of a waiting call (the stale ones before it dropped).
    pub fn earliest(&mut self) -> Option<T> {
        while let Some((at, t)) = self.order.front() {
            if self.slots.holds(t) {
                return Some(*at);
            }
            self.order.pop_front();
        }
        None
    }

    /// Takes out the waiting call with the earliest deadline, if that is at or before `now`:
    /// its value.
    pub fn pop_due(&mut self, now: T) -> Option<V> {
        if self.earliest()? > now {
            return None;
        }
        let (_, t) = self.order.pop_front()?;
        self.slots.remove(&t)
    }

    /// Every waiting call's value.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.slots.values()
    }

    /// How many calls wait.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether no call waits.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// How many deadlines are kept, stale ones included.
    pub fn kept(&self) -> usize {
        self.order.len()
    }
}

#[cfg(test)]
mod tests {
    use super::{ByDeadline, Slots, Ticket};

    #[test]
    fn waiting_calls_come_out_by_deadline_and_a_ticket_reaches_only_its_own_call() {
        let mut w = ByDeadline::default();
        let t: Vec<Ticket> = [30, 10, 20, 10, 40]
            .into_iter()
            .enumerate()
            .map(|(i, at)| w.insert(at, i))
            .collect();
        assert_eq!(w.remove(&t[2]), Some(2), "the call at 20 leaves");
        assert_eq!(w.remove(&t[2]), None, "and only once");
        assert_eq!(w.earliest(), Some(10));
        assert_eq!(w.pop_due(9), None, "nothing due before 10");
        let due: Vec<_> = std::iter::from_fn(|| w.pop_due(25)).collect();
        assert_eq!(
            due,
            [1, 3],
            "the two at 10 in arrival order, not the one that left"
        );
        assert!(w.get_mut(&t[1]).is_none() && w.get_mut(&t[3]).is_none());
        assert_eq!(w.earliest(), Some(30));
        // Freed slots are taken again: the old tickets do not reach the new calls.
        let new: Vec<Ticket> = (0..3).map(|i| w.insert(5, 10 + i)).collect();
        assert_eq!(w.earliest(), Some(5), "an earlier deadline goes first");
        for old in [t[1], t[2], t[3]] {
            assert!(w.get_mut(&old).is_none() && w.remove(&old).is_none());
        }
        assert!(new.iter().all(|n| w.get_mut(n).is_some()));
        assert_eq!((w.len(), w.values().count()), (5, 5));
        let rest: Vec<_> = std::iter::from_fn(|| w.pop_due(100)).collect();
        assert_eq!(rest, [10, 11, 12, 0, 4]);
        assert!(w.is_empty() && w.earliest().is_none());
    }

    #[test]
    fn deadlines_of_calls_that_left_do_not_pile_up() {
        let mut w = ByDeadline::default();
        let kept = w.insert(u64::MAX, ());
        for _ in 0..10_000 {
            let t = w.insert(u64::MAX, ());
            assert!(w.remove(&t).is_some());
            assert!(w.kept() <= 2 * (w.len() + 1) + 64, "{} deadlines", w.kept());
        }
        assert!(w.slots.slots.len() <= 2, "slots are taken again");
        assert!(w.get_mut(&kept).is_some());
    }

    #[test]
    fn a_ticket_survives_its_number() {
        let mut s = Slots::default();
        let a = s.insert("a");
        s.remove(&a);
        let b = s.insert("b");
        assert_ne!(a.to_u64(), b.to_u64(), "the same slot, another use");
        assert_eq!(Ticket::from_u64(b.to_u64()), b);
        assert_eq!(s.get_mut(&Ticket::from_u64(a.to_u64())), None);
        assert_eq!(s.remove(&Ticket::from_u64(b.to_u64())), Some("b"));
    }
}
