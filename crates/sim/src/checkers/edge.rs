//! The edge layer: its own envelope per client address, and denials that spent no quota.

use super::checker::{Checker, Figure, Needs};

/// The edge layer's figures.
pub struct Edge;

const FIGURES: &[Figure] = &[
    Figure::bounded(
        "edge_max_excess",
        "the edge layer's largest excess over its envelope, per client address",
        Needs::Edge,
        |r| r.report.edge.as_ref().map(|e| e.max_excess),
    ),
    Figure::bounded(
        "edge_denied",
        "requests the edge layer denied",
        Needs::Edge,
        |r| r.report.edge.as_ref().map(|e| e.denied),
    ),
    Figure::zero(
        "edge_denied_but_spent",
        "requests the edge denied that still spent per-key quota",
        Needs::Edge,
        |r| r.report.edge.as_ref().map(|e| e.denied_but_spent),
    ),
];

impl Checker for Edge {
    fn name(&self) -> &'static str {
        "edge"
    }

    fn figures(&self) -> &'static [Figure] {
        FIGURES
    }
}
