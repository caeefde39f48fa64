//! Compiles the RLS v3 protos (`proto/`) with protox, a protobuf compiler in Rust, so building
//! the server needs no `protoc` on the machine.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let files = protox::compile(["envoy/service/ratelimit/v3/rls.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(files)?;
    Ok(())
}
