//! The edge layer: its own envelope per client address, and denials that spent no quota.

use super::bound::Witness;
use super::checker::{Checker, Figure, Judged, Needs, Run, Runs};
use crate::scenario::Scenario;
use ratelab_check::envelope::{self, Envelope};
use ratelab_check::history::{Answer, History, Layer};
use ratelab_core::TokenBucket;
use serde::{Deserialize, Serialize};

/// The edge layer's figures.
pub struct Edge;

const FIGURES: &[Figure] = &[
    Figure::bounded(
        "edge_max_excess",
        "the edge layer's largest excess over its envelope, per client address",
        Needs::Edge,
    ),
    Figure::bounded("edge_denied", "requests the edge layer denied", Needs::Edge),
    Figure::zero(
        "edge_denied_but_spent",
        "requests the edge denied that still spent per-key quota",
        Needs::Edge,
    ),
];

impl Checker<Runs> for Edge {
    fn name(&self) -> &'static str {
        "edge"
    }

    fn figures(&self) -> &'static [Figure] {
        FIGURES
    }

    fn measure(&self, run: &Run<'_>, out: &mut Judged) {
        let Some(e) = edge_figures(run.sc, run.h) else {
            return;
        };
        out.measured("edge_max_excess", e.max_excess);
        out.measured("edge_denied", e.denied);
        out.measured("edge_denied_but_spent", e.denied_but_spent);
        out.keep("edge", e);
    }
}

/// The edge layer's figures: the envelope checker run per client address over the requests
/// the edge admitted (whatever the per-key layer did next).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct EdgeFigures {
    /// Requests the edge admitted.
    pub admitted: u64,
    /// Requests the edge denied.
    pub denied: u64,
    /// B + R·T summed over addresses: what a correct edge could admit.
    pub envelope: u64,
    /// Largest excess over the edge envelope in any interval, per address.
    pub max_excess: u64,
    /// Excess over B + R·T across each address's run, summed.
    pub total_excess: u64,
    /// The worst window.
    pub witness: Option<Witness>,
    /// Requests the edge denied that reached the per-key layer anyway (always a failure).
    pub denied_but_spent: u64,
}

/// The edge layer's envelope, per client address, over what the edge itself admitted.
fn edge_figures(sc: &Scenario, h: &History) -> Option<EdgeFigures> {
    let e = sc.spec.gateway.edge?;
    let bucket = TokenBucket::per_second(e.capacity.get(), e.refill_per_sec.get()).ok()?;
    let env = Envelope::of_bucket(&bucket);
    // The gateways count IPv6 clients by their /64 (their default); so does the checker.
    let by_peer = envelope::edge_admissions(&h.requests, 64);
    let report = envelope::envelope(&by_peer, env);
    let edge_denied = |r: &&ratelab_check::history::RequestRecord| {
        matches!(
            r.layers.edge,
            Some(Answer::Denied { .. } | Answer::Full | Answer::Cached { .. })
        )
    };
    Some(EdgeFigures {
        admitted: by_peer.values().map(|v| v.len() as u64).sum(),
        denied: h.requests.iter().filter(edge_denied).count() as u64,
        envelope: envelope::allowance(&by_peer, env),
        max_excess: report.max_excess,
        total_excess: report.total_excess,
        witness: report.witness.map(Witness::from),
        denied_but_spent: h
            .requests
            .iter()
            .filter(edge_denied)
            .filter(|r| r.layers.per_key.is_some() || r.store_calls_on(Layer::PerKey) > 0)
            .count() as u64,
    })
}
