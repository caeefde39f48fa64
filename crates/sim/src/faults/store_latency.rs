//! `store_latency`: the store delays every reply in the window by `extra_latency`.

use super::kind::{Check, Invalid, Kind, Shape, Verdict, check_window};
use crate::locate::PathSeg;
use crate::rng::{Draw, SimRng};
use crate::values::{Bounded, LatencyRange, Ms, ms};
use ratelab_core::Nanos;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The store delays its replies in the window by `extra_latency`, drawn uniformly.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StoreLatency {
    /// Start, in ms.
    pub at_ms: Ms,
    /// End (exclusive), in ms.
    pub until_ms: Ms,
    /// The added delay.
    pub extra_latency: LatencyRange,
}

impl Kind for StoreLatency {
    fn window_ms(&self) -> Option<(u64, u64)> {
        Some((self.at_ms.get(), self.until_ms.get()))
    }

    fn check(&self, _: &Check) -> Result<(), Invalid> {
        check_window(self.at_ms, self.until_ms)?;
        if self.extra_latency.min_us > self.extra_latency.max_us {
            return Err((
                vec![PathSeg::Key("extra_latency".into())],
                "max_us is below min_us".into(),
            ));
        }
        Ok(())
    }

    fn on_store_message(&self, now: Nanos, rng: &mut SimRng) -> Option<Verdict> {
        let (from, until) = (ms(self.at_ms.get()), ms(self.until_ms.get()));
        if now < from || now >= until {
            return None;
        }
        let l = self.extra_latency;
        let (lo, hi) = (l.min_us.get() * 1_000, l.max_us.get() * 1_000);
        Some(Verdict::Delay(Nanos(rng.between(lo, hi))))
    }

    fn extra_latency_us(&self) -> u64 {
        self.extra_latency.max_us.get()
    }

    fn draw(d: &mut Draw, (at, until): (u64, u64), _: &Shape) -> Self {
        let lo = d.int(0, 5_000);
        let hi = lo + d.int(0, 20_000);
        StoreLatency {
            at_ms: Bounded(at),
            until_ms: Bounded(until),
            extra_latency: LatencyRange {
                min_us: Bounded(lo),
                max_us: Bounded(hi),
            },
        }
    }
}
