//! The proofs on Redis need `redis-server` (and `redis-cli` for a cluster): without them,
//! and unless `RATELAB_REQUIRE_REDIS=1`, those tests are marked ignored (see
//! `ratelab_procs::installed`).

fn main() {
    use ratelab_procs::installed::{REDIS, REDIS_CLUSTER, build_script};
    build_script(&[&REDIS, &REDIS_CLUSTER]);
}
