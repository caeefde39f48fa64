//! Sliding log (exact): every admission is logged with its time; a request at `t` is
//! admitted when the cost admitted in `(t − window, t]` plus its own is at most `limit`;
//! `remaining` is the limit less that sum after it; a denied request is admitted again at
//! the first instant enough logged admissions have left the window (never, if its cost
//! exceeds the limit). An admission logged at a later time than a request's clock (a clock
//! that stepped back) still counts.

use super::spec::{Family, Said, Sustains};
use crate::linearizable::Op;
use ratelab_core::Nanos;

/// A sliding log's specification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlidingLog {
    /// Units admitted in any window.
    pub limit: u64,
    /// The window's length.
    pub window: Nanos,
}

/// A key's log: the admissions (time, cost) still inside the window of the last decision,
/// oldest first.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    log: Vec<(Nanos, u64)>,
}

impl SlidingLog {
    /// Whether an admission at `logged` is inside the window ending at `at`.
    fn inside(&self, logged: Nanos, at: Nanos) -> bool {
        logged.as_u64().saturating_add(self.window.as_u64()) > at.as_u64()
    }
}

impl Family for SlidingLog {
    type State = State;

    fn name(&self) -> &'static str {
        "sliding log"
    }

    fn counted_within(&self) -> Option<(Nanos, u64)> {
        Some((self.window, self.limit))
    }

    fn fresh(&self, _ops: &[Op]) -> Vec<State> {
        vec![State { log: Vec::new() }]
    }

    fn decide(&self, s: &State, at: Nanos, cost: u64) -> (Said, State) {
        let mut log: Vec<(Nanos, u64)> = s
            .log
            .iter()
            .copied()
            .filter(|&(t, _)| self.inside(t, at))
            .collect();
        let used: u64 = log.iter().map(|&(_, c)| c).sum();
        let allowed = used.saturating_add(cost) <= self.limit;
        let mut retry_at = None;
        if allowed {
            let i = log.partition_point(|&(t, _)| t <= at);
            log.insert(i, (at, cost));
        } else if cost <= self.limit {
            // Drop the oldest until the rest leaves room: the last dropped leaves the window
            // one window after it was logged.
            let mut rest = used;
            for &(t, c) in &log {
                rest -= c;
                if rest + cost <= self.limit {
                    retry_at = Some(Nanos(t.as_u64().saturating_add(self.window.as_u64())));
                    break;
                }
            }
        }
        let now_used = if allowed { used + cost } else { used };
        let said = Said {
            allowed,
            remaining: self.limit.saturating_sub(now_used),
            retry_at,
        };
        (said, State { log })
    }

    /// A decision counts the admissions of the window before it.
    fn sustains(&self) -> Sustains {
        Sustains::Window {
            limit: self.limit,
            span: self.window,
        }
    }

    /// Idle once the last admission logged has left the window.
    fn idle_from(&self, s: &State) -> Option<Nanos> {
        let last = s.log.iter().map(|&(t, _)| t).max();
        Some(last.map_or(Nanos::ZERO, |t| {
            Nanos(t.as_u64().saturating_add(self.window.as_u64()))
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::check_key;
    use crate::family::testing::{allowed, denied, ms, unstamped, violation_at};
    use crate::linearizable::{DEFAULT_BUDGET, Verdict};

    const SPEC: SlidingLog = SlidingLog {
        limit: 3,
        window: Nanos(1_000_000_000),
    };

    fn three() -> Vec<Op> {
        vec![
            allowed(0, ms(100), 2),
            allowed(1, ms(400), 1),
            allowed(2, ms(900), 0),
        ]
    }

    #[test]
    fn each_admission_leaves_one_window_after_it() {
        let mut ops = three();
        ops.push(denied(3, ms(1_050), Some(ms(50))));
        ops.push(allowed(4, ms(1_100), 0));
        ops.push(denied(5, ms(1_300), Some(ms(100))));
        ops.push(allowed(6, ms(1_400), 0));
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
    fn a_window_reset_at_a_boundary_is_over_admission() {
        // A fixed window would admit at 1 000: the log still holds three.
        let mut ops = three();
        ops.push(allowed(3, ms(1_000), 2));
        assert!(violation_at(&check_key(&SPEC, &ops, DEFAULT_BUDGET), 3));
        assert!(violation_at(
            &check_key(&SPEC, &unstamped(&ops), DEFAULT_BUDGET),
            3
        ));
    }

    #[test]
    fn a_denial_once_an_admission_left_is_a_phantom_denial() {
        let mut ops = three();
        ops.push(denied(3, ms(1_200), Some(ms(200))));
        match check_key(&SPEC, &ops, DEFAULT_BUDGET) {
            Verdict::Violation(v) => assert!(v.id == 3 && v.phantom_denial, "{v:?}"),
            v => panic!("{v:?}"),
        }
    }

    #[test]
    fn a_retry_after_that_waits_for_the_wrong_admission_is_caught() {
        let mut ops = three();
        ops.push(denied(3, ms(1_050), Some(ms(350))));
        assert!(violation_at(&check_key(&SPEC, &ops, DEFAULT_BUDGET), 3));
    }

    #[test]
    fn an_idle_state_answers_as_a_fresh_key() {
        let named = crate::family::testing::assert_idle_answers_as_fresh(
            &SlidingLog {
                limit: 4,
                window: ms(1000),
            },
            300,
            ms(400),
            3,
        );
        assert!(named > 100, "{named} states tight");
    }

    /// Two requests whose answers never came, sent at 0.5 s while two admissions from 0 fill
    /// the window: they can be admitted only from 1 s on, and then both are in the window of
    /// the admission at 1.6 s, which no order explains. Taking effect in an order that runs
    /// time backwards (one at 1.3 s, then one at 0.5 s) would explain it: the search must not.
    #[test]
    fn unanswered_requests_take_effect_in_time_order() {
        use crate::family::testing::op;
        use crate::linearizable::Seen;
        let spec = SlidingLog {
            limit: 2,
            window: Nanos(1_000_000_000),
        };
        let ops = unstamped(&[
            allowed(0, ms(0), 1),
            allowed(1, ms(0), 0),
            op(2, ms(500), 1, Seen::Unknown),
            op(3, ms(500), 1, Seen::Unknown),
            denied(4, ms(1_300), None),
            allowed(5, ms(1_600), 0),
        ]);
        assert_ne!(
            check_key(&spec, &ops, DEFAULT_BUDGET),
            Verdict::Linearizable
        );
    }
}
