//! The shuttle model shared by the shuttle test binaries: N gateways take the last token of
//! one key through the real `MemoryStore`, built on shuttle's mutex by the harness any
//! limiter can use (`ratelab_sim::harness::shuttle`).

use ratelab_core::TokenBucket;
use ratelab_sim::harness::Race;
pub use ratelab_sim::harness::shuttle::{Counter, expect_violation};
use ratelab_store::Path;

/// The model: a bucket of capacity `gateways` drained to one token, then `gateways` threads
/// each ask for a token at the same instant on `path`. Panics (which shuttle reports with the
/// failing schedule) if more than one is admitted, or none.
pub fn take_last_token(
    path: Path,
    gateways: usize,
    executions: std::sync::Arc<Counter>,
) -> impl Fn() + Send + Sync + 'static {
    let bucket = TokenBucket::per_second(gateways as u64, 1).expect("valid policy");
    let race = Race::last_unit(bucket, path, gateways);
    assert_eq!(race.expected().1, 1, "the bucket alone admits one of them");
    ratelab_sim::harness::shuttle::race(race, executions)
}
