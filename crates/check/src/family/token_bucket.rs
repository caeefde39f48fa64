//! Token bucket (GCRA): a bucket of B tokens gaining `amount` every `period`, its state the
//! instant it is full again (its theoretical arrival time, TAT), on a time scale where a
//! token is `period` units and a nanosecond `amount` units, so every step is exact integer
//! arithmetic. A request of cost c at time t, with deficit d = max(TAT − t, 0): admitted iff
//! d + c·period ≤ B·period, and then TAT becomes max(TAT, t) + c·period and `remaining` is
//! ⌊(B·period − d − c·period) / period⌋; denied otherwise, with `retry_after` =
//! ⌈(d + c·period − B·period) / amount⌉ ns and TAT unchanged.
//!
//! The family's state is a *range* of TATs ([`Tats`]), not one: an answered request pins the
//! TAT to a range (its `remaining` or `retry_after` to one period's or one nanosecond's
//! worth), and one decided at a moment known only within a span, or an unanswered one that
//! took effect at an unknown moment, widens it. Every step maps a range onto a range —
//! `max(TAT, t) + c·period` is monotone and continuous — so one range holds exactly the
//! states reachable along one order, and the answers of a probe whose decision times are
//! known only within each request's flight are judged exactly, at every moment at once
//! ([`Family::explain`], [`Family::took_effect`]). A key others may have used before the
//! history began starts from every state from empty to full ([`Initial::Unknown`]).

use super::spec::{Family, Judged, Said, Sustains};
use crate::linearizable::{Initial, Op, Seen, Spec};
use ratelab_core::Nanos;

/// The bucket's possible states: every TAT from `lo` to `hi` (scaled units, ns × `amount`).
///
/// An answered request pins the TAT to a range (its `remaining` or `retry_after` to one
/// period's or one nanosecond's worth); an unanswered one that took effect at an unknown
/// moment widens it. Every step maps a range onto a range — `max(TAT, t) + c·period` is
/// monotone and continuous — so one range holds exactly the states reachable along one
/// order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tats {
    lo: i128,
    hi: i128,
}

impl Tats {
    const EMPTY_BUCKET_AT_ZERO: Tats = Tats { lo: 0, hi: 0 };
    /// Any state: far enough either way that no step overflows.
    const ANY: Tats = Tats {
        lo: i128::MIN / 4,
        hi: i128::MAX / 4,
    };

    /// The states before the first operation, for a history whose earlier decisions were all
    /// made by `first`: a bucket is at most empty then, so its TAT is at most
    /// `first` + B·period.
    pub(crate) fn initial(initial: Initial, spec: &Spec, first: Nanos) -> Tats {
        match initial {
            Initial::Full => Tats::EMPTY_BUCKET_AT_ZERO,
            Initial::Unknown => {
                let k = spec.scaled(first, 0);
                Tats {
                    lo: Tats::ANY.lo,
                    hi: k.now + k.full,
                }
            }
        }
    }

    fn clamp(self, lo: i128, hi: i128) -> Option<Tats> {
        let t = Tats {
            lo: self.lo.max(lo),
            hi: self.hi.min(hi),
        };
        (t.lo <= t.hi).then_some(t)
    }
}

/// An answer the specification cannot give from a range of states.
struct Unexplained {
    detail: String,
    phantom_denial: bool,
}

/// The specification's own numbers for one request, in scaled units.
struct Scaled {
    now: i128,
    full: i128,
    need: i128,
    period: i128,
    amount: i128,
}

impl Spec {
    fn scaled(&self, at: Nanos, cost: u64) -> Scaled {
        let period = i128::from(self.period.as_u64()).max(1);
        let amount = i128::from(self.amount).max(1);
        Scaled {
            now: i128::from(at.as_u64()) * amount,
            full: i128::from(self.capacity) * period,
            need: i128::from(cost) * period,
            period,
            amount,
        }
    }

    /// The range of states after `op`, as the client saw it, from `tats`; or what the spec
    /// says instead. The decision fell at some moment from `at` to `at + decided_within`:
    /// every bound below is the union over those moments (for one moment, exact).
    fn explain_range(&self, tats: Tats, op: &Op) -> Result<Tats, Unexplained> {
        let within = |at: Nanos| {
            Nanos(
                at.as_u64()
                    .saturating_add(op.precision.decided_within.as_u64()),
            )
        };
        match op.seen {
            Seen::Allowed { at, remaining } => {
                let (a, b) = (self.scaled(at, op.cost), self.scaled(within(at), op.cost));
                // Admitted: deficit + need ≤ full, so TAT ≤ now + full − need (and a deficit
                // is never negative: no state admits more than the bucket holds).
                let mut hi = b.now + b.full - b.need;
                let mut lo = i128::MIN;
                let mut possible = a.need <= a.full;
                if let Some(r) = remaining {
                    // ⌊(full − deficit − need) / period⌋ = r.
                    let r = i128::from(r);
                    possible &= a.full - a.need - r * a.period >= 0;
                    hi = hi.min(b.now + b.full - b.need - r * b.period);
                    let above = a.full - a.need - (r + 1) * a.period;
                    if above >= 0 {
                        lo = a.now + above + 1;
                    }
                }
                match tats.clamp(lo, hi).filter(|_| possible) {
                    Some(t) => Ok(Tats {
                        lo: t.lo.max(a.now) + a.need,
                        hi: t.hi.max(b.now) + b.need,
                    }),
                    None => Err(Unexplained {
                        detail: format!(
                            "admitted{} at {at}; {}",
                            remaining.map_or(String::new(), |r| format!(" with remaining {r}")),
                            self.says(tats, at, op.cost)
                        ),
                        phantom_denial: false,
                    }),
                }
            }
            Seen::Denied { at, retry_after } => {
                let (a, b) = (self.scaled(at, op.cost), self.scaled(within(at), op.cost));
                // Denied: deficit + need > full (any state denies a cost beyond the capacity).
                let beyond = a.need > a.full;
                let mut lo = if beyond {
                    i128::MIN
                } else {
                    a.now + a.full - a.need + 1
                };
                let mut hi = i128::MAX;
                let mut possible = true;
                if let Some(w) = retry_after {
                    // ⌈(deficit + need − full) / amount⌉ = the true wait, at least 1 ns on a
                    // denial, which the reported `w` rounds up to a multiple of the unit: a
                    // wait from w − unit + 1 to w.
                    let w = i128::from(w.as_u64());
                    let unit = i128::from(op.precision.retry_after_unit.as_u64().max(1));
                    let least = (w - unit + 1).max(1);
                    possible = least <= w;
                    lo = lo.max(a.now + (least - 1) * a.amount + a.full - a.need + 1);
                    hi = b.now + w * b.amount + b.full - b.need;
                }
                tats.clamp(lo, hi)
                    .filter(|_| possible)
                    .ok_or_else(|| Unexplained {
                        detail: format!(
                            "denied{} at {at}; {}",
                            retry_after.map_or(String::new(), |w| format!(" with retry after {w}")),
                            self.says(tats, at, op.cost)
                        ),
                        // Admitted at the earliest moment from the fullest state and the emptiest.
                        phantom_denial: !beyond && tats.hi <= a.now + a.full - a.need,
                    })
            }
            Seen::Unknown => Ok(tats),
        }
    }

    /// What the spec answers from the least and the most full state of `tats`.
    fn says(&self, tats: Tats, at: Nanos, cost: u64) -> String {
        let k = self.scaled(at, cost);
        let one = |tat: i128| {
            let deficit = (tat - k.now).max(0);
            if deficit + k.need <= k.full {
                format!("admits it, {} left", (k.full - deficit - k.need) / k.period)
            } else {
                let w = (deficit + k.need - k.full + k.amount - 1) / k.amount;
                format!(
                    "denies it, retry after {}",
                    Nanos(u64::try_from(w).unwrap_or(u64::MAX))
                )
            }
        };
        let (a, b) = (one(tats.hi), one(tats.lo));
        if a == b {
            format!("the spec {a}")
        } else {
            format!("the spec {a} to {b}")
        }
    }

    /// The states after an unanswered request of `cost` took effect (was admitted) at some
    /// moment from `from` to `to`; `None` if it could not have been admitted then.
    fn apply_unknown(&self, tats: Tats, from: Nanos, to: Nanos, cost: u64) -> Option<Tats> {
        let (a, b) = (self.scaled(from, cost), self.scaled(to.max(from), cost));
        // Admitted at τ needs TAT ≤ τ + full − need: the latest τ admits the most.
        let t = tats.clamp(i128::MIN, b.now + b.full - b.need)?;
        Some(Tats {
            lo: t.lo.max(a.now) + a.need,
            hi: t.hi.max(b.now) + b.need,
        })
    }
}

impl Family for Spec {
    type State = Tats;

    fn name(&self) -> &'static str {
        "token bucket"
    }

    /// Full: a key nobody used.
    fn fresh(&self, _ops: &[Op]) -> Vec<Tats> {
        vec![Tats::EMPTY_BUCKET_AT_ZERO]
    }

    /// A point's answer exactly; a range's, its emptiest state's (every fuller one admits
    /// whatever it admits), each state moved as that answer moves it.
    fn decide(&self, s: &Tats, at: Nanos, cost: u64) -> (Said, Tats) {
        let k = self.scaled(at, cost);
        let deficit = (s.hi - k.now).max(0);
        if deficit + k.need <= k.full {
            let said = Said {
                allowed: true,
                remaining: ((k.full - deficit - k.need) / k.period) as u64,
                retry_at: None,
            };
            let next = Tats {
                lo: s.lo.max(k.now) + k.need,
                hi: s.hi.max(k.now) + k.need,
            };
            return (said, next);
        }
        let wait = (deficit + k.need - k.full + k.amount - 1) / k.amount;
        let said = Said {
            allowed: false,
            remaining: ((k.full - deficit).max(0) / k.period) as u64,
            retry_at: (k.need <= k.full).then(|| {
                Nanos(
                    at.as_u64()
                        .saturating_add(u64::try_from(wait).unwrap_or(u64::MAX)),
                )
            }),
        };
        (said, *s)
    }

    /// The range the answer leaves, over every moment its decision may have fallen at.
    fn explain(&self, s: &Tats, op: &Op, next: &mut Vec<Tats>) -> Judged {
        match self.explain_range(*s, op) {
            Ok(t) => {
                next.push(t);
                Judged::default()
            }
            Err(e) => Judged {
                miss: Some((e.detail, e.phantom_denial)),
                guessed: false,
            },
        }
    }

    /// Admitted at some moment of the span (the range of TATs those moments give), or
    /// denied, which leaves the range as it was; either stands for every moment of the span,
    /// so for its start.
    fn took_effect(
        &self,
        s: &Tats,
        (from, to): (Nanos, Nanos),
        cost: u64,
        out: &mut Vec<(Tats, Nanos)>,
    ) {
        if let Some(t) = self.apply_unknown(*s, from, to, cost) {
            out.push((t, from));
        }
        out.push((*s, from));
    }

    /// Ranges are exact over any span.
    fn moments_cover(&self, _from: Nanos, _to: Nanos) -> bool {
        true
    }

    /// A range holds every range inside it.
    fn holds(&self, wider: &Tats, narrower: &Tats) -> bool {
        wider.lo <= narrower.lo && narrower.hi <= wider.hi
    }

    fn states_nest(&self) -> bool {
        true
    }

    /// One range holding them all (the store-stamped replay keeps one range: a request
    /// whose answer was lost was admitted or not).
    fn merge(&self, states: &mut Vec<Tats>) {
        if let Some(hull) = states.iter().copied().reduce(|a, b| Tats {
            lo: a.lo.min(b.lo),
            hi: a.hi.max(b.hi),
        }) {
            states.clear();
            states.push(hull);
        }
    }

    /// A denial moves no TAT.
    fn denials_keep_state(&self) -> bool {
        true
    }

    /// Any traffic within the bucket's own envelope, B + R·Δt.
    fn sustains(&self) -> Sustains {
        Sustains::Bucket {
            burst: self.capacity,
            amount: self.amount,
            period: self.period,
        }
    }

    /// Full again at the theoretical arrival time (the fullest state's, for a range).
    fn idle_from(&self, s: &Tats) -> Option<Nanos> {
        let amount = i128::from(self.amount).max(1);
        let at = (s.lo.max(0) + amount - 1) / amount;
        Some(Nanos(u64::try_from(at).unwrap_or(u64::MAX)))
    }
}

impl super::Specified for ratelab_core::TokenBucket {
    type Family = Spec;

    fn family(&self, _origin: Option<Nanos>) -> Spec {
        Spec {
            capacity: self.capacity(),
            amount: self.refill_amount(),
            period: self.refill_period(),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::family::check_key;
    use crate::family::testing::{
        allowed, answered_by, crowd, denied, ms, unstamped, violation_at,
    };
    use crate::linearizable::{self, DEFAULT_BUDGET, Seen, Spec, Verdict};
    use ratelab_core::{Nanos, TokenBucket};

    #[test]
    fn the_core_bucket_is_explained_stamped_and_black_box() {
        let core = TokenBucket::per_second(5, 3).unwrap();
        let spec = Spec::per_second(5, 3);
        let ops = answered_by(&core, 300, ms(400), 2);
        assert_eq!(
            check_key(&spec, &ops, DEFAULT_BUDGET),
            Verdict::Linearizable
        );
        let few = unstamped(&ops[..60]);
        assert_eq!(
            check_key(&spec, &few, DEFAULT_BUDGET),
            Verdict::Linearizable
        );
    }

    #[test]
    fn over_admission_and_phantom_denials_are_caught_stamped_and_black_box() {
        let spec = Spec::per_second(2, 1);
        let over = [
            allowed(0, ms(0), 1),
            allowed(1, ms(0), 0),
            allowed(2, ms(10), 0),
        ];
        let phantom = [allowed(0, ms(0), 1), denied(1, ms(10), Some(Nanos(1)))];
        for ops in [over.as_slice(), phantom.as_slice()] {
            let last = ops.len() as u64 - 1;
            assert!(violation_at(&check_key(&spec, ops, DEFAULT_BUDGET), last));
            assert!(violation_at(
                &check_key(&spec, &unstamped(ops), DEFAULT_BUDGET),
                last
            ));
        }
    }

    /// A probe's crowd on one key: requests sent every 0.5 to 2 ms, each in flight 30 to
    /// 60 ms and decided within 25 ms of its send, most turned away. The orders of the
    /// denials among themselves are more than any budget; a denial that leaves nothing to
    /// choose is taken at once, and a point whose states another with the same requests
    /// covered is not explored again: 200 000 states find an order for each crowd, and the
    /// default budget refutes it with a phantom denial sent after it, or one admission too
    /// many inside it (every order tried). Without the two reductions not even the crowds
    /// themselves were decided on the default budget.
    #[test]
    fn a_crowd_of_overlapping_denials_is_decided_on_a_modest_budget() {
        let spec = Spec::per_second(6, 20);
        let budget = 200_000;
        for (n, every, flight) in [
            (64, 500, 30),
            (64, 1_500, 30),
            (100, 2_000, 40),
            (200, 1_000, 60),
        ] {
            let ops = crowd(&spec, n, Nanos(every * 1_000), ms(flight), ms(25));
            let denied_n = ops.iter().filter(|o| matches!(o.seen, Seen::Denied { .. }));
            assert!(denied_n.count() as u64 > n / 2);
            let v = linearizable::check_key(&spec, &ops, budget);
            assert_eq!(v, Verdict::Linearizable, "{n} every {every} us");
            let mut late = ops.clone();
            late.push(unstamped(&[denied(n, ms(2_000), None)])[0]);
            let v = linearizable::check_key(&spec, &late, DEFAULT_BUDGET);
            assert!(
                matches!(&v, Verdict::Violation(x) if x.id == n && x.phantom_denial),
                "{v:?}"
            );
            let mut extra = ops.clone();
            extra.push(unstamped(&[allowed(n + 1, ms(1), 0)])[0]);
            let v = linearizable::check_key(&spec, &extra, DEFAULT_BUDGET);
            assert!(matches!(v, Verdict::Violation(_)), "{v:?}");
        }
    }

    #[test]
    fn an_idle_state_answers_as_a_fresh_key() {
        let named = crate::family::testing::assert_idle_answers_as_fresh(
            &crate::linearizable::Spec::per_second(5, 3),
            300,
            ms(400),
            3,
        );
        assert!(named > 100, "{named} states tight");
    }

    /// A leaky bucket as a meter, written from its own definition: a level of water that
    /// drains at `amount` per `period` and never below empty; a request of cost c is
    /// admitted while the level plus c fits in the capacity, and then fills it by c. Its level
    /// is kept in units of a token's `period`-th part, so draining is exact.
    struct Meter {
        capacity: i128,
        amount: i128,
        period: i128,
        level: i128,
        last: i128,
    }

    impl Meter {
        /// Admitted, and the whole tokens left.
        fn offer(&mut self, at: u64, cost: u64) -> (bool, u64) {
            let now = i128::from(at);
            let drained = (now - self.last).max(0) * self.amount;
            self.level = (self.level - drained).max(0);
            self.last = self.last.max(now);
            let need = i128::from(cost) * self.period;
            let full = self.capacity * self.period;
            if self.level + need > full {
                return (false, 0);
            }
            self.level += need;
            (true, ((full - self.level) / self.period) as u64)
        }
    }

    /// `leaky-bucket:RATE,BURST` is an alias of the token bucket of BURST + 1 at RATE: on
    /// generated sequences (costs, gaps from none to past a full drain, odd rates), the meter
    /// and the specification give the same decision and the same tokens left at every step.
    #[test]
    fn a_leaky_bucket_meter_decides_as_the_token_bucket_of_its_burst_plus_one() {
        use crate::family::Family;
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut admitted = 0;
        for (burst, amount, period) in [(5, 20, 1_000_000_000), (0, 10, 60_000_000_000), (9, 7, 3)]
        {
            let spec = Spec {
                capacity: burst + 1,
                amount,
                period: Nanos(period),
            };
            let mut meter = Meter {
                capacity: i128::from(burst + 1),
                amount: i128::from(amount),
                period: i128::from(period),
                level: 0,
                last: 0,
            };
            let mut state = spec.fresh(&[])[0];
            let mut at = 0u64;
            for _ in 0..5_000 {
                at += next(3 * period / amount.max(1) + 2);
                let cost = 1 + next(2);
                let (said, after) = spec.decide(&state, Nanos(at), cost);
                let (allowed, left) = meter.offer(at, cost);
                assert_eq!(said.allowed, allowed, "at {at} cost {cost}");
                if allowed {
                    assert_eq!(said.remaining, left, "at {at} cost {cost}");
                    admitted += 1;
                }
                state = after;
            }
        }
        assert!(
            admitted > 1_000,
            "{admitted} admitted: the sequences exercise both answers"
        );
    }
}
