//! A gateway's view of time: the run's time skewed by its clock faults, and its timeouts.

use super::record::Shared;
use crate::dilation::dilate;
use crate::timeouts::Timeouts;
use ratelab_core::Nanos;
use ratelab_gateway::Env;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// A gateway's view of time: true time, shifted by `offset_ns` and scaled by `1 + drift_ppm/10⁶`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Clock {
    pub(crate) offset_ns: i64,
    pub(crate) drift_ppm: i64,
}

impl Clock {
    pub(crate) fn read(self, truth: Nanos) -> Nanos {
        let t = i128::from(truth.as_u64());
        let skewed = t + t * i128::from(self.drift_ppm) / 1_000_000 + i128::from(self.offset_ns);
        Nanos(u64::try_from(skewed.max(0)).unwrap_or(u64::MAX))
    }
}

/// Unix time of the simulation's time zero on every gateway's wall clock (request ids):
/// 2026-01-01T00:00:00Z. A gateway's clock fault shifts its wall clock too.
pub const SIM_EPOCH_MS: u64 = 1_767_225_600_000;

/// A gateway node's view of time: its own (skewed) clock; its node's timeout queue.
#[derive(Clone)]
pub(crate) struct SimEnv {
    pub(crate) shared: Arc<Shared>,
    pub(crate) clock: Clock,
    pub(crate) timeouts: Arc<Timeouts>,
}

impl Env for SimEnv {
    fn now(&self) -> Nanos {
        self.clock.read(self.shared.now())
    }

    fn unix_now(&self) -> Nanos {
        Nanos::from_millis(SIM_EPOCH_MS).saturating_add(self.now())
    }

    /// madsim's own time, which its timeouts run on (the skewed clock is for decisions).
    fn monotonic(&self) -> Nanos {
        self.shared.now()
    }

    /// The queue's own future, not wrapped in another: a wrapper would hold a second copy
    /// of `fut` (the gateway's whole store call) and move it once more.
    fn timeout<F: Future + Send>(
        &self,
        after: Duration,
        fut: F,
    ) -> impl Future<Output = Option<F::Output>> + Send
    where
        F::Output: Send,
    {
        self.timeouts.timeout(dilate(after), fut)
    }
}
