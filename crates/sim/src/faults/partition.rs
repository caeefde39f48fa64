//! `partition`: some gateways cannot reach the store, nor it them.

use super::kind::{Check, Ctx, Cut, Injection, Invalid, Kind, Shape};
use crate::rng::Draw;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `gateways` cannot reach the store (both directions) in the window.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct Partition(pub Cut);

impl Kind for Partition {
    fn fails_calls_from(&self) -> Option<Vec<u32>> {
        Some(self.0.gateways.clone())
    }

    fn window_ms(&self) -> Option<(u64, u64)> {
        self.0.window_ms()
    }

    fn check(&self, cx: &Check) -> Result<(), Invalid> {
        self.0.check(cx)
    }

    fn inject<'a>(&'a self, cx: &'a Ctx<'a>) -> Injection<'a> {
        Box::pin(async move {
            let links: Vec<_> = self
                .0
                .nodes(cx)
                .into_iter()
                .flat_map(|g| [(g, cx.store), (cx.store, g)])
                .collect();
            self.0.cut(cx, &links).await;
        })
    }

    fn draw(d: &mut Draw, window: (u64, u64), shape: &Shape) -> Self {
        Partition(Cut::draw(d, window, shape))
    }
}
