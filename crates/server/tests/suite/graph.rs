//! The server to deploy links no simulator: its resolved dependency graph holds no madsim,
//! no model checker and no ratelab crate that names them, nor does the binary define the libc
//! functions madsim replaces.

use ratelab_testkit::cargo::{
    assert_defines_no_replacement, assert_no_simulator_in_graph, workspace_binary,
};

#[test]
fn the_server_graph_has_no_simulator() {
    assert_no_simulator_in_graph("ratelab-server", &["ratelab-gateway", "tokio"]);
}

/// Without `nm` the test is marked ignored, unless `RATELAB_REQUIRE_NM=1` (as in CI).
#[test]
#[cfg_attr(
    ratelab_missing_nm,
    ignore = "nm is not installed (Debian: apt-get install binutils)"
)]
fn the_server_binary_defines_no_libc_replacement() {
    let server = std::path::Path::new(env!("CARGO_BIN_EXE_ratelab-server"));
    let simulator = workspace_binary("ratelab", "ratelab");
    assert_defines_no_replacement(server, &simulator);
}
