//! Fixed window opened by a key's first request (an `INCR` whose first call sets the key's
//! `EXPIRE`): a window opens at the first request after the last one ended and lasts
//! `window`; at most `limit` is admitted in it; `remaining` is the limit less its count; a
//! denied request is admitted again when the window ends (never, if its cost exceeds the
//! limit). A request whose clock reads earlier than its window's start is counted in it.

use super::spec::{Family, Said, Sustains};
use crate::linearizable::Op;
use ratelab_core::Nanos;

/// A first-hit window's specification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FirstHitWindow {
    /// Units admitted per window.
    pub limit: u64,
    /// The window's length.
    pub window: Nanos,
}

/// A key's window: when it opened (`None`: never), its count.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    start: Option<Nanos>,
    count: u64,
}

impl FirstHitWindow {
    fn end(&self, start: Nanos) -> Nanos {
        Nanos(start.as_u64().saturating_add(self.window.as_u64()))
    }
}

impl Family for FirstHitWindow {
    type State = State;

    fn name(&self) -> &'static str {
        "first-hit window"
    }

    fn first_window(&self) -> Option<(Nanos, u64)> {
        Some((self.window, self.limit))
    }

    fn counted_within(&self) -> Option<(Nanos, u64)> {
        Some((self.window, self.limit))
    }

    fn fresh(&self, _ops: &[Op]) -> Vec<State> {
        vec![State {
            start: None,
            count: 0,
        }]
    }

    fn decide(&self, s: &State, at: Nanos, cost: u64) -> (Said, State) {
        let mut next = match s.start {
            Some(start) if at < self.end(start) => s.clone(),
            _ => State {
                start: Some(at),
                count: 0,
            },
        };
        let allowed = next.count.saturating_add(cost) <= self.limit;
        if allowed {
            next.count += cost;
        }
        let start = next.start.unwrap_or(at);
        let said = Said {
            allowed,
            remaining: self.limit.saturating_sub(next.count),
            retry_at: (!allowed && cost <= self.limit).then(|| self.end(start)),
        };
        (said, next)
    }

    /// Each window lies within a closed interval of its length.
    fn sustains(&self) -> Sustains {
        Sustains::Window {
            limit: self.limit,
            span: self.window,
        }
    }

    /// Idle once the key's window is over.
    fn idle_from(&self, s: &State) -> Option<Nanos> {
        Some(s.start.map_or(Nanos::ZERO, |start| self.end(start)))
    }
}

impl super::Specified for ratelab_core::FirstHitWindow {
    type Family = FirstHitWindow;

    fn family(&self, _origin: Option<Nanos>) -> FirstHitWindow {
        FirstHitWindow {
            limit: self.0.limit(),
            window: self.0.window(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::check_key;
    use crate::family::testing::{allowed, answered_by, denied, ms, unstamped, violation_at};
    use crate::linearizable::{DEFAULT_BUDGET, Precision, Seen, Verdict};

    const SPEC: FirstHitWindow = FirstHitWindow {
        limit: 2,
        window: Nanos(1_000_000_000),
    };

    #[test]
    fn the_core_first_hit_window_is_explained_replayed_and_searched() {
        let core = ratelab_core::FirstHitWindow::new(4, Nanos::from_secs(1)).unwrap();
        let ops = answered_by(&core, 300, ms(150), 2);
        let spec = FirstHitWindow { limit: 4, ..SPEC };
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
    fn many_concurrent_admissions_past_the_first_window_are_refuted_by_counting() {
        // 40 requests all in flight together for 100 ms, from 10 ms on: 2 · L admitted.
        // Every order fails, and a search over them would try orders for ever; counting
        // finds it within the smallest budget.
        let spec = FirstHitWindow { limit: 10, ..SPEC };
        let flight = |id: u64, seen: Seen| Op {
            id,
            call: ms(10),
            ret: Some(ms(110)),
            cost: 1,
            seen,
            stamp: None,
            precision: Precision {
                decided_within: ms(100),
                retry_after_unit: Nanos(1),
            },
        };
        let mut ops: Vec<Op> = (0..40)
            .map(|id| {
                if id % 2 == 0 {
                    flight(
                        id,
                        Seen::Allowed {
                            at: ms(10),
                            remaining: None,
                        },
                    )
                } else {
                    flight(
                        id,
                        Seen::Denied {
                            at: ms(10),
                            retry_after: None,
                        },
                    )
                }
            })
            .collect();
        let v = check_key(&spec, &ops, 1_000);
        assert!(
            matches!(&v, Verdict::Violation(x) if x.detail.contains("first window admits 10")),
            "{v:?}"
        );
        // Ten admitted in flight, ten more after the window: nothing to count against.
        ops.retain(|o| o.id % 2 == 0);
        for o in ops.iter_mut().filter(|o| o.id >= 20) {
            o.call = ms(1_200);
            o.ret = Some(ms(1_300));
            o.seen = Seen::Allowed {
                at: ms(1_200),
                remaining: None,
            };
        }
        assert_eq!(
            check_key(&spec, &ops, DEFAULT_BUDGET),
            Verdict::Linearizable
        );
    }

    /// A client paced at 8 a second against 10 a second, one request at a time, each
    /// decided within 25 ms of its send: `denied` names the requests turned away.
    fn paced(denied: &[u64]) -> Vec<Op> {
        (0..24u64)
            .map(|i| {
                let at = ms(125 * i);
                Op {
                    id: i,
                    call: at,
                    ret: Some(at.saturating_add(ms(25))),
                    cost: 1,
                    seen: if denied.contains(&i) {
                        Seen::Denied {
                            at,
                            retry_after: None,
                        }
                    } else {
                        Seen::Allowed {
                            at,
                            remaining: None,
                        }
                    },
                    stamp: None,
                    precision: Precision {
                        decided_within: ms(25),
                        retry_after_unit: Nanos(1),
                    },
                }
            })
            .collect()
    }

    #[test]
    fn a_paced_client_turned_away_with_room_is_a_phantom_whatever_the_window_starts() {
        let spec = FirstHitWindow { limit: 10, ..SPEC };
        // Every window holds at most 8 of its requests: all admitted is explained.
        assert_eq!(
            check_key(&spec, &paced(&[]), DEFAULT_BUDGET),
            Verdict::Linearizable
        );
        // Turned away at 2.375 s: at most 8 admissions were decided in the second before
        // it. The windows' starts are only known within 25 ms, so a search would guess;
        // counting needs no start.
        let v = check_key(&spec, &paced(&[19, 20, 21]), 1_000);
        assert!(
            matches!(&v, Verdict::Violation(x) if x.id == 19 && x.phantom_denial),
            "{v:?}"
        );
        // Against a limit of 8, the eight admissions of the second before it may fill its
        // window: counting proves nothing, and the search judges it.
        let tight = FirstHitWindow { limit: 8, ..SPEC };
        assert!(!matches!(
            check_key(&tight, &paced(&[19]), DEFAULT_BUDGET),
            Verdict::Violation(ref x) if x.detail.contains("at most")
        ));
    }

    /// Sent at `call`, decided at `at`, answered at `ret` (ms), exactly.
    fn exact(id: u64, call: u64, at: u64, ret: u64, admitted: bool) -> Op {
        let at = ms(at);
        Op {
            id,
            call: ms(call),
            ret: Some(ms(ret)),
            cost: 1,
            seen: if admitted {
                Seen::Allowed {
                    at,
                    remaining: None,
                }
            } else {
                Seen::Denied {
                    at,
                    retry_after: None,
                }
            },
            stamp: None,
            precision: Precision::EXACT,
        }
    }

    #[test]
    fn counting_leaves_alone_what_an_order_back_in_time_explains() {
        let spec = FirstHitWindow { limit: 2, ..SPEC };
        // X, decided at 1 005 ms, goes first and opens a window; A, decided at 5 ms but
        // still in flight when X was sent, is taken into it; D is denied there.
        let denied_after = [
            exact(0, 0, 5, 20, true),
            exact(1, 15, 1_005, 1_010, true),
            exact(2, 1_006, 1_008, 1_012, false),
        ];
        assert_eq!(
            check_key(&spec, &denied_after, DEFAULT_BUDGET),
            Verdict::Linearizable
        );
        // X, decided at 2.5 s, goes first; A2, sent after it and decided at 8 ms, is taken
        // into its window: three admissions within the first second, in two windows.
        let reopened = [
            exact(0, 0, 0, 1, true),
            exact(1, 1, 1, 2, true),
            exact(2, 5, 2_500, 2_501, true),
            exact(3, 6, 8, 9, true),
        ];
        assert_eq!(
            check_key(&spec, &reopened, DEFAULT_BUDGET),
            Verdict::Linearizable
        );
    }

    #[test]
    fn the_window_opens_at_the_first_hit_not_on_the_clock() {
        let ops = [
            allowed(0, ms(700), 1),
            allowed(1, ms(900), 0),
            denied(2, ms(1_200), Some(ms(500))),
            allowed(3, ms(1_700), 1),
        ];
        assert_eq!(
            check_key(&SPEC, &ops, DEFAULT_BUDGET),
            Verdict::Linearizable
        );
        // An aligned window would have admitted at 1 200: here, that admission is wrong.
        let aligned = [
            allowed(0, ms(700), 1),
            allowed(1, ms(900), 0),
            allowed(2, ms(1_200), 1),
        ];
        assert!(violation_at(&check_key(&SPEC, &aligned, DEFAULT_BUDGET), 2));
    }

    #[test]
    fn a_denial_in_a_fresh_window_is_a_phantom_denial() {
        let ops = [
            allowed(0, ms(0), 1),
            allowed(1, ms(10), 0),
            denied(2, ms(1_000), Some(ms(1))),
        ];
        match check_key(&SPEC, &ops, DEFAULT_BUDGET) {
            Verdict::Violation(v) => assert!(v.id == 2 && v.phantom_denial, "{v:?}"),
            v => panic!("{v:?}"),
        }
    }

    #[test]
    fn an_idle_state_answers_as_a_fresh_key() {
        let named = crate::family::testing::assert_idle_answers_as_fresh(
            &FirstHitWindow {
                limit: 4,
                window: ms(1000),
            },
            300,
            ms(400),
            3,
        );
        assert!(named > 100, "{named} states tight");
    }
}
