//! Token bucket refilled in whole-period steps (bucket4j's *intervally* refill; buckets that
//! count refills by elapsed periods): it holds at most `capacity` tokens; every whole
//! `period` since its anchor adds `amount`, up to the capacity, and moves the anchor on by
//! that period, so no part of a period is lost. A key nobody used is full, anchored at its
//! first request; a request that finds it full anchors it there, as a new key would be. A
//! request takes its cost in tokens or is denied and takes none; `remaining` is the tokens
//! left; a denied request is admitted again once enough steps have come (never, if its cost
//! exceeds the capacity).

use super::spec::{Family, Said, Sustains};
use crate::linearizable::Op;
use ratelab_core::Nanos;

/// A stepped bucket's specification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SteppedBucket {
    /// Tokens it holds at most.
    pub capacity: u64,
    /// Tokens each step adds.
    pub amount: u64,
    /// The time between steps.
    pub period: Nanos,
}

/// A key's bucket: its tokens, and the instant its steps count from (`None`: never used).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    tokens: u64,
    anchor: Option<Nanos>,
}

impl SteppedBucket {
    /// The instant of the `k`-th step after `anchor`.
    fn step(&self, anchor: Nanos, k: u64) -> Nanos {
        Nanos(
            anchor
                .as_u64()
                .saturating_add(k.saturating_mul(self.period.as_u64())),
        )
    }

    /// The instant a bucket anchored at `anchor` holding `tokens` holds `want`.
    fn holds_at(&self, anchor: Nanos, tokens: u64, want: u64) -> Nanos {
        self.step(anchor, want.saturating_sub(tokens).div_ceil(self.amount))
    }

    /// The bucket as a request at `at` finds it: its tokens and its anchor.
    fn at(&self, s: &State, at: Nanos) -> (u64, Nanos) {
        let Some(anchor) = s.anchor else {
            return (self.capacity, at);
        };
        let steps = at.as_u64().saturating_sub(anchor.as_u64()) / self.period.as_u64().max(1);
        let gained = u128::from(steps) * u128::from(self.amount);
        let tokens = (u128::from(s.tokens) + gained).min(u128::from(self.capacity)) as u64;
        let anchor = self.step(anchor, steps);
        if tokens == self.capacity {
            (tokens, anchor.max(at))
        } else {
            (tokens, anchor)
        }
    }
}

impl Family for SteppedBucket {
    type State = State;

    fn name(&self) -> &'static str {
        "stepped token bucket"
    }

    fn fresh(&self, _ops: &[Op]) -> Vec<State> {
        vec![State {
            tokens: self.capacity,
            anchor: None,
        }]
    }

    fn decide(&self, s: &State, at: Nanos, cost: u64) -> (Said, State) {
        let (mut tokens, anchor) = self.at(s, at);
        let allowed = cost <= tokens;
        if allowed {
            tokens -= cost;
        }
        let said = Said {
            allowed,
            remaining: tokens,
            retry_at: (!allowed && cost <= self.capacity)
                .then(|| self.holds_at(anchor, tokens, cost)),
        };
        let next = State {
            tokens,
            anchor: Some(anchor),
        };
        (said, next)
    }

    /// Cut at the steps in `[from, to]`, so each piece counts the same steps (at most 64
    /// pieces; past that, the span whole). A full bucket's anchor moves with the exact
    /// moment, so the pieces' ends do not cover every state.
    fn moments(&self, s: &State, from: Nanos, to: Nanos) -> Vec<(Nanos, Nanos)> {
        let Some(anchor) = s.anchor else {
            return vec![(from, to)];
        };
        let period = self.period.as_u64().max(1);
        let first = from.as_u64().saturating_sub(anchor.as_u64()) / period;
        let mut pieces = Vec::new();
        let mut lo = from;
        // The steps after `from` up to `to`, none past u64::MAX; at most 64 pieces.
        let steps = (1..=64u64)
            .map_while(|k| {
                first
                    .checked_add(k)?
                    .checked_mul(period)?
                    .checked_add(anchor.as_u64())
            })
            .take_while(|&step| step <= to.as_u64());
        for step in steps {
            if step > lo.as_u64() {
                pieces.push((lo, Nanos(step - 1)));
                lo = Nanos(step);
            }
        }
        if pieces.len() == 64 {
            return vec![(from, to)];
        }
        pieces.push((lo, to));
        pieces
    }

    /// Traffic a bucket of capacity B − A at A per period admits, this one admits: a step
    /// comes at least once a period, so from the first one it never holds fewer tokens.
    /// Where one step fills it (A ≥ B), whatever comes at most B per period.
    fn sustains(&self) -> Sustains {
        if self.capacity > self.amount {
            Sustains::Bucket {
                burst: self.capacity - self.amount,
                amount: self.amount,
                period: self.period,
            }
        } else {
            Sustains::Window {
                limit: self.capacity,
                span: self.period,
            }
        }
    }

    /// Idle once the steps have filled it.
    fn idle_from(&self, s: &State) -> Option<Nanos> {
        Some(s.anchor.map_or(Nanos::ZERO, |anchor| {
            self.holds_at(anchor, s.tokens, self.capacity)
        }))
    }
}

impl super::Specified for ratelab_core::SteppedBucket {
    type Family = SteppedBucket;

    fn family(&self, _origin: Option<Nanos>) -> SteppedBucket {
        SteppedBucket {
            capacity: self.capacity(),
            amount: self.refill_amount(),
            period: self.refill_period(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::check_key;
    use crate::family::testing::{allowed, answered_by, denied, ms, unstamped, violation_at};
    use crate::linearizable::{DEFAULT_BUDGET, Verdict};
    use ratelab_core::Algorithm;

    const SPEC: SteppedBucket = SteppedBucket {
        capacity: 3,
        amount: 2,
        period: Nanos(1_000_000_000),
    };

    #[test]
    fn the_core_stepped_bucket_is_explained_replayed_and_searched() {
        for (capacity, amount) in [(3, 2), (5, 1), (2, 4)] {
            let core = ratelab_core::SteppedBucket::new(capacity, amount, ms(100)).unwrap();
            let spec = SteppedBucket {
                capacity,
                amount,
                period: ms(100),
            };
            let ops = answered_by(&core, 300, ms(60), 2);
            assert_eq!(
                check_key(&spec, &ops, DEFAULT_BUDGET),
                Verdict::Linearizable,
                "B = {capacity}, A = {amount}"
            );
            let few = unstamped(&ops[..40]);
            assert_eq!(
                check_key(&spec, &few, DEFAULT_BUDGET),
                Verdict::Linearizable
            );
        }
    }

    #[test]
    fn the_core_answers_every_field_as_the_specification_does() {
        // Its own generator, not the core's: gaps across steps and past a full refill.
        let core = ratelab_core::SteppedBucket::new(4, 3, ms(70)).unwrap();
        let spec = SteppedBucket {
            capacity: 4,
            amount: 3,
            period: ms(70),
        };
        let (mut kept, mut state) = (None, spec.fresh(&[]).remove(0));
        let mut t = 0u64;
        for i in 0..20_000u64 {
            t += (i * 2_654_435_761) % 97 * 1_000_000 / 3;
            if i % 50 == 0 {
                t += 300_000_000;
            }
            let (at, cost) = (Nanos(t), 1 + i % 4);
            let (s, d) = core.transition(kept, at, cost).unwrap();
            let (said, next) = spec.decide(&state, at, cost);
            assert_eq!(
                (d.allowed, d.remaining),
                (said.allowed, said.remaining),
                "step {i} at {at}"
            );
            let retry_at = d.retry_after.map(|r| Nanos(t + r.as_u64()));
            assert_eq!(retry_at, said.retry_at, "step {i}");
            assert_eq!(Some(core.expires_at(&s)), spec.idle_from(&next), "step {i}");
            (kept, state) = (Some(s), next);
        }
    }

    #[test]
    fn a_continuous_bucket_is_caught_admitting_between_steps() {
        // Emptied at 0; a continuous bucket of 2 a second holds a token at 500 ms.
        let ops = vec![
            allowed(0, ms(0), 2),
            allowed(1, ms(1), 1),
            allowed(2, ms(2), 0),
            allowed(3, ms(500), 0),
        ];
        assert!(violation_at(&check_key(&SPEC, &ops, DEFAULT_BUDGET), 3));
        let ops = vec![
            allowed(0, ms(0), 2),
            allowed(1, ms(1), 1),
            allowed(2, ms(2), 0),
            denied(3, ms(500), Some(ms(500))),
            allowed(4, ms(1_000), 1),
        ];
        assert_eq!(
            check_key(&SPEC, &ops, DEFAULT_BUDGET),
            Verdict::Linearizable
        );
    }

    #[test]
    fn a_bucket_that_loses_the_part_of_a_period_is_caught() {
        // Anchored at 0 and emptied; a request at 900 ms must not restart the period: the
        // step at 1 000 ms adds 2.
        let ops = vec![
            allowed(0, ms(0), 2),
            allowed(1, ms(0), 1),
            allowed(2, ms(0), 0),
            denied(3, ms(900), Some(ms(100))),
            denied(4, ms(1_000), Some(ms(900))),
        ];
        assert!(violation_at(&check_key(&SPEC, &ops, DEFAULT_BUDGET), 4));
    }

    #[test]
    fn pieces_end_at_the_last_instant() {
        let end = Nanos(u64::MAX);
        let s = State {
            tokens: 0,
            anchor: Some(Nanos(u64::MAX - 10)),
        };
        assert_eq!(
            SPEC.moments(&s, Nanos(u64::MAX - 5), end),
            vec![(Nanos(u64::MAX - 5), end)]
        );
        let tight = SteppedBucket {
            period: Nanos(1),
            ..SPEC
        };
        let s = State {
            tokens: 0,
            anchor: Some(Nanos::ZERO),
        };
        assert_eq!(tight.moments(&s, end, end), vec![(end, end)]);
        assert_eq!(
            tight.moments(&s, Nanos::ZERO, end),
            vec![(Nanos::ZERO, end)]
        );
    }

    #[test]
    fn pieces_are_cut_at_the_steps() {
        let s = State {
            tokens: 0,
            anchor: Some(ms(0)),
        };
        assert_eq!(
            SPEC.moments(&s, ms(500), ms(2_500)),
            vec![
                (ms(500), Nanos(ms(1_000).as_u64() - 1)),
                (ms(1_000), Nanos(ms(2_000).as_u64() - 1)),
                (ms(2_000), ms(2_500)),
            ]
        );
    }
}
