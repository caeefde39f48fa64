//! What measures real processes links no simulator: the probe crate's resolved dependency
//! graph holds no madsim, no model checker and no ratelab crate that names them, and its
//! binary defines none of the libc functions madsim replaces (the clock, randomness and
//! `sysconf` a measurement reads are the machine's own).

use crate::probe_binary;
use ratelab_testkit::cargo::{closure, defined_replacements, workspace_binary};

#[test]
fn the_probe_graph_has_no_simulator() {
    let deps = closure("ratelab-probe");
    assert!(
        deps.contains("ratelab-check") && deps.contains("tokio") && deps.contains("reqwest"),
        "{deps:?}"
    );
    for banned in ["madsim", "ratelab-sim", "ratelab-lab", "loom", "shuttle"] {
        assert!(
            !deps.contains(banned),
            "ratelab-probe links {banned}: {deps:?}"
        );
    }
    // The check can fail: the simulation binary's graph has madsim.
    assert!(closure("ratelab").contains("madsim"));
}

/// Without `nm` the test is marked ignored, unless `RATELAB_REQUIRE_NM=1` (as in CI).
#[test]
#[cfg_attr(
    ratelab_missing_nm,
    ignore = "nm is not installed (Debian: apt-get install binutils)"
)]
fn the_probe_binary_defines_no_libc_replacement() {
    let Some(defined) = defined_replacements(&probe_binary()) else {
        assert_ne!(
            std::env::var("RATELAB_REQUIRE_NM").as_deref(),
            Ok("1"),
            "nm is not installed"
        );
        eprintln!("*** SKIPPED: nm (binutils) is not installed ***");
        return;
    };
    assert_eq!(
        defined,
        Vec::<&str>::new(),
        "ratelab-probe defines madsim's replacements"
    );
    // The canary: the simulation binary does.
    let simulator = workspace_binary("ratelab", "ratelab");
    let defined = defined_replacements(&simulator).expect("nm ran above");
    assert!(
        defined.contains(&"clock_gettime"),
        "the canary: {defined:?}"
    );
}
