//! `kill_switch`: an operator turns limiting off on some gateways in the window.

use super::kind::{Hold, Check, Ctx, Injection, Invalid, Kind, Shape, check_gateways, check_window};
use crate::rng::Draw;
use crate::values::{Bounded, Ms};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The kill switch is on in the window, on `gateways` (default: all).
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KillSwitch {
    /// Start, in ms.
    pub at_ms: Ms,
    /// End (exclusive), in ms.
    pub until_ms: Ms,
    /// The gateway indexes whose switch is on (default: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateways: Option<Vec<u32>>,
}

impl Kind for KillSwitch {
    fn fails_calls_from(&self) -> Option<Vec<u32>> {
        Some(Vec::new())
    }

    fn window_ms(&self) -> Option<(u64, u64)> {
        Some((self.at_ms.get(), self.until_ms.get()))
    }

    fn check(&self, cx: &Check) -> Result<(), Invalid> {
        check_window(self.at_ms, self.until_ms)?;
        match &self.gateways {
            Some(gs) => check_gateways(gs, "gateways", cx),
            None => Ok(()),
        }
    }

    fn inject<'a>(&'a self, cx: &'a Ctx<'a>) -> Injection<'a> {
        Box::pin(async move {
            let targets: Vec<usize> = match &self.gateways {
                Some(gs) => gs.iter().map(|&g| g as usize).collect(),
                None => (0..cx.gateways.len()).collect(),
            };
            for &g in &targets {
                if cx.hold(Hold::KillSwitch(g)) {
                    (cx.kill_switch)(g, true);
                }
            }
            cx.sleep_until_ms(self.until_ms.get()).await;
            for &g in &targets {
                if cx.release(Hold::KillSwitch(g)) {
                    (cx.kill_switch)(g, false);
                }
            }
        })
    }

    fn draw(_: &mut Draw, (at, until): (u64, u64), _: &Shape) -> Self {
        KillSwitch {
            at_ms: Bounded(at),
            until_ms: Bounded(until),
            gateways: None,
        }
    }
}
