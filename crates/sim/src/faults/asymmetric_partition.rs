//! `asymmetric_partition`: the store's replies to some gateways are lost, while their calls
//! still reach it and are applied.

use super::kind::{Hold, Check, Ctx, Injection, Invalid, Kind, Shape, check_gateways, check_window};
use crate::rng::Draw;
use crate::values::{Bounded, Ms};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The store cannot reach `gateways` in the window, but they still reach it: every call they
/// send is applied and its reply lost (a one-way link failure).
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AsymmetricPartition {
    /// Start, in ms.
    pub at_ms: Ms,
    /// End (exclusive), in ms.
    pub until_ms: Ms,
    /// The gateway indexes the store's replies do not reach.
    pub gateways: Vec<u32>,
}

impl Kind for AsymmetricPartition {
    fn window_ms(&self) -> Option<(u64, u64)> {
        Some((self.at_ms.get(), self.until_ms.get()))
    }

    fn check(&self, cx: &Check) -> Result<(), Invalid> {
        check_window(self.at_ms, self.until_ms)?;
        check_gateways(&self.gateways, "gateways", cx)
    }

    fn inject<'a>(&'a self, cx: &'a Ctx<'a>) -> Injection<'a> {
        Box::pin(async move {
            let ids: Vec<_> = self.gateways.iter().map(|&g| cx.gateways[g as usize]).collect();
            for &g in &ids {
                if cx.hold(Hold::Link(cx.store, g)) {
                    cx.net.clog_link(cx.store, g);
                }
            }
            cx.sleep_until_ms(self.until_ms.get()).await;
            for &g in &ids {
                if cx.release(Hold::Link(cx.store, g)) {
                    cx.net.unclog_link(cx.store, g);
                }
            }
        })
    }

    fn draw(d: &mut Draw, (at, until): (u64, u64), shape: &Shape) -> Self {
        AsymmetricPartition {
            at_ms: Bounded(at),
            until_ms: Bounded(until),
            gateways: vec![d.int(0, shape.gateways - 1) as u32],
        }
    }
}
