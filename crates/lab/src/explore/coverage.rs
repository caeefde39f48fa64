//! Coverage probes ("sometimes" assertions, as in Antithesis and stateright): interesting
//! situations a run reached. A campaign reports how many seeds reached each, and names those
//! none did: a campaign that never partitions a gateway while others deny has not tested
//! what it seems to.
//!
//! Each probe is read off the run's history, report and scenario, never off the code under
//! test. A new probe is a name in [`PROBES`] and its test in [`reached`].

use ratelab_check::history::{Answer, History};
use ratelab_core::{Algorithm, Nanos};
use ratelab_sim::scenario::{FaultKind, FaultSpec, ms};
use ratelab_sim::{Report, Scenario};

/// Every probe, by name.
pub const PROBES: [&str; 20] = [
    "denial-during-partition",
    "fail-open",
    "breaker-opened-and-closed",
    "stale-token-refused",
    "bucket-expired-and-came-back",
    "skew-beyond-a-window",
    "crash-with-state-loss",
    "lost-reply-applied",
    "kill-switch-bypass",
    "store-full",
    "cleanup-deleted-a-bucket",
    "failover-lost-writes",
    "denial-cache-answered",
    "guard-rejected",
    "cost-above-three",
    "boundary-bursts",
    "run-past-ten-seconds",
    "retried-at-retry-after",
    "ipv6-client-answered",
    "one-ipv6-prefix-at-the-edge",
];

/// The probes one run reached, in [`PROBES`] order.
pub fn reached(sc: &Scenario, report: &Report, h: &History) -> Vec<&'static str> {
    let spec = sc.spec();
    let window = sc.policy().quota().window;
    let windows = |kind| {
        spec.faults
            .iter()
            .filter(move |f| f.kind() == kind)
            .filter_map(|f| f.window_ms())
            .map(|(from, until)| (ms(from), ms(until)))
    };
    let denied_at = || {
        h.requests.iter().filter_map(|r| match r.answer {
            Some((_, Answer::Denied { decided_at, .. })) => Some(decided_at),
            _ => None,
        })
    };
    let job = report.job.as_ref();
    let test = |name: &str| -> bool {
        match name {
            "denial-during-partition" => windows(FaultKind::Partition)
                .any(|(from, until)| denied_at().any(|t| t >= from && t < until)),
            "fail-open" => report.figure("fail_open") > 0,
            "breaker-opened-and-closed" => {
                report.gateway_counters.breaker_opened > 0
                    && report.gateway_counters.breaker_closed > 0
            }
            "stale-token-refused" => job.is_some_and(|j| j.stale_rejected > 0),
            "bucket-expired-and-came-back" => came_back(h, window),
            "skew-beyond-a-window" => spec.faults.iter().any(|f| {
                let FaultSpec::Clock(c) = f else {
                    return false;
                };
                c.offset_ms
                    .is_some_and(|o| o.get().unsigned_abs() * 1_000_000 > window.as_u64())
                    && h.requests
                        .iter()
                        .any(|r| r.gateway == c.gateway && r.answer.is_some())
            }),
            "crash-with-state-loss" => spec.faults.iter().any(|f| {
                let FaultSpec::StoreCrash(c) = f else {
                    return false;
                };
                let at = ms(c.at_ms.get());
                h.requests
                    .iter()
                    .any(|r| r.written_at.is_some_and(|w| w < at))
            }),
            "lost-reply-applied" => h.applied_replies_lost > 0,
            "failover-lost-writes" => h.lost_to_failover > 0,
            "kill-switch-bypass" => report.figure("bypassed") > 0,
            "store-full" => report.figure("full") > 0,
            "cleanup-deleted-a-bucket" => job.is_some_and(|j| j.keys_removed > 0),
            "denial-cache-answered" => report.figure("cached") > 0,
            "guard-rejected" => report.figure("rejected") > 0,
            "cost-above-three" => h.requests.iter().any(|r| r.cost > 3 && r.answer.is_some()),
            "boundary-bursts" => spec
                .clients
                .iter()
                .any(|c| c.arrival.pattern() == ratelab_sim::scenario::Pattern::BoundaryBursts),
            "run-past-ten-seconds" => spec.duration_ms.get() > 10_000,
            "retried-at-retry-after" => retried_at_retry_after(h),
            "ipv6-client-answered" => h
                .requests
                .iter()
                .any(|r| r.peer.is_ipv6() && r.answer.is_some()),
            "one-ipv6-prefix-at-the-edge" => one_prefix_at_the_edge(h),
            _ => false,
        }
    };
    PROBES.into_iter().filter(|p| test(p)).collect()
}

/// Whether a client, denied, sent the same key again a whole number of seconds (at least
/// one, the Retry-After it was told, rounded up as the header is) after the denial's answer,
/// and was answered.
fn retried_at_retry_after(h: &History) -> bool {
    let mut denied: std::collections::BTreeMap<(u32, &str), Vec<Nanos>> = Default::default();
    for r in &h.requests {
        if let Some((at, Answer::Denied { retry_after, .. })) = r.answer
            && retry_after > Nanos::ZERO
        {
            let secs = retry_after.as_u64().div_ceil(1_000_000_000);
            denied
                .entry((r.client, r.key.as_str()))
                .or_default()
                .push(Nanos(at.as_u64() + secs * 1_000_000_000));
        }
    }
    h.requests.iter().any(|r| {
        r.answer.is_some()
            && denied
                .get(&(r.client, r.key.as_str()))
                .is_some_and(|due| due.contains(&r.sent_at))
    })
}

/// Whether the edge layer decided for two addresses of one IPv6 /64.
fn one_prefix_at_the_edge(h: &History) -> bool {
    let mut seen: std::collections::BTreeMap<String, std::net::IpAddr> = Default::default();
    h.requests
        .iter()
        .filter(|r| r.peer.is_ipv6() && r.layers.edge.is_some())
        .any(|r| {
            let net = ratelab_check::envelope::network(r.peer, 64);
            *seen.entry(net).or_insert(r.peer) != r.peer
        })
}

/// Whether some key was admitted, then left alone longer than its state lives (at most the
/// policy's window: a bucket refills from empty, a window ends), then admitted again.
fn came_back(h: &History, window: Nanos) -> bool {
    let mut last: std::collections::BTreeMap<&str, Nanos> = Default::default();
    let mut admitted: Vec<(Nanos, &str)> = h
        .requests
        .iter()
        .filter_map(|r| match r.layers.per_key {
            Some(Answer::Allowed { decided_at, .. }) => Some((decided_at, r.key.as_str())),
            _ => None,
        })
        .collect();
    admitted.sort_unstable();
    for (t, key) in admitted {
        if let Some(prev) = last.insert(key, t)
            && t.as_u64().saturating_sub(prev.as_u64()) > window.as_u64()
        {
            return true;
        }
    }
    false
}
