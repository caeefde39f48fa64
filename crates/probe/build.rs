//! The probe's tests on Redis, Redis Cluster and nginx need them installed, and the graph
//! test's symbol check needs binutils' `nm`: without one, and unless its `RATELAB_REQUIRE_*`
//! variable is `1`, the tests that need it are marked ignored (see `ratelab_procs::installed`).

fn main() {
    use ratelab_procs::installed::{NGINX, NM, REDIS, REDIS_CLUSTER, build_script};
    build_script(&[&REDIS, &REDIS_CLUSTER, &NGINX, &NM]);
}
