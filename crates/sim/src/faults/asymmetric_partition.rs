//! `asymmetric_partition`: the store's replies to some gateways are lost, while their calls
//! still reach it and are applied.

use super::kind::{Check, Ctx, Cut, Injection, Invalid, Kind, Shape};
use crate::rng::Draw;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The store cannot reach `gateways` in the window, but they still reach it: every call they
/// send is applied and its reply lost (a one-way link failure).
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct AsymmetricPartition(pub Cut);

impl Kind for AsymmetricPartition {
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
            let links: Vec<_> = self.0.nodes(cx).into_iter().map(|g| (cx.store, g)).collect();
            self.0.cut(cx, &links).await;
        })
    }

    fn draw(d: &mut Draw, window: (u64, u64), shape: &Shape) -> Self {
        AsymmetricPartition(Cut::draw(d, window, shape))
    }
}
