//! What measures real processes links no simulator: the probe crate's resolved dependency
//! graph holds no madsim, no model checker and no ratelab crate that names them, and its
//! binary defines none of the libc functions madsim replaces (the clock, randomness and
//! `sysconf` a measurement reads are the machine's own).

use crate::probe_binary;
use ratelab_testkit::cargo::{
    assert_defines_no_replacement, assert_no_simulator_in_graph, workspace_binary,
};

#[test]
fn the_probe_graph_has_no_simulator() {
    assert_no_simulator_in_graph("ratelab-probe", &["ratelab-check", "tokio", "reqwest"]);
}

/// Without `nm` the test is marked ignored, unless `RATELAB_REQUIRE_NM=1` (as in CI).
#[test]
#[cfg_attr(
    ratelab_missing_nm,
    ignore = "nm is not installed (Debian: apt-get install binutils)"
)]
fn the_probe_binary_defines_no_libc_replacement() {
    let simulator = workspace_binary("ratelab", "ratelab");
    assert_defines_no_replacement(&probe_binary(), &simulator);
}
