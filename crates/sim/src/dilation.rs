//! Dilated time: how physical durations map onto madsim's clock.
//!
//! madsim floors every sleep at 1 ms of its clock and spends one such sleep on every send and
//! one on every receive, so on its clock a message can never take less than 2 ms. The cluster
//! therefore runs madsim's clock in a unit [`DILATION`] times finer than the physical one:
//!
//! - a physical duration `d` — a latency, a timeout, a sleep, an arrival time — is `d ×
//!   DILATION` on madsim's clock ([`dilate`]);
//! - a madsim instant reads back as its elapsed time `÷ DILATION` ([`physical`]).
//!
//! Only the calls into madsim (sleeps, timeouts, link latencies) are dilated. Everything the
//! rest of ratelab sees — scenarios, policies (B, R), the gateways' clocks, the history, the
//! checkers, the report — is in physical units, so no rate is rescaled and nothing is
//! rounded: the race λ·d and the envelope B + R·Δt are the same numbers they would be on an
//! undilated clock, and the store's floors shrink by the factor:
//!
//! | floor | on madsim's clock | physical |
//! |---|---:|---:|
//! | a sleep (an arrival, a timeout, a delayed reply) | 1 ms | [`SLEEP_FLOOR`] = 10 ns |
//! | a message (one send and one receive sleep) | 2 ms | [`MESSAGE_FLOOR`] = 20 ns |
//! | madsim's per-sleep jitter (0–5 µs, under the floor) | ≤ 5 µs | ≤ 0.05 ns |
//! | madsim's step past each timer | 50 ns | 0.0005 ns |
//!
//! A scenario's one-way latency is the physical time a message takes, floors included: the
//! link latency handed to madsim is the declared latency less the two sleeps every message
//! already pays ([`link_latency`]), so a declared 100 µs is 100 µs, and anything at or below
//! [`MESSAGE_FLOOR`] is the floor. An arrival less than [`SLEEP_FLOOR`] ahead of the client's
//! clock leaves at most that late.
//!
//! The factor is bounded by madsim's clock range: the longest run a scenario may declare (one
//! hour, plus its drain) is 3.6 · 10¹⁷ ns dilated, inside the 1.8 · 10¹⁹ ns a `u64` holds.

use ratelab_core::Nanos;
use std::future::Future;
use std::time::Duration;

/// madsim time units per physical unit.
pub const DILATION: u32 = 100_000;

/// madsim's least sleep.
const MADSIM_SLEEP_FLOOR: Duration = Duration::from_millis(1);

/// The least physical time any sleep takes.
pub const SLEEP_FLOOR: Duration = Duration::from_nanos(1_000_000 / DILATION as u64);

/// The least physical time any message takes: one send sleep and one receive sleep.
pub const MESSAGE_FLOOR: Duration = Duration::from_nanos(2 * 1_000_000 / DILATION as u64);

/// A physical duration on madsim's clock.
pub fn dilate(physical: Duration) -> Duration {
    physical.saturating_mul(DILATION)
}

/// A span of madsim's clock in physical nanoseconds.
pub fn physical(sim: Duration) -> Nanos {
    match u64::try_from(sim.as_nanos()) {
        // The same quotient, in 64-bit arithmetic (every scenario's clock fits).
        Ok(ns) => Nanos(ns / u64::from(DILATION)),
        Err(_) => Nanos(u64::try_from(sim.as_nanos() / u128::from(DILATION)).unwrap_or(u64::MAX)),
    }
}

/// The link latency madsim adds to a message whose physical one-way time is `one_way`: the
/// rest is the send and receive sleeps every message pays.
pub fn link_latency(one_way: Duration) -> Duration {
    dilate(one_way).saturating_sub(2 * MADSIM_SLEEP_FLOOR)
}

/// Sleeps for a physical duration.
pub async fn sleep(physical: Duration) {
    madsim::time::sleep(dilate(physical)).await;
}

/// Runs `fut` for at most a physical duration: madsim's own future, not wrapped in another
/// (which would hold a second copy of `fut`); `Err` once the time has passed.
pub fn timeout<F: Future>(
    physical: Duration,
    fut: F,
) -> impl Future<Output = Result<F::Output, madsim::time::error::Elapsed>> {
    madsim::time::timeout(dilate(physical), fut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mapping_round_trips_and_the_floors_are_what_the_docs_say() {
        let d = Duration::from_micros(123);
        assert_eq!(physical(dilate(d)), Nanos(123_000));
        assert_eq!(SLEEP_FLOOR, Duration::from_nanos(10));
        assert_eq!(MESSAGE_FLOOR, Duration::from_nanos(20));
        assert_eq!(physical(MADSIM_SLEEP_FLOOR), Nanos(10));
        // A declared one-way time is the message's whole time, floors included.
        assert_eq!(
            link_latency(Duration::from_micros(100)) + 2 * MADSIM_SLEEP_FLOOR,
            dilate(Duration::from_micros(100))
        );
        assert_eq!(link_latency(Duration::from_nanos(5)), Duration::ZERO);
        // The longest scenario fits madsim's clock.
        let longest = Duration::from_millis(crate::scenario::MAX_DURATION_MS) * 2;
        assert!(dilate(longest).as_nanos() < u128::from(u64::MAX));
    }
}
