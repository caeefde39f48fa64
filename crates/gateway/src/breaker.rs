//! A circuit breaker for store calls, sans-IO: it reads time only from its arguments.
//!
//! Closed: calls go through; `failures_to_open` consecutive failures open it. Open: calls are
//! skipped (the gateway fails open or closed at once, without paying the timeout) until
//! `cooldown` has passed. Half-open: one probe call goes through; success closes the breaker,
//! failure re-opens it for another cooldown. A probe given back unanswered (its caller went
//! away) leaves the next call to probe.

use ratelab_core::Nanos;
use std::sync::atomic::{AtomicU64, Ordering};

/// Breaker settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive failures that open the breaker (at least 1).
    pub failures_to_open: u32,
    /// How long it stays open before a probe.
    pub cooldown: Nanos,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            failures_to_open: 5,
            cooldown: Nanos::from_millis(1_000),
        }
    }
}

/// The breaker's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go through; this many consecutive failures so far.
    Closed(u32),
    /// Calls are skipped until this instant.
    Open(Nanos),
    /// One probe is in flight; other calls are skipped.
    HalfOpen,
}

/// Whether a call may go to the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Permit {
    /// Make the call.
    Call,
    /// Make the call as the half-open probe.
    Probe,
    /// Skip the store.
    Skip,
}

/// What a result did to the breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// Nothing changed state.
    None,
    /// It opened.
    Opened,
    /// It closed.
    Closed,
}

/// A circuit breaker, for one caller at a time (the gateway's limits share a
/// [`SharedBreaker`], which makes the same transitions).
#[derive(Clone, Debug)]
pub struct Breaker {
    config: BreakerConfig,
    state: BreakerState,
}

impl Breaker {
    /// A closed breaker.
    pub fn new(config: BreakerConfig) -> Breaker {
        Breaker {
            config: BreakerConfig {
                failures_to_open: config.failures_to_open.max(1),
                ..config
            },
            state: BreakerState::Closed(0),
        }
    }

    /// The current state.
    pub fn state(&self) -> BreakerState {
        self.state
    }

    /// Asks to call the store at `now`.
    pub fn permit(&mut self, now: Nanos) -> Permit {
        let (state, permit) = self.state.permit(now);
        self.state = state;
        permit
    }

    /// Reports how a permitted call ended.
    pub fn record(&mut self, now: Nanos, permit: Permit, ok: bool) -> Transition {
        let (state, transition) = self.state.record(&self.config, now, permit, ok);
        self.state = state;
        transition
    }

    /// Gives back the probe of a call that ended without an answer about the store (its
    /// caller went away first), at `now`: the next call from `now` on probes instead.
    pub fn release(&mut self, now: Nanos) {
        self.state = self.state.release(now);
    }
}

impl BreakerState {
    /// Asking for a permit at `now`: the state after it, and the permit.
    fn permit(self, now: Nanos) -> (BreakerState, Permit) {
        match self {
            BreakerState::Closed(_) => (self, Permit::Call),
            BreakerState::Open(until) if now >= until => (BreakerState::HalfOpen, Permit::Probe),
            BreakerState::Open(_) | BreakerState::HalfOpen => (self, Permit::Skip),
        }
    }

    /// A permitted call's end: the state after it, and what changed.
    fn record(
        self,
        config: &BreakerConfig,
        now: Nanos,
        permit: Permit,
        ok: bool,
    ) -> (BreakerState, Transition) {
        let open = || BreakerState::Open(now.saturating_add(config.cooldown));
        match (self, ok) {
            (BreakerState::Closed(_), true) => (BreakerState::Closed(0), Transition::None),
            (BreakerState::Closed(n), false) if n + 1 >= config.failures_to_open => {
                (open(), Transition::Opened)
            }
            (BreakerState::Closed(n), false) => (BreakerState::Closed(n + 1), Transition::None),
            (BreakerState::HalfOpen, true) if permit == Permit::Probe => {
                (BreakerState::Closed(0), Transition::Closed)
            }
            (BreakerState::HalfOpen, false) if permit == Permit::Probe => {
                (open(), Transition::Opened)
            }
            // A call permitted before the breaker opened, finishing late: it changes nothing.
            _ => (self, Transition::None),
        }
    }

    /// A probe given back at `now` unanswered: open no longer than until `now`, so the next
    /// call probes. A caller that goes away says nothing of the store's health; counted as a
    /// failure, it would keep the breaker open (and every request failing open) for as long
    /// as some client kept leaving mid-probe.
    fn release(self, now: Nanos) -> BreakerState {
        match self {
            BreakerState::HalfOpen => BreakerState::Open(now),
            other => other,
        }
    }
}

/// A [`Breaker`] shared by concurrent calls, without a lock: its state is one word, and each
/// permit or result is [`Breaker`]'s own transition applied by compare-and-swap (retried if
/// another call changed the state first), so the two give the same answers to the same
/// sequence. A transition that leaves the state as it was writes nothing: a closed breaker
/// with no failures, the usual case, is only read.
///
/// The word holds the state's kind in its top two bits and its count or instant in the
/// rest: an opening instant is kept to 2^62 ns (146 years), later ones as that.
#[derive(Debug)]
pub struct SharedBreaker {
    config: BreakerConfig,
    word: AtomicU64,
}

/// The instant bits of an open breaker's word.
const INSTANT: u64 = (1 << 62) - 1;
/// The kind bits of an open breaker's word.
const OPEN: u64 = 1 << 62;
/// A half-open breaker's word.
const HALF_OPEN: u64 = 2 << 62;

fn encode(state: BreakerState) -> u64 {
    match state {
        BreakerState::Closed(n) => u64::from(n),
        BreakerState::Open(until) => OPEN | until.as_u64().min(INSTANT),
        BreakerState::HalfOpen => HALF_OPEN,
    }
}

fn decode(word: u64) -> BreakerState {
    match word & !INSTANT {
        0 => BreakerState::Closed(u32::try_from(word).unwrap_or(u32::MAX)),
        OPEN => BreakerState::Open(Nanos(word & INSTANT)),
        _ => BreakerState::HalfOpen,
    }
}

impl SharedBreaker {
    /// A closed breaker (`failures_to_open` at least 1, as for [`Breaker::new`]).
    pub fn new(config: BreakerConfig) -> SharedBreaker {
        SharedBreaker {
            config: Breaker::new(config).config,
            word: AtomicU64::new(encode(BreakerState::Closed(0))),
        }
    }

    /// The current state.
    pub fn state(&self) -> BreakerState {
        decode(self.word.load(Ordering::Acquire))
    }

    /// Asks whether a call may go to the store at `now` ([`Breaker::permit`]).
    pub fn permit(&self, now: Nanos) -> Permit {
        self.apply(|state| state.permit(now))
    }

    /// Reports how a permitted call ended ([`Breaker::record`]).
    pub fn record(&self, now: Nanos, permit: Permit, ok: bool) -> Transition {
        self.apply(|state| state.record(&self.config, now, permit, ok))
    }

    /// Gives back an unanswered probe ([`Breaker::release`]).
    pub fn release(&self, now: Nanos) {
        self.apply(|state| (state.release(now), ()));
    }

    /// Applies `step` to the state as one atomic transition, and returns what it says.
    fn apply<R>(&self, step: impl Fn(BreakerState) -> (BreakerState, R)) -> R {
        let mut current = self.word.load(Ordering::Acquire);
        loop {
            let (next, said) = step(decode(current));
            let next = encode(next);
            if next == current {
                return said;
            }
            match self.word.compare_exchange_weak(
                current,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return said,
                Err(now_there) => current = now_there,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_consecutive_failures_probes_after_cooldown_and_closes() {
        let mut b = Breaker::new(BreakerConfig {
            failures_to_open: 3,
            cooldown: Nanos(100),
        });
        for t in 0..2 {
            assert_eq!(b.permit(Nanos(t)), Permit::Call);
            assert_eq!(b.record(Nanos(t), Permit::Call, false), Transition::None);
        }
        // A success resets the count.
        assert_eq!(b.record(Nanos(2), Permit::Call, true), Transition::None);
        for t in 3..5 {
            b.record(Nanos(t), Permit::Call, false);
        }
        assert_eq!(b.record(Nanos(5), Permit::Call, false), Transition::Opened);
        assert_eq!(b.permit(Nanos(104)), Permit::Skip);
        assert_eq!(b.permit(Nanos(105)), Permit::Probe);
        assert_eq!(b.permit(Nanos(106)), Permit::Skip, "one probe at a time");
        assert_eq!(
            b.record(Nanos(107), Permit::Probe, false),
            Transition::Opened
        );
        assert_eq!(b.permit(Nanos(207)), Permit::Probe);
        assert_eq!(
            b.record(Nanos(208), Permit::Probe, true),
            Transition::Closed
        );
        assert_eq!(b.state(), BreakerState::Closed(0));
    }

    /// A small seeded generator for the sequences below.
    fn next(seed: &mut u64) -> u64 {
        *seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        *seed >> 33
    }

    #[test]
    fn the_shared_breaker_answers_as_the_breaker_does() {
        for run in 0..200u64 {
            let mut seed = run;
            let config = BreakerConfig {
                failures_to_open: 1 + (next(&mut seed) % 4) as u32,
                cooldown: Nanos(next(&mut seed) % 50),
            };
            let (mut one, shared) = (Breaker::new(config), SharedBreaker::new(config));
            let mut now = 0;
            let mut held = Vec::new();
            for step in 0..300 {
                now += next(&mut seed) % 20;
                let at = Nanos(now);
                if next(&mut seed).is_multiple_of(2) || held.is_empty() {
                    let p = one.permit(at);
                    assert_eq!(shared.permit(at), p, "run {run} step {step}: permit");
                    if p != Permit::Skip {
                        held.push(p);
                    }
                } else {
                    let p = held.swap_remove((next(&mut seed) as usize) % held.len());
                    let ok = !next(&mut seed).is_multiple_of(3);
                    if p == Permit::Probe && next(&mut seed).is_multiple_of(4) {
                        one.release(at);
                        shared.release(at);
                    } else {
                        assert_eq!(
                            shared.record(at, p, ok),
                            one.record(at, p, ok),
                            "run {run} step {step}: record"
                        );
                    }
                }
                assert_eq!(shared.state(), one.state(), "run {run} step {step}: state");
            }
        }
    }

    #[test]
    fn an_instant_past_the_words_range_is_kept_as_its_last() {
        let b = SharedBreaker::new(BreakerConfig {
            failures_to_open: 1,
            cooldown: Nanos(u64::MAX),
        });
        assert_eq!(b.record(Nanos(5), Permit::Call, false), Transition::Opened);
        assert_eq!(b.state(), BreakerState::Open(Nanos(INSTANT)));
        assert_eq!(b.permit(Nanos(INSTANT - 1)), Permit::Skip);
    }

    #[test]
    fn concurrent_failures_open_the_shared_breaker_once_and_one_probe_goes_through() {
        use std::sync::{Arc, Barrier};
        const THREADS: usize = 8;
        for _ in 0..50 {
            let b = Arc::new(SharedBreaker::new(BreakerConfig {
                failures_to_open: THREADS as u32 / 2,
                cooldown: Nanos(10),
            }));
            let gate = Arc::new(Barrier::new(THREADS));
            let run = |f: fn(&SharedBreaker) -> bool| {
                let threads: Vec<_> = (0..THREADS)
                    .map(|_| {
                        let (b, gate) = (b.clone(), gate.clone());
                        std::thread::spawn(move || {
                            gate.wait();
                            f(&b)
                        })
                    })
                    .collect();
                threads
                    .into_iter()
                    .map(|t| t.join().expect("no panic"))
                    .filter(|&won| won)
                    .count()
            };
            let opened = run(|b| b.record(Nanos(0), Permit::Call, false) == Transition::Opened);
            assert_eq!(opened, 1, "one failure of the eight opens it");
            assert_eq!(b.state(), BreakerState::Open(Nanos(10)));
            let probes = run(|b| b.permit(Nanos(10)) == Permit::Probe);
            assert_eq!(probes, 1, "one probe at a time");
            assert_eq!(b.state(), BreakerState::HalfOpen);
        }
    }
}
