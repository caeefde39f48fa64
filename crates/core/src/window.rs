//! Window-based limiters aligned to the clock: the fixed window and the sliding-window counter.
//!
//! Both divide time into aligned windows `[k·W, (k+1)·W)` and share the policy type
//! [`WindowPolicy`] (as the first-hit window, whose windows are not aligned, does).
//!
//! * [`FixedWindow`] admits at most `limit` per aligned window. Its known flaw is the boundary
//!   spike: `limit` requests at the end of one window and `limit` at the start of the next
//!   are 2 × `limit` within a span far shorter than `W`.
//! * [`SlidingWindow`] is the *sliding-window counter* (the two-counter approximation, as
//!   popularised by Cloudflare): it estimates the count in the last `W` as
//!   `⌈previous · (W − e) / W⌉ + current`, where `e` is the time elapsed in the current window,
//!   and admits while that estimate plus the cost is at most `limit`. Its error bound: in any
//!   interval of length `W` it admits at most `limit + previous · e / W ≤ 2 · limit`. The
//!   bound is only approached by traffic packed at the very end of one window; the boundary
//!   burst that doubles a fixed window is held to `limit` plus what the decayed weight
//!   releases. It stores two counters instead of a log, and never admits more than a fixed
//!   window would in the same aligned window.
//!
//! Time going backwards: a `now` inside an earlier window than the stored one is treated as
//! the start of the stored window, so it can never reset or decay a counter early.

use crate::algorithm::{Algorithm, Quota, check_cost};
use crate::spec::{COUNT_MAX, PolicySpec, SpecError, WINDOW_MS_MAX, need, refused};
use crate::token_bucket::{MAX_CAPACITY, MAX_PERIOD};
use crate::{CostError, Decision, Nanos, PolicyError};

/// A window policy: at most `limit` units per window of length `window`.
///
/// Bounds: `1 ≤ limit ≤ 10¹²`, `1 ns ≤ window ≤ 100 years`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WindowPolicy {
    limit: u64,
    window: Nanos,
}

impl WindowPolicy {
    /// Validates `limit` and `window`.
    pub fn new(limit: u64, window: Nanos) -> Result<WindowPolicy, PolicyError> {
        if !(1..=MAX_CAPACITY).contains(&limit) {
            return Err(PolicyError::out_of_range(
                "limit",
                limit.into(),
                1,
                MAX_CAPACITY.into(),
            ));
        }
        if !(1..=MAX_PERIOD.as_u64()).contains(&window.as_u64()) {
            return Err(PolicyError::out_of_range(
                "window_ns",
                window.as_u64().into(),
                1,
                MAX_PERIOD.as_u64().into(),
            ));
        }
        Ok(WindowPolicy { limit, window })
    }

    /// The per-window limit.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The window length.
    pub fn window(&self) -> Nanos {
        self.window
    }

    pub(crate) fn w(&self) -> u128 {
        u128::from(self.window.as_u64())
    }

    fn index(&self, now: Nanos) -> u64 {
        now.as_u64() / self.window.as_u64()
    }

    /// Start of window `index`, in ns (≤ the `now` it came from, so it fits in u64 when the
    /// index came from a `now`; saturates otherwise).
    fn start(&self, index: u64) -> u128 {
        u128::from(index) * self.w()
    }

    fn quota(&self) -> Quota {
        Quota {
            limit: self.limit,
            window: self.window,
        }
    }
}

/// Fixed window: at most `limit` per aligned window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FixedWindow(pub WindowPolicy);

/// A fixed window's state: which window, and how much it has admitted.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FixedWindowState {
    /// The window index, `now / window`.
    pub window: u64,
    /// Units admitted in that window.
    pub count: u64,
}

impl FixedWindow {
    /// At most `limit` per window of length `window`.
    pub fn new(limit: u64, window: Nanos) -> Result<FixedWindow, PolicyError> {
        WindowPolicy::new(limit, window).map(FixedWindow)
    }
}

impl Algorithm for FixedWindow {
    type State = FixedWindowState;

    fn transition(
        &self,
        state: Option<FixedWindowState>,
        now: Nanos,
        cost: u64,
    ) -> Result<(FixedWindowState, Decision), CostError> {
        let p = &self.0;
        check_cost(cost, p.limit)?;
        let index = p.index(now);
        let mut st = match state {
            // The same window, or a later one (the clock stepped back): keep counting.
            Some(s) if s.window >= index => s,
            _ => FixedWindowState {
                window: index,
                count: 0,
            },
        };
        let allowed = st.count + cost <= p.limit;
        if allowed {
            st.count += cost;
        }
        let until_end = p.start(st.window) + p.w() - u128::from(now.as_u64());
        let until_end = Nanos::saturating_from_u128(until_end);
        let decision = Decision {
            allowed,
            limit: p.limit,
            remaining: p.limit - st.count,
            reset_after: if st.count == 0 {
                Nanos::ZERO
            } else {
                until_end
            },
            retry_after: (!allowed).then_some(until_end),
            // The whole limit comes back at once, with the next window.
            full_after: if st.count == 0 {
                Nanos::ZERO
            } else {
                until_end
            },
        };
        Ok((st, decision))
    }

    fn expires_at(&self, state: &FixedWindowState) -> Nanos {
        Nanos::saturating_from_u128(self.0.start(state.window) + self.0.w())
    }

    fn quota(&self) -> Quota {
        self.0.quota()
    }
}

/// Sliding-window counter: the two-counter approximation (see the module docs for its bound).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SlidingWindow(pub WindowPolicy);

/// A sliding-window counter's state.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SlidingWindowState {
    /// The current window index.
    pub window: u64,
    /// Units admitted in the current window.
    pub current: u64,
    /// Units admitted in the window before it.
    pub previous: u64,
}

/// A sliding-window state rolled forward to a `now`, with the elapsed time in its window.
struct Rolled {
    st: SlidingWindowState,
    /// Nanoseconds elapsed in the current window, in `[0, W)`.
    elapsed: u128,
    /// Nanoseconds from the caller's `now` to the effective time (non-zero only when the
    /// clock stepped back into an earlier window).
    ahead: u128,
}

impl SlidingWindow {
    /// At most `limit` per sliding window of length `window` (approximately: see module docs).
    pub fn new(limit: u64, window: Nanos) -> Result<SlidingWindow, PolicyError> {
        WindowPolicy::new(limit, window).map(SlidingWindow)
    }

    fn roll(&self, state: Option<SlidingWindowState>, now: Nanos) -> Rolled {
        let p = &self.0;
        let index = p.index(now);
        let st = match state {
            Some(s) if s.window >= index => s,
            Some(s) if s.window + 1 == index => SlidingWindowState {
                window: index,
                current: 0,
                previous: s.current,
            },
            _ => SlidingWindowState {
                window: index,
                current: 0,
                previous: 0,
            },
        };
        let start = p.start(st.window);
        let now = u128::from(now.as_u64());
        Rolled {
            st,
            elapsed: now.saturating_sub(start),
            ahead: start.saturating_sub(now),
        }
    }

    /// `⌈previous · (W − e) / W⌉ + current`: the estimated count in the last `W`.
    fn estimate(&self, previous: u64, current: u64, elapsed: u128) -> u128 {
        let w = self.0.w();
        (u128::from(previous) * (w - elapsed)).div_ceil(w) + u128::from(current)
    }

    fn available(&self, r: &Rolled) -> u64 {
        let used = self.estimate(r.st.previous, r.st.current, r.elapsed);
        // available ≤ limit, which fits in u64.
        u128::from(self.0.limit).saturating_sub(used) as u64
    }

    /// Nanoseconds from the effective time until `n` units are available.
    fn wait_for(&self, r: &Rolled, n: u64) -> u128 {
        if self.available(r) >= n {
            return 0;
        }
        let w = self.0.w();
        let limit = u128::from(self.0.limit);
        let (previous, current) = (u128::from(r.st.previous), u128::from(r.st.current));
        let n = u128::from(n);
        let to_boundary = w - r.elapsed;
        // Within the current window the estimate falls as the previous window's weight decays:
        // ⌈previous·(W−e−d)/W⌉ ≤ k  ⇔  d ≥ W − e − ⌊k·W/previous⌋.
        if current + n <= limit && previous > 0 {
            let k = limit - n - current;
            let d = to_boundary.saturating_sub(k * w / previous);
            if d < to_boundary {
                return d;
            }
        }
        // From the next window on, `current` becomes the decaying previous count.
        if current == 0 {
            return to_boundary;
        }
        let e_next = w.saturating_sub((limit - n) * w / current);
        to_boundary + e_next
    }
}

impl SlidingWindow {
    /// Nanoseconds until the estimate is zero: the current window's end when only the
    /// previous window counted (its weight decays to zero exactly then), the next window's
    /// end when the current one counted (it must become the previous and decay in turn).
    fn full_after(&self, r: &Rolled) -> Nanos {
        let to_boundary = r.ahead + (self.0.w() - r.elapsed);
        Nanos::saturating_from_u128(match (r.st.previous, r.st.current) {
            (0, 0) => 0,
            (_, 0) => to_boundary,
            _ => to_boundary + self.0.w(),
        })
    }
}

impl Algorithm for SlidingWindow {
    type State = SlidingWindowState;

    fn transition(
        &self,
        state: Option<SlidingWindowState>,
        now: Nanos,
        cost: u64,
    ) -> Result<(SlidingWindowState, Decision), CostError> {
        let limit = self.0.limit;
        check_cost(cost, limit)?;
        let mut r = self.roll(state, now);
        let allowed = self.available(&r) >= cost;
        if allowed {
            r.st.current += cost;
        }
        let remaining = self.available(&r);
        let reset_after = if remaining >= limit {
            Nanos::ZERO
        } else {
            Nanos::saturating_from_u128(r.ahead + self.wait_for(&r, remaining + 1))
        };
        let retry_after =
            (!allowed).then(|| Nanos::saturating_from_u128(r.ahead + self.wait_for(&r, cost)));
        let decision = Decision {
            allowed,
            limit,
            remaining,
            reset_after,
            retry_after,
            full_after: self.full_after(&r),
        };
        Ok((r.st, decision))
    }

    fn expires_at(&self, state: &SlidingWindowState) -> Nanos {
        Nanos::saturating_from_u128(self.0.start(state.window) + 2 * self.0.w())
    }

    fn quota(&self) -> Quota {
        self.0.quota()
    }
}

impl WindowPolicy {
    /// `limit` per `window_ms`.
    pub(crate) fn from_spec(spec: &PolicySpec) -> Result<WindowPolicy, SpecError> {
        let limit = need(spec, "limit", spec.limit, COUNT_MAX)?;
        let window_ms = need(spec, "window_ms", spec.window_ms, WINDOW_MS_MAX)?;
        WindowPolicy::new(limit, Nanos::from_millis(window_ms)).map_err(refused)
    }

    /// A window that is not a whole number of ms is written as the nearest that is, at
    /// least 1.
    pub(crate) fn write(&self, spec: &mut PolicySpec) {
        spec.limit = Some(self.limit);
        spec.window_ms = Some(((self.window.as_u64() + 500_000) / 1_000_000).max(1));
    }

    /// `capacity` per the time `capacity` takes at `per_sec`, at least 1 ms.
    pub(crate) fn shaped(capacity: u64, per_sec: u64, spec: &mut PolicySpec) {
        spec.limit = Some(capacity);
        spec.window_ms = Some((capacity.saturating_mul(1_000) / per_sec.max(1)).max(1));
    }
}

/// Implements [`Written`] for a window algorithm, a newtype over [`WindowPolicy`]: written
/// as `limit` per `window_ms`.
macro_rules! written_as_window {
    ($t:ident) => {
        impl $crate::spec::Written for $t {
            const FIELDS: &'static [&'static str] = &["limit", "window_ms"];

            fn from_spec(spec: &$crate::PolicySpec) -> Result<$t, $crate::SpecError> {
                $crate::window::WindowPolicy::from_spec(spec).map($t)
            }

            fn write(&self, spec: &mut $crate::PolicySpec) {
                self.0.write(spec);
            }

            fn shaped(capacity: u64, per_sec: u64, spec: &mut $crate::PolicySpec) {
                $crate::window::WindowPolicy::shaped(capacity, per_sec, spec);
            }
        }
    };
}
pub(crate) use written_as_window;

written_as_window!(FixedWindow);
written_as_window!(SlidingWindow);
