//! `store_crash`: the store crashes, losing every bucket, and restarts empty.

use super::kind::{Ctx, Injection, Kind, Outage, Shape};
use crate::dilation::sleep;
use crate::rng::Draw;
use crate::values::{Bounded, Ms};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The store crashes at `at_ms`, losing all state (its replica's too), and restarts
/// `restart_after_ms` later.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StoreCrash {
    /// Start, in ms.
    pub at_ms: Ms,
    /// Downtime before the restart, in ms.
    pub restart_after_ms: Ms,
}

impl Kind for StoreCrash {
    fn window_ms(&self) -> Option<(u64, u64)> {
        let at = self.at_ms.get();
        Some((at, at + self.restart_after_ms.get()))
    }

    fn outage(&self) -> Option<Outage> {
        Some(Outage::Restart)
    }

    fn inject<'a>(&'a self, cx: &'a Ctx<'a>) -> Injection<'a> {
        Box::pin(async move {
            cx.handle.kill(cx.store);
            // Every copy goes down with the primary.
            if let Some(r) = cx.replica {
                r.clear();
            }
            sleep(Duration::from_millis(self.restart_after_ms.get())).await;
            cx.handle.restart(cx.store);
        })
    }

    fn draw(d: &mut Draw, (at, _): (u64, u64), _: &Shape) -> Self {
        StoreCrash {
            at_ms: Bounded(at),
            restart_after_ms: Bounded(d.int(1, 500)),
        }
    }
}
