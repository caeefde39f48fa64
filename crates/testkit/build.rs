//! The kit's own tests start redis-server, a Redis Cluster and nginx: without them, and unless
//! their `RATELAB_REQUIRE_*` variables are `1`, those tests are marked ignored (see
//! `ratelab_procs::installed`).

fn main() {
    use ratelab_procs::installed::{NGINX, REDIS, REDIS_CLUSTER, build_script};
    build_script(&[&REDIS, &REDIS_CLUSTER, &NGINX]);
}
