//! Leaky bucket in nginx's form (`limit_req`): a key's *excess*, in thousandths of a
//! request, leaks at `rate` requests a second, counted in whole milliseconds of the
//! limiter's clock. A request at millisecond `m` to a key last admitted at `last` with
//! excess `x` computes `x' = max(x − rate·(m − last) + 1000·cost, 0)` and is denied when
//! `x' > burst·1000`; admitted, the key keeps `x'` and `last = m`. A key's first request is
//! admitted with excess `1000·(cost − 1)`. `remaining` is `(burst·1000 − x') / 1000`
//! rounded down (nginx reports none); a denied request is admitted again at the first
//! millisecond the leak leaves room for it (the leak empties any excess, so every cost is
//! admitted in time). The probe's `leaky-bucket` claim is held to the token bucket of
//! `burst + 1` at `rate`; this family refines it to nginx's millisecond clock.

use super::spec::{Family, Said};
use crate::linearizable::Op;
use ratelab_core::Nanos;

/// nginx `limit_req`'s specification: `rate=R r/s` and `burst=B`, as `nodelay` applies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NginxLeakyBucket {
    /// Requests a second.
    pub rate: u64,
    /// The burst, requests.
    pub burst: u64,
}

/// A key's excess (thousandths) and its last admission's millisecond; `None`: never.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State(Option<(u64, u64)>);

const MS: u64 = 1_000_000;

impl NginxLeakyBucket {
    /// `max(x − rate·(m − last) + 1000·cost, 0)`: the leak is `rate·1000` thousandths a
    /// second, `rate` a millisecond. A clock that stepped back counts as no time passed (as
    /// one millisecond, a minute or more back), as nginx does.
    fn excess_at(&self, excess: u64, last: u64, m: u64, cost: u64) -> u64 {
        let elapsed = match m.checked_sub(last) {
            Some(d) => d,
            None if last - m > 60_000 => 1,
            None => 0,
        };
        excess
            .saturating_add(1000u64.saturating_mul(cost))
            .saturating_sub(self.rate.saturating_mul(elapsed))
    }
}

impl Family for NginxLeakyBucket {
    type State = State;

    fn name(&self) -> &'static str {
        "leaky bucket (nginx)"
    }

    fn fresh(&self, _ops: &[Op]) -> Vec<State> {
        vec![State(None)]
    }

    /// nginx leaves a node untouched when it rejects.
    fn denials_keep_state(&self) -> bool {
        true
    }

    fn decide(&self, s: &State, at: Nanos, cost: u64) -> (Said, State) {
        let m = at.as_u64() / MS;
        let burst = self.burst.saturating_mul(1000);
        let excess = match s.0 {
            None => 1000u64.saturating_mul(cost.saturating_sub(1)),
            Some((x, last)) => self.excess_at(x, last, m, cost),
        };
        let allowed = excess <= burst;
        let next = if allowed {
            State(Some((excess, m)))
        } else {
            s.clone()
        };
        let retry_at = match (allowed, s.0) {
            (false, Some((x, last))) => {
                // The first millisecond d after `last` with x − ⌊rate·1000·d/1000⌋ +
                // 1000·cost ≤ burst (and d at least m − last).
                let need = x
                    .saturating_add(1000u64.saturating_mul(cost))
                    .saturating_sub(burst);
                let d = need.div_ceil(self.rate.max(1)).max(m.saturating_sub(last));
                Some(Nanos(last.saturating_add(d).saturating_mul(MS)))
            }
            _ => None,
        };
        let said = Said {
            allowed,
            remaining: burst.saturating_sub(excess) / 1000,
            retry_at,
        };
        (said, next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::check_key;
    use crate::family::testing::{allowed, denied, ms, unstamped, violation_at};
    use crate::linearizable::{DEFAULT_BUDGET, Verdict};

    /// `rate=10r/s burst=2`: three at once, then one every 100 ms.
    const SPEC: NginxLeakyBucket = NginxLeakyBucket { rate: 10, burst: 2 };

    #[test]
    fn a_burst_then_the_rate() {
        let ops = [
            allowed(0, ms(0), 2),
            allowed(1, ms(0), 1),
            allowed(2, ms(0), 0),
            denied(3, ms(50), Some(ms(50))),
            allowed(4, ms(100), 0),
            denied(5, ms(150), Some(ms(50))),
            allowed(6, ms(400), 2),
        ];
        assert_eq!(
            check_key(&SPEC, &ops, DEFAULT_BUDGET),
            Verdict::Linearizable
        );
        assert_eq!(
            check_key(&SPEC, &unstamped(&ops), DEFAULT_BUDGET),
            Verdict::Linearizable
        );
    }

    #[test]
    fn a_fourth_in_the_burst_is_over_admission_and_a_denial_after_the_leak_phantom() {
        let four = [
            allowed(0, ms(0), 2),
            allowed(1, ms(0), 1),
            allowed(2, ms(0), 0),
            allowed(3, ms(10), 0),
        ];
        assert!(violation_at(&check_key(&SPEC, &four, DEFAULT_BUDGET), 3));
        let phantom = [
            allowed(0, ms(0), 2),
            allowed(1, ms(0), 1),
            allowed(2, ms(0), 0),
            denied(3, ms(100), Some(ms(100))),
        ];
        match check_key(&SPEC, &phantom, DEFAULT_BUDGET) {
            Verdict::Violation(v) => assert!(v.id == 3 && v.phantom_denial, "{v:?}"),
            v => panic!("{v:?}"),
        }
    }
}
