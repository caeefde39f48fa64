//! What the probe's checks found.

use crate::checker::Judged;

/// The verdict on a probe: what every check that applied found ([`Judged`]): its failures,
/// the keys it could not decide, its figures and its evidence. Each check reads its own
/// back (`ProbeVerdict::envelope`, `ProbeVerdict::linearizable`…, beside the check).
#[derive(Clone, Debug, Default)]
pub struct ProbeVerdict(pub Judged);

impl ProbeVerdict {
    /// Figure `name` ([`super::CHECKS`] declares them), 0 when no check measured it.
    pub fn figure(&self, name: &str) -> u64 {
        debug_assert!(
            super::CHECKS.figure(name).is_some(),
            "{name:?} is no probe check's figure"
        );
        self.0.figure(name).unwrap_or(0)
    }

    /// The checks that applied to the claim and judged the history, in the registry's order.
    pub fn checks(&self) -> &[&'static str] {
        &self.0.applied
    }
}
