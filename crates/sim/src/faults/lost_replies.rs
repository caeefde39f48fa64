//! `lost_replies`: The store applies `rate` of the window's calls and loses their replies.

use super::kind::{Check, Invalid, Kind, Rated, Shape, Verdict};
use crate::rng::{Draw, SimRng};
use ratelab_core::Nanos;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The store applies `rate` of the window's calls and loses their replies.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct LostReplies(pub Rated);

impl Kind for LostReplies {
    fn window_ms(&self) -> Option<(u64, u64)> {
        self.0.window_ms()
    }

    fn check(&self, _: &Check) -> Result<(), Invalid> {
        self.0.check()
    }

    fn on_store_message(&self, now: Nanos, rng: &mut SimRng) -> Option<Verdict> {
        self.0.hits(now, rng).then_some(Verdict::LoseReply)
    }

    fn draw(d: &mut Draw, window: (u64, u64), _: &Shape) -> Self {
        LostReplies(Rated::draw(d, window))
    }
}
