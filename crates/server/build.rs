//! Compiles the RLS v3 protos (`proto/`) with protox, a protobuf compiler in Rust, so building
//! the server needs no `protoc` on the machine; and marks the tests that need a program that
//! is not installed (redis-server, nginx, `nm`, Python's grpcio) ignored, unless its
//! `RATELAB_REQUIRE_*` variable is `1` (see `ratelab_procs::installed`).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    use ratelab_procs::installed::{
        GRPCIO, HAPROXY, NGINX, NM, REDIS, REDIS_CLUSTER, build_script,
    };
    println!("cargo:rerun-if-changed=proto");
    let files = protox::compile(["envoy/service/ratelimit/v3/rls.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(files)?;
    build_script(&[&REDIS, &REDIS_CLUSTER, &NGINX, &HAPROXY, &NM, &GRPCIO]);
    Ok(())
}
