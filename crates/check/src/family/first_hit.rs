//! Fixed window opened by a key's first request (an `INCR` whose first call sets the key's
//! `EXPIRE`): a window opens at the first request after the last one ended and lasts
//! `window`; at most `limit` is admitted in it; `remaining` is the limit less its count; a
//! denied request is admitted again when the window ends (never, if its cost exceeds the
//! limit). A request whose clock reads earlier than its window's start is counted in it.

use super::spec::{Family, Said};
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::check_key;
    use crate::family::testing::{allowed, answered_by, denied, ms, unstamped, violation_at};
    use crate::linearizable::{DEFAULT_BUDGET, Verdict};

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
}
