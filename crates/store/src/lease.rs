//! Leader leases and fencing tokens: how a periodic job runs on exactly one gateway, and why a
//! lease alone is not enough.
//!
//! A [`LeaseTable`] is the store's side of leadership: a lease is *set if absent, with an
//! expiry*; only its holder can renew or release it; and every grant comes with a **fencing
//! token** from a counter that only ever grows, so a later grant always carries a larger token.
//!
//! A lease cannot stop a holder that *believes* it still leads: a leader that stalls (a GC
//! pause, a descheduled VM) after checking its lease, and wakes after it expired and another
//! gateway took over, will still send its write. The protected resource must therefore check
//! the token on every write: a [`Fence`] accepts a token at least as large as the highest it
//! has seen (accepted, or learned from a grant) and rejects any lower one. A fence that does
//! not check is the canary: the
//! simulator's fencing scenario runs with the check off to show the stale write landing.
//!
//! Both types are sans-IO state machines: the caller passes `now` (the store's clock). The
//! simulated store node holds them; on Redis the same rules are Lua scripts
//! (`redis_store::RedisStore` implements [`LeaseClient`]).

use crate::StoreError;
use core::future::Future;
use ratelab_core::Nanos;
use std::collections::BTreeMap;

/// A lease held by one owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// Who holds it.
    pub owner: String,
    /// The fencing token of this grant.
    pub token: u64,
    /// When it lapses unless renewed (store clock).
    pub expires_at: Nanos,
}

#[derive(Clone, Debug, Default)]
struct Slot {
    holder: Option<Holder>,
    /// The last token granted under this name; never decreases, and survives expiry.
    last_token: u64,
}

/// Where a [`LeaseTable`]'s fencing tokens come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TokenSource {
    /// One more than the last token granted under the name. A store that loses its last
    /// grants (a crash without persistence, a promoted replica the grants had not reached)
    /// counts again from an older value, and grants a token someone already holds.
    #[default]
    Counter,
    /// The later of one more than the last token and the store's clock in ns at the grant.
    /// A store that lost its last grants still grants a larger token than any of them, as
    /// long as its clock is ahead of every earlier grant's: a restart or a promotion takes far
    /// longer than the clock error between a primary and its replica. Pair it with
    /// [`LeaseTable::hold_grants_until`] after a restart, so a lost grant's lease has lapsed
    /// before the next one.
    StoreClock,
}

/// The store's leases, by name.
#[derive(Clone, Debug, Default)]
pub struct LeaseTable {
    slots: BTreeMap<String, Slot>,
    tokens: TokenSource,
    /// No grant before this (store clock): the grace period of a store that restarted.
    grants_from: Nanos,
}

impl LeaseTable {
    /// An empty table whose tokens count up ([`TokenSource::Counter`]).
    pub fn new() -> LeaseTable {
        LeaseTable::default()
    }

    /// An empty table whose tokens come from `tokens`.
    pub fn with_tokens(tokens: TokenSource) -> LeaseTable {
        LeaseTable {
            tokens,
            ..LeaseTable::default()
        }
    }

    /// Where its tokens come from.
    pub fn tokens(&self) -> TokenSource {
        self.tokens
    }

    /// Grants nothing before `at` (store clock): what a store does after a restart or a
    /// promotion, for the longest lease it grants, while a lease its predecessor granted and
    /// then lost may still be live. Renewals and releases of the leases it holds go on.
    pub fn hold_grants_until(&mut self, at: Nanos) {
        self.grants_from = self.grants_from.max(at);
    }

    fn live(&self, name: &str, now: Nanos) -> Option<&Holder> {
        self.slots
            .get(name)?
            .holder
            .as_ref()
            .filter(|h| h.expires_at > now)
    }

    /// Grants `name` to `owner` for `ttl` if nobody holds it at `now`; returns the new fencing
    /// token, larger than every token granted before under `name`. `None` if it is held (by
    /// anyone, `owner` included: a holder renews instead).
    pub fn acquire(&mut self, name: &str, owner: &str, ttl: Nanos, now: Nanos) -> Option<u64> {
        if self.live(name, now).is_some() || now < self.grants_from {
            return None;
        }
        let tokens = self.tokens;
        let slot = self.slots.entry(name.to_owned()).or_default();
        slot.last_token = match tokens {
            TokenSource::Counter => slot.last_token + 1,
            TokenSource::StoreClock => (slot.last_token + 1).max(now.as_u64()),
        };
        slot.holder = Some(Holder {
            owner: owner.to_owned(),
            token: slot.last_token,
            expires_at: now.saturating_add(ttl),
        });
        Some(slot.last_token)
    }

    /// Extends the lease to `now + ttl` if `owner` holds it with `token` and it has not lapsed.
    pub fn renew(&mut self, name: &str, owner: &str, token: u64, ttl: Nanos, now: Nanos) -> bool {
        if !self.held_by(name, owner, token, now) {
            return false;
        }
        if let Some(h) = self.slots.get_mut(name).and_then(|s| s.holder.as_mut()) {
            h.expires_at = now.saturating_add(ttl);
        }
        true
    }

    /// Gives the lease up if `owner` holds it with `token`; anyone else's release is refused.
    pub fn release(&mut self, name: &str, owner: &str, token: u64, now: Nanos) -> bool {
        if !self.held_by(name, owner, token, now) {
            return false;
        }
        if let Some(s) = self.slots.get_mut(name) {
            s.holder = None;
        }
        true
    }

    fn held_by(&self, name: &str, owner: &str, token: u64, now: Nanos) -> bool {
        self.live(name, now)
            .is_some_and(|h| h.owner == owner && h.token == token)
    }

    /// The live holder of `name` at `now`.
    pub fn holder(&self, name: &str, now: Nanos) -> Option<&Holder> {
        self.live(name, now)
    }
}

/// What a fenced write came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FenceVerdict {
    /// The write was applied.
    Accepted,
    /// The token was lower than `highest`, a token the resource has already seen: the writer's
    /// lease was superseded, and the write was not applied.
    Stale {
        /// The highest token accepted so far.
        highest: u64,
    },
}

/// The protected resource's check: the highest token it has seen.
///
/// It sees a token when it accepts a write carrying it, and — when the resource lives beside
/// the lease table, as in ratelab's stores — when the lease is granted ([`Fence::learn`]). The
/// second closes the gap a write-only fence leaves open: a stale write that arrives after a new
/// grant but before the new leader's first write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fence {
    highest: u64,
    checking: bool,
}

impl Default for Fence {
    /// A checking fence.
    fn default() -> Fence {
        Fence::new()
    }
}

impl Fence {
    /// A fence that rejects stale tokens.
    pub fn new() -> Fence {
        Fence {
            highest: 0,
            checking: true,
        }
    }

    /// A resource that does not check tokens: every write lands. Only for showing what the
    /// check prevents.
    pub fn unchecked() -> Fence {
        Fence {
            highest: 0,
            checking: false,
        }
    }

    /// Admits or refuses a write carrying `token`, and remembers the highest token admitted.
    pub fn admit(&mut self, token: u64) -> FenceVerdict {
        if self.checking && token < self.highest {
            return FenceVerdict::Stale {
                highest: self.highest,
            };
        }
        self.highest = self.highest.max(token);
        FenceVerdict::Accepted
    }

    /// Learns a token the lease table has just granted: writes below it are stale from now on.
    pub fn learn(&mut self, token: u64) {
        self.highest = self.highest.max(token);
    }

    /// The highest token seen so far.
    pub fn highest(&self) -> u64 {
        self.highest
    }
}

/// Leases held in a remote store. Every method is one round trip.
pub trait LeaseClient: Clone + Send + Sync {
    /// [`LeaseTable::acquire`] in the store: the fencing token, or `None` if the lease is held.
    fn acquire(
        &self,
        name: &str,
        owner: &str,
        ttl: Nanos,
    ) -> impl Future<Output = Result<Option<u64>, StoreError>> + Send;

    /// [`LeaseTable::renew`] in the store.
    fn renew(
        &self,
        name: &str,
        owner: &str,
        token: u64,
        ttl: Nanos,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// [`LeaseTable::release`] in the store.
    fn release(
        &self,
        name: &str,
        owner: &str,
        token: u64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
}

/// A [`LeaseClient`] over an in-process [`LeaseTable`]: every call completes at once, on the
/// clock `clock` (for a single-process server and for tests).
#[derive(Clone, Debug)]
pub struct LocalLeases<F> {
    table: std::sync::Arc<std::sync::Mutex<LeaseTable>>,
    clock: F,
}

impl<F: Fn() -> Nanos> LocalLeases<F> {
    /// An empty table read on `clock`.
    pub fn new(clock: F) -> Self {
        LocalLeases {
            table: Default::default(),
            clock,
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut LeaseTable, Nanos) -> R) -> R {
        let now = (self.clock)();
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut table, now)
    }
}

impl<F: Fn() -> Nanos + Clone + Send + Sync> LeaseClient for LocalLeases<F> {
    fn acquire(
        &self,
        name: &str,
        owner: &str,
        ttl: Nanos,
    ) -> impl Future<Output = Result<Option<u64>, StoreError>> + Send {
        core::future::ready(Ok(self.with(|t, now| t.acquire(name, owner, ttl, now))))
    }

    fn renew(
        &self,
        name: &str,
        owner: &str,
        token: u64,
        ttl: Nanos,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        core::future::ready(Ok(self.with(|t, now| t.renew(name, owner, token, ttl, now))))
    }

    fn release(
        &self,
        name: &str,
        owner: &str,
        token: u64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        core::future::ready(Ok(self.with(|t, now| t.release(name, owner, token, now))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Nanos = Nanos::from_millis(100);

    #[test]
    fn a_held_lease_is_not_granted_again_until_it_lapses() {
        let mut t = LeaseTable::new();
        assert_eq!(t.acquire("job", "a", TTL, Nanos(0)), Some(1));
        assert_eq!(t.acquire("job", "b", TTL, Nanos::from_millis(99)), None);
        assert_eq!(t.acquire("job", "a", TTL, Nanos::from_millis(99)), None);
        assert_eq!(t.acquire("job", "b", TTL, Nanos::from_millis(100)), Some(2));
        assert_eq!(t.holder("job", Nanos::from_millis(150)).unwrap().owner, "b");
    }

    #[test]
    fn clock_tokens_outgrow_a_lost_counter_and_a_restart_holds_grants_for_a_lease() {
        let mut before = LeaseTable::with_tokens(TokenSource::StoreClock);
        let t1 = before.acquire("job", "a", TTL, Nanos(5_000)).unwrap();
        // A later grant's token is larger, whatever the clock says.
        let t2 = before
            .acquire("job", "b", TTL, Nanos(5_000).saturating_add(TTL))
            .unwrap();
        assert!(t1 >= 5_000 && t2 > t1, "{t1} {t2}");
        // The table is lost (a crash): its successor starts empty, later on the same clock.
        let restart = Nanos::from_millis(300);
        let mut after = LeaseTable::with_tokens(TokenSource::StoreClock);
        let end = restart.saturating_add(TTL);
        after.hold_grants_until(end);
        assert_eq!(after.acquire("job", "c", TTL, restart), None);
        assert_eq!(
            after.acquire("job", "c", TTL, Nanos(end.as_u64() - 1)),
            None
        );
        let t3 = after.acquire("job", "c", TTL, end).unwrap();
        assert!(t3 > t2, "{t3} after {t2}");
        // A counter, lost the same way, repeats a token.
        let mut counted = LeaseTable::new();
        assert_eq!(counted.acquire("job", "a", TTL, Nanos(0)), Some(1));
        let mut lost = LeaseTable::new();
        assert_eq!(lost.acquire("job", "b", TTL, restart), Some(1));
    }

    #[test]
    fn tokens_grow_across_expiry_release_and_names() {
        let mut t = LeaseTable::new();
        let mut last = 0;
        for i in 0..10u64 {
            let now = Nanos::from_millis(i * 1_000);
            let token = t.acquire("job", &format!("g{i}"), TTL, now).unwrap();
            assert!(token > last, "token {token} after {last}");
            last = token;
            if i % 2 == 0 {
                assert!(t.release("job", &format!("g{i}"), token, now));
            }
        }
        assert_eq!(t.acquire("other", "g", TTL, Nanos(0)), Some(1));
    }

    #[test]
    fn only_the_live_holder_renews_or_releases() {
        let mut t = LeaseTable::new();
        let token = t.acquire("job", "a", TTL, Nanos(0)).unwrap();
        assert!(!t.renew("job", "b", token, TTL, Nanos(10)), "not the owner");
        assert!(
            !t.renew("job", "a", token + 1, TTL, Nanos(10)),
            "wrong token"
        );
        assert!(!t.release("job", "b", token, Nanos(10)), "not the owner");
        assert!(t.renew("job", "a", token, TTL, Nanos::from_millis(90)));
        assert_eq!(t.acquire("job", "b", TTL, Nanos::from_millis(150)), None);
        // Lapsed: renewing is refused even with nobody else holding it.
        assert!(!t.renew("job", "a", token, TTL, Nanos::from_millis(190)));
        assert!(!t.release("job", "a", token, Nanos::from_millis(190)));
        // Released by its holder: free at once, with a new token.
        let mut t = LeaseTable::new();
        let token = t.acquire("job", "a", TTL, Nanos(0)).unwrap();
        assert!(t.release("job", "a", token, Nanos(10)));
        assert_eq!(t.acquire("job", "b", TTL, Nanos(10)), Some(token + 1));
    }

    #[test]
    fn a_fence_rejects_tokens_below_the_highest_it_accepted() {
        let mut f = Fence::new();
        assert_eq!(f.admit(1), FenceVerdict::Accepted);
        assert_eq!(f.admit(3), FenceVerdict::Accepted);
        assert_eq!(
            f.admit(3),
            FenceVerdict::Accepted,
            "the leader writes again"
        );
        assert_eq!(f.admit(2), FenceVerdict::Stale { highest: 3 });
        assert_eq!(f.highest(), 3);
        let mut open = Fence::unchecked();
        assert_eq!(open.admit(3), FenceVerdict::Accepted);
        assert_eq!(open.admit(2), FenceVerdict::Accepted);
        assert_eq!(Fence::default(), Fence::new());
    }

    #[test]
    fn a_fence_that_learns_grants_rejects_the_old_leader_before_the_new_one_writes() {
        let mut f = Fence::new();
        assert_eq!(f.admit(1), FenceVerdict::Accepted);
        f.learn(2);
        assert_eq!(f.admit(1), FenceVerdict::Stale { highest: 2 });
        assert_eq!(f.admit(2), FenceVerdict::Accepted);
    }
}
