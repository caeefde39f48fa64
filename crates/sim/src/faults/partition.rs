//! `partition`: some gateways cannot reach the store, nor it them.

use super::kind::{Hold, Check, Ctx, Injection, Invalid, Kind, Shape, check_gateways, check_window};
use crate::rng::Draw;
use crate::values::{Bounded, Ms};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `gateways` cannot reach the store (both directions) in the window.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Partition {
    /// Start, in ms.
    pub at_ms: Ms,
    /// End (exclusive), in ms.
    pub until_ms: Ms,
    /// The gateway indexes cut off from the store.
    pub gateways: Vec<u32>,
}

impl Kind for Partition {
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
            let links: Vec<_> = ids
                .iter()
                .flat_map(|&g| [(g, cx.store), (cx.store, g)])
                .collect();
            for &(a, b) in &links {
                if cx.hold(Hold::Link(a, b)) {
                    cx.net.clog_link(a, b);
                }
            }
            cx.sleep_until_ms(self.until_ms.get()).await;
            for &(a, b) in &links {
                if cx.release(Hold::Link(a, b)) {
                    cx.net.unclog_link(a, b);
                }
            }
        })
    }

    fn draw(d: &mut Draw, (at, until): (u64, u64), shape: &Shape) -> Self {
        let g = d.int(0, shape.gateways - 1);
        Partition {
            at_ms: Bounded(at),
            until_ms: Bounded(until),
            gateways: vec![g as u32],
        }
    }
}
