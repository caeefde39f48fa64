//! The server to deploy links no simulator: its resolved dependency graph holds no madsim,
//! no model checker and no ratelab crate that names them, nor does the binary define the libc
//! functions madsim replaces.

use ratelab_testkit::cargo::{closure, defined_replacements};

#[test]
fn the_server_graph_has_no_simulator() {
    let deps = closure("ratelab-server");
    assert!(
        deps.contains("ratelab-gateway") && deps.contains("tokio"),
        "{deps:?}"
    );
    for banned in ["madsim", "ratelab-sim", "ratelab-lab", "loom", "shuttle"] {
        assert!(
            !deps.contains(banned),
            "ratelab-server links {banned}: {deps:?}"
        );
    }
    // The check can fail: the simulation binary's graph has madsim.
    assert!(closure("ratelab").contains("madsim"));
}

/// The binary itself defines none of the libc functions madsim replaces; the simulation
/// binary beside it, when built, does (so the check can fail). Without `nm` the test is marked
/// ignored, unless `RATELAB_REQUIRE_NM=1` (as in CI).
#[test]
#[cfg_attr(
    ratelab_missing_nm,
    ignore = "nm is not installed (Debian: apt-get install binutils)"
)]
fn the_server_binary_defines_no_libc_replacement() {
    let server = std::path::Path::new(env!("CARGO_BIN_EXE_ratelab-server"));
    let Some(defined) = defined_replacements(server) else {
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
        "ratelab-server defines madsim's replacements"
    );
    let simulator = server.with_file_name("ratelab");
    if simulator.is_file() {
        let defined = defined_replacements(&simulator).expect("nm ran above");
        assert!(
            defined.contains(&"clock_gettime"),
            "the canary: {defined:?}"
        );
    }
}
