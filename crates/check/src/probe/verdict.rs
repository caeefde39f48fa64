//! What the probe's checks found.

use crate::checker::Judged;

/// The verdict on a probe: what every check that applied found ([`Judged`]): its failures,
/// the keys it could not decide, its figures and its evidence. Each check reads its own
/// back (`ProbeVerdict::envelope`, `ProbeVerdict::linearizable`…, beside the check).
#[derive(Clone, Debug, Default)]
pub struct ProbeVerdict(pub Judged);
