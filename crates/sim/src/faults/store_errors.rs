//! `store_errors`: The store answers `rate` of the window's calls with an error; nothing is applied.

use super::kind::{Check, Invalid, Kind, Rated, Shape, Verdict};
use crate::rng::{Draw, SimRng};
use ratelab_core::Nanos;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The store answers `rate` of the window's calls with an error; nothing is applied.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct StoreErrors(pub Rated);

impl Kind for StoreErrors {
    fn window_ms(&self) -> Option<(u64, u64)> {
        self.0.window_ms()
    }

    fn check(&self, _: &Check) -> Result<(), Invalid> {
        self.0.check()
    }

    fn on_store_message(&self, now: Nanos, rng: &mut SimRng) -> Option<Verdict> {
        self.0.hits(now, rng).then_some(Verdict::Error)
    }

    fn draw(d: &mut Draw, window: (u64, u64), _: &Shape) -> Self {
        StoreErrors(Rated::draw(d, window))
    }
}
