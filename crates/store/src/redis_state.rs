//! A limit's state as ratelab's Redis scripts store it: [`encode`] and [`decode`] for the
//! naive path, and what a request that spent at a limit leaves once it is given back
//! ([`held_decision`], for a request a Redis Cluster decided slot by slot and undid).
//!
//! Each family's state is its fields as decimal integers one space apart: a token bucket's
//! TAT as "hi lo" (hi seconds plus lo / refill_amount ns), a fixed window's "index count", a
//! first-hit window's "start_sec start_nsec count", a sliding counter's "index current
//! previous", a stepped bucket's "tokens anchor_sec anchor_nsec".

use crate::StoreError;
use ratelab_core::first_hit::FirstHitWindowState;
use ratelab_core::stepped::SteppedBucketState;
use ratelab_core::window::{FixedWindowState, SlidingWindowState};
use ratelab_core::{Algorithm, Decision, Nanos, Policy, PolicyState, TokenBucketState};

/// `state` as the scripts store it; `None` when it is not `policy`'s.
pub fn encode(policy: &Policy, state: &PolicyState) -> Option<String> {
    let instant = |t: Nanos| (t.as_u64() / 1_000_000_000, t.as_u64() % 1_000_000_000);
    // One arm per algorithm, no wildcard: a new one does not compile until it is stored.
    Some(match policy {
        Policy::TokenBucket(b) => {
            let PolicyState::TokenBucket(s) = state else {
                return None;
            };
            let u = 1_000_000_000 * u128::from(b.refill_amount());
            format!("{} {}", s.tat_scaled / u, s.tat_scaled % u)
        }
        Policy::FixedWindow(_) => {
            let PolicyState::FixedWindow(s) = state else {
                return None;
            };
            format!("{} {}", s.window, s.count)
        }
        Policy::FirstHitWindow(_) => {
            let PolicyState::FirstHitWindow(s) = state else {
                return None;
            };
            let (sec, ns) = instant(s.start);
            format!("{sec} {ns} {}", s.count)
        }
        Policy::SlidingWindow(_) => {
            let PolicyState::SlidingWindow(s) = state else {
                return None;
            };
            format!("{} {} {}", s.window, s.current, s.previous)
        }
        Policy::SteppedBucket(_) => {
            let PolicyState::SteppedBucket(s) = state else {
                return None;
            };
            let (sec, ns) = instant(s.anchor);
            format!("{} {sec} {ns}", s.tokens)
        }
    })
}

/// A stored state as `policy`'s, by the scripts' own rule: as many decimal fields as the
/// algorithm stores, one space apart, each of at most 16 digits (a token bucket's first of
/// at most 15), nanoseconds below 10⁹, no count above the limit. Anything else is
/// [`StoreError::Corrupt`]: a state that cannot be read is never taken as empty.
pub fn decode(policy: &Policy, text: &str) -> Result<PolicyState, StoreError> {
    let fields: Vec<u64> = text
        .split(' ')
        .map(|v| {
            (!v.is_empty() && v.len() <= 16 && v.bytes().all(|b| b.is_ascii_digit()))
                .then(|| v.parse().ok())
                .flatten()
                .ok_or(StoreError::Corrupt)
        })
        .collect::<Result<_, _>>()?;
    let instant = |sec: u64, ns: u64| {
        (ns < 1_000_000_000)
            .then(|| sec.checked_mul(1_000_000_000)?.checked_add(ns))
            .flatten()
            .map(Nanos)
            .ok_or(StoreError::Corrupt)
    };
    let limit = policy.quota().limit;
    let within = |n: u64| {
        if n <= limit {
            Ok(n)
        } else {
            Err(StoreError::Corrupt)
        }
    };
    let state = match (policy, fields.as_slice()) {
        (Policy::TokenBucket(b), &[hi, lo]) => {
            let u = 1_000_000_000 * u128::from(b.refill_amount());
            if hi >= 1_000_000_000_000_000 || u128::from(lo) >= u {
                return Err(StoreError::Corrupt);
            }
            PolicyState::TokenBucket(ratelab_core::TokenBucketState {
                tat_scaled: u128::from(hi) * u + u128::from(lo),
            })
        }
        (Policy::FixedWindow(_), &[window, count]) => PolicyState::FixedWindow(FixedWindowState {
            window,
            count: within(count)?,
        }),
        (Policy::FirstHitWindow(_), &[sec, ns, count]) => {
            PolicyState::FirstHitWindow(FirstHitWindowState {
                start: instant(sec, ns)?,
                count: within(count)?,
            })
        }
        (Policy::SlidingWindow(_), &[window, current, previous]) => {
            PolicyState::SlidingWindow(SlidingWindowState {
                window,
                current: within(current)?,
                previous: within(previous)?,
            })
        }
        (Policy::SteppedBucket(_), &[tokens, sec, ns]) => {
            PolicyState::SteppedBucket(SteppedBucketState {
                tokens: within(tokens)?,
                anchor: instant(sec, ns)?,
            })
        }
        _ => return Err(StoreError::Corrupt),
    };
    Ok(state)
}

/// `state` without a spend of `cost` in it: the state the request that wrote `state` found
/// (as far as it matters to a decision); `None` when `state` cannot hold such a spend.
pub fn unspend(policy: &Policy, state: &PolicyState, cost: u64) -> Option<PolicyState> {
    // One arm per algorithm, no wildcard: a new one does not compile until it is undone.
    Some(match (policy, *state) {
        (Policy::TokenBucket(b), PolicyState::TokenBucket(s)) => {
            let spent = u128::from(cost) * u128::from(b.refill_period().as_u64());
            PolicyState::TokenBucket(TokenBucketState {
                tat_scaled: s.tat_scaled.checked_sub(spent)?,
            })
        }
        (Policy::FixedWindow(_), PolicyState::FixedWindow(s)) => {
            PolicyState::FixedWindow(FixedWindowState {
                count: s.count.checked_sub(cost)?,
                ..s
            })
        }
        (Policy::FirstHitWindow(_), PolicyState::FirstHitWindow(s)) => {
            PolicyState::FirstHitWindow(FirstHitWindowState {
                count: s.count.checked_sub(cost)?,
                ..s
            })
        }
        (Policy::SlidingWindow(_), PolicyState::SlidingWindow(s)) => {
            PolicyState::SlidingWindow(SlidingWindowState {
                current: s.current.checked_sub(cost)?,
                ..s
            })
        }
        (Policy::SteppedBucket(b), PolicyState::SteppedBucket(s)) => {
            let tokens = s.tokens.checked_add(cost)?;
            (tokens <= b.capacity()).then_some(())?;
            PolicyState::SteppedBucket(SteppedBucketState { tokens, ..s })
        }
        (
            Policy::TokenBucket(_)
            | Policy::FixedWindow(_)
            | Policy::FirstHitWindow(_)
            | Policy::SlidingWindow(_)
            | Policy::SteppedBucket(_),
            _,
        ) => return None,
    })
}

/// What a limit that admitted a request at `cost`, writing `written`, answers once the spend
/// is given back: the decision at cost 0, at `now`, on the state the request found. `None`
/// for a written state this limit cannot read or undo.
pub fn held_decision(policy: &Policy, written: &str, cost: u64, now: Nanos) -> Option<Decision> {
    let state = decode(policy, written).ok()?;
    let before = match unspend(policy, &state, cost)? {
        // A first-hit window with nothing in it was opened by the request: it found none.
        PolicyState::FirstHitWindow(s) if s.count == 0 => None,
        s => Some(s),
    };
    policy.transition(before, now, 0).ok().map(|(_, d)| d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratelab_core::{FixedWindow, SlidingWindow, SteppedBucket, TokenBucket};

    #[test]
    fn a_state_reads_back_as_written_and_anything_else_is_corrupt() {
        let ms = Nanos::from_millis;
        let window = Policy::SlidingWindow(SlidingWindow::new(5, ms(1_000)).unwrap());
        let state = PolicyState::SlidingWindow(SlidingWindowState {
            window: 1_764_500,
            current: 3,
            previous: 5,
        });
        let text = encode(&window, &state).unwrap();
        assert_eq!(decode(&window, &text), Ok(state));
        let fixed = Policy::FixedWindow(FixedWindow::new(5, ms(1_000)).unwrap());
        assert_eq!(encode(&fixed, &state), None, "another algorithm's state");
        let stepped = Policy::SteppedBucket(SteppedBucket::new(4, 1, ms(100)).unwrap());
        let bucket = Policy::TokenBucket(TokenBucket::per_second(5, 2).unwrap());
        for (policy, bad) in [
            (&window, "1 2"),
            (&window, "1  2 3"),
            (&window, " 1 2 3"),
            (&window, "1 6 2"),
            (&fixed, "1 6"),
            (&fixed, "1 -1"),
            (&stepped, "5 1764500000 0"),
            (&stepped, "1 1764500000 1000000000"),
            (&bucket, "1234567890123456 0"),
            (&bucket, "1 2000000000"),
            (&fixed, "+1 2"),
            (&fixed, "12345678901234567 2"),
        ] {
            assert_eq!(decode(policy, bad), Err(StoreError::Corrupt), "{bad:?}");
        }
        // Sixteen digits a field, as the scripts read them.
        assert!(decode(&fixed, "1234567890123456 2").is_ok());
    }
}
