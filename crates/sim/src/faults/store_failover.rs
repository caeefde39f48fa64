//! `store_failover`: the primary dies and its replica is promoted with what had reached it.

use super::kind::{Check, Ctx, Injection, Invalid, Kind, Outage, Shape};
use crate::dilation::sleep;
use crate::locate::PathSeg;
use crate::rng::Draw;
use crate::values::{Bounded, Ms};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The store's primary dies at `at_ms`; its replica (`store.replica`) is promoted
/// `promote_after_ms` later with the writes whose copies had reached it by `at_ms`. The
/// writes still on their way are lost.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StoreFailover {
    /// Start, in ms.
    pub at_ms: Ms,
    /// Time from the primary's death to the replica's promotion, in ms.
    pub promote_after_ms: Ms,
}

impl Kind for StoreFailover {
    fn window_ms(&self) -> Option<(u64, u64)> {
        let at = self.at_ms.get();
        Some((at, at + self.promote_after_ms.get()))
    }

    fn check(&self, cx: &Check) -> Result<(), Invalid> {
        if !cx.replica {
            return Err((
                vec![PathSeg::Key("kind".into())],
                "a store_failover promotes the store's replica: expected `store.replica` \
                 (its `lag`, and whether writes `wait` for it)"
                    .into(),
            ));
        }
        Ok(())
    }

    fn outage(&self) -> Option<Outage> {
        Some(Outage::Failover)
    }

    fn inject<'a>(&'a self, cx: &'a Ctx<'a>) -> Injection<'a> {
        Box::pin(async move {
            let kill = cx.shared.now();
            cx.handle.kill(cx.store);
            let lost = cx.replica.map_or_else(Vec::new, |r| r.promote(kill));
            cx.shared.record(|h, t| {
                h.lost_to_failover += lost.len() as u64;
                // The cleanup checker judges deletions by the bucket writes the surviving
                // store holds.
                for (at, key) in &lost {
                    if let Some(key) = key {
                        h.retract_write(key, *at);
                    }
                }
                let n = lost.len();
                h.fault(
                    t,
                    format!("store_failover: {n} writes not on the replica are lost"),
                );
            });
            sleep(Duration::from_millis(self.promote_after_ms.get())).await;
            // The restart starts from the replica's copies: the promotion.
            cx.handle.restart(cx.store);
        })
    }

    /// Drawn with the replica it needs, not by the per-kind loop.
    fn drawn() -> bool {
        false
    }

    fn draw(d: &mut Draw, (at, _): (u64, u64), _: &Shape) -> Self {
        StoreFailover {
            at_ms: Bounded(at),
            promote_after_ms: Bounded(d.int(1, 500)),
        }
    }
}
