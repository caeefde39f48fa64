//! `pause`: a node (the store or a gateway) stops running in the window.

use super::kind::{Hold, Check, Ctx, Injection, Invalid, Kind, Shape, check_gateway, check_window};
use crate::locate::PathSeg;
use crate::rng::Draw;
use crate::values::{Bounded, Ms, NodeName};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `node` ("store" or a gateway index) is paused in the window.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Pause {
    /// Start, in ms.
    pub at_ms: Ms,
    /// End (exclusive), in ms.
    pub until_ms: Ms,
    /// `"store"` or a gateway index.
    pub node: NodeName,
}

impl Kind for Pause {
    /// A paused gateway's calls; a paused store, everyone's.
    fn fails_calls_from(&self) -> Option<Vec<u32>> {
        match self.node {
            NodeName::Store => None,
            NodeName::Gateway(g) => Some(vec![g]),
        }
    }

    fn window_ms(&self) -> Option<(u64, u64)> {
        Some((self.at_ms.get(), self.until_ms.get()))
    }

    fn check(&self, cx: &Check) -> Result<(), Invalid> {
        check_window(self.at_ms, self.until_ms)?;
        if let NodeName::Gateway(g) = self.node {
            check_gateway(g, vec![PathSeg::Key("node".into())], cx)?;
        }
        Ok(())
    }

    fn inject<'a>(&'a self, cx: &'a Ctx<'a>) -> Injection<'a> {
        Box::pin(async move {
            let id = cx.node(self.node);
            if cx.hold(Hold::Pause(id)) {
                cx.handle.pause(id);
            }
            cx.sleep_until_ms(self.until_ms.get()).await;
            if cx.release(Hold::Pause(id)) {
                cx.handle.resume(id);
            }
        })
    }

    fn draw(d: &mut Draw, (at, until): (u64, u64), shape: &Shape) -> Self {
        let node = if d.chance(0.5) {
            NodeName::Store
        } else {
            NodeName::Gateway(d.int(0, shape.gateways - 1) as u32)
        };
        Pause {
            at_ms: Bounded(at),
            until_ms: Bounded(until),
            node,
        }
    }
}
