//! The recorder every node reaches, and what it keeps of a gateway's answer.

use crate::dilation::{self, dilate};
use crate::lock::Lock;
use crate::scenario::AddressKind;
use madsim::time::{Instant, TimeHandle};
use ratelab_check::history::{Answer, ErrorKind, FailReason, History, Layers};
use ratelab_core::Nanos;
use ratelab_gateway::limits::{PER_IP, PER_KEY};
use ratelab_gateway::{Answer as GatewayAnswer, LayerOutcome};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

/// State every node reaches: the recorder and the run's time origin.
pub(crate) struct Shared {
    pub(crate) t0: Instant,
    /// madsim's clock, read directly: `Instant::now()` in a simulation goes through madsim's
    /// `clock_gettime` shim, which looks the runtime up and converts its time to a timespec
    /// and back on every read. Every request reads the time about ten times.
    pub(crate) time: TimeHandle,
    /// `t0` as madsim's elapsed time (its `Instant`s are that much past a zero instant).
    pub(crate) t0_elapsed: Duration,
    pub(crate) history: Lock<History>,
}

impl Shared {
    /// The recorder, with time zero `setup` from now on madsim's clock.
    pub(crate) fn new(setup: Duration, history: History) -> Shared {
        let time = TimeHandle::current();
        Shared {
            t0: Instant::now() + setup,
            t0_elapsed: time.elapsed() + setup,
            time,
            history: Lock::new(history),
        }
    }

    /// Physical time since time zero: the same reading as
    /// `Instant::now().saturating_duration_since(t0)`, without the shim.
    pub(crate) fn now(&self) -> Nanos {
        dilation::physical(self.time.elapsed().saturating_sub(self.t0_elapsed))
    }

    /// Sleeps until `t` of physical time after time zero.
    pub(crate) async fn sleep_until(&self, t: Duration) {
        madsim::time::sleep_until(self.t0 + dilate(t)).await;
    }

    pub(crate) fn record(&self, f: impl FnOnce(&mut History, Nanos)) {
        self.record_at(self.now(), f);
    }

    /// Records at `now`, a reading of [`Shared::now`] taken earlier in the same poll (madsim's
    /// clock only moves between polls).
    pub(crate) fn record_at(&self, now: Nanos, f: impl FnOnce(&mut History, Nanos)) {
        f(&mut self.history.lock(), now);
    }
}

/// The address client `i` of group `group` sends from.
pub(crate) fn client_ip(kind: AddressKind, group: u32, i: u32) -> IpAddr {
    match kind {
        AddressKind::Ipv4 => IpAddr::V4(Ipv4Addr::from(0x0a20_0000 + i)),
        // fd00:0:0:<i>::1, fd20:0:0:<group>::<i + 1>: unique local addresses.
        AddressKind::Ipv6 => IpAddr::V6(Ipv6Addr::from(
            (0xfd00_u128 << 112) | (u128::from(i) << 64) | 1,
        )),
        AddressKind::Ipv6SharedPrefix => IpAddr::V6(Ipv6Addr::from(
            (0xfd20_u128 << 112) | (u128::from(group) << 64) | (u128::from(i) + 1),
        )),
    }
}

/// What the recorder keeps of a gateway's answer: the binding layer's outcome, and each
/// layer's own.
pub(crate) fn to_history(a: &GatewayAnswer) -> (Answer, Layers) {
    let (edge, per_key) = (a.outcome(PER_IP), a.outcome(PER_KEY));
    let layers = Layers {
        edge: edge.map(layer_answer),
        per_key: per_key.map(layer_answer),
    };
    if a.bypassed {
        return (Answer::Bypassed, layers);
    }
    if matches!(a.verdict, ratelab_gateway::Verdict::Rejected(_)) {
        return (Answer::Rejected, layers);
    }
    let edge_denied = matches!(
        edge,
        Some(LayerOutcome::Decided { decision, .. }) if !decision.allowed
    ) || edge == Some(LayerOutcome::StoreFull);
    let binding = if edge_denied { edge } else { per_key.or(edge) };
    let answer = binding.map_or(Answer::Error(ErrorKind::Unavailable), layer_answer);
    (answer, layers)
}

/// One layer's outcome, as the recorder keeps it.
pub(crate) fn layer_answer(o: LayerOutcome) -> Answer {
    match o {
        LayerOutcome::Decided {
            decision,
            decided_at,
        } if decision.allowed => Answer::Allowed {
            decided_at,
            remaining: decision.remaining,
        },
        LayerOutcome::Decided {
            decision,
            decided_at,
        } => Answer::Denied {
            decided_at,
            retry_after: decision.retry_after.unwrap_or(Nanos::ZERO),
        },
        LayerOutcome::FailedOpen(r) => Answer::FailedOpen(r),
        LayerOutcome::FailedClosed(r) => Answer::Error(match r {
            FailReason::Error => ErrorKind::Unavailable,
            FailReason::Timeout => ErrorKind::Timeout,
            FailReason::BreakerOpen => ErrorKind::BreakerOpen,
        }),
        LayerOutcome::StoreFull => Answer::Full,
        LayerOutcome::Cached(d) => Answer::Cached {
            retry_after: d.retry_after.unwrap_or(Nanos::ZERO),
        },
    }
}
