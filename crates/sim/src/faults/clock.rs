//! `clock`: one gateway's clock runs ahead or behind, and drifts.

use super::kind::{Check, Invalid, Kind, Shape, check_gateway};
use crate::locate::PathSeg;
use crate::rng::Draw;
use crate::values::Signed;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `gateway`'s clock runs `offset_ms` ahead (negative: behind) and drifts by `drift_ppm`, for
/// the whole run.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Clock {
    /// The gateway index.
    pub gateway: u32,
    /// Constant offset, ms (may be negative).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset_ms: Option<Signed<3_600_000>>,
    /// Drift in parts per million (may be negative).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift_ppm: Option<Signed<100_000>>,
}

impl Kind for Clock {
    fn fails_calls_from(&self) -> Option<Vec<u32>> {
        Some(Vec::new())
    }

    fn window_ms(&self) -> Option<(u64, u64)> {
        None
    }

    fn check(&self, cx: &Check) -> Result<(), Invalid> {
        check_gateway(self.gateway, vec![PathSeg::Key("gateway".into())], cx)?;
        if self.offset_ms.is_none() && self.drift_ppm.is_none() {
            return Err((
                Vec::new(),
                "a clock fault needs `offset_ms`, `drift_ppm` or both".into(),
            ));
        }
        Ok(())
    }

    fn clock(&self, gateway: u32) -> Option<(i64, i64)> {
        (gateway == self.gateway).then(|| {
            (
                self.offset_ms.map_or(0, Signed::get) * 1_000_000,
                self.drift_ppm.map_or(0, Signed::get),
            )
        })
    }

    fn draw(d: &mut Draw, _: (u64, u64), shape: &Shape) -> Self {
        let gateway = d.int(0, shape.gateways - 1) as u32;
        let offset = d.int(0, 4_000) as i64 - 2_000;
        let drift = d.int(0, 20_000) as i64 - 10_000;
        Clock {
            gateway,
            offset_ms: Some(Signed(offset)),
            drift_ppm: Some(Signed(drift)),
        }
    }
}
