//! `packet_loss`: `rate` of every message on the network is lost in the window.

use super::kind::{Check, Ctx, Injection, Invalid, Kind, Rated, Shape};
use crate::rng::Draw;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `rate` of every message on the network is lost in the window (madsim's loss rate).
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct PacketLoss(pub Rated);

impl Kind for PacketLoss {
    fn window_ms(&self) -> Option<(u64, u64)> {
        self.0.window_ms()
    }

    fn check(&self, _: &Check) -> Result<(), Invalid> {
        self.0.check()
    }

    fn inject<'a>(&'a self, cx: &'a Ctx<'a>) -> Injection<'a> {
        Box::pin(async move {
            let rate = self.0.rate();
            cx.net.update_config(|c| c.packet_loss_rate = rate);
            cx.sleep_until_ms(self.0.until_ms.get()).await;
            cx.net.update_config(|c| c.packet_loss_rate = 0.0);
        })
    }

    fn draw(d: &mut Draw, window: (u64, u64), _: &Shape) -> Self {
        PacketLoss(Rated::draw(d, window))
    }
}
