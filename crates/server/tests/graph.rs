//! The server to deploy links no simulator: its resolved dependency graph holds no madsim,
//! no model checker and no ratelab crate that names them, nor does the binary define the libc
//! functions madsim replaces.

use std::collections::BTreeSet;
use std::process::Command;

/// The crates `package` links: its normal and build dependencies, transitively, as
/// `cargo tree` resolves them for this machine with the workspace's own flags (which set
/// `--cfg madsim`, so a dependency that pulls madsim in under that flag would show).
fn closure(package: &str) -> BTreeSet<String> {
    let out = Command::new(env!("CARGO"))
        .args(["tree", "-p", package, "-e", "normal,build"])
        .args(["--prefix", "none", "--format", "{p}"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

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

/// With binutils' `nm` at hand, the binary itself defines none of the libc functions madsim
/// replaces (a binary that links madsim defines `clock_gettime` and `getrandom`).
#[test]
fn the_server_binary_defines_no_libc_replacement() {
    let Ok(out) = Command::new("nm")
        .args(["--defined-only", env!("CARGO_BIN_EXE_ratelab-server")])
        .output()
    else {
        eprintln!("*** SKIPPED: nm (binutils) is not installed ***");
        return;
    };
    let symbols = String::from_utf8_lossy(&out.stdout);
    for f in [
        "clock_gettime",
        "gettimeofday",
        "getrandom",
        "getentropy",
        "sysconf",
    ] {
        let defined = symbols
            .lines()
            .any(|l| l.ends_with(&format!(" T {f}")) || l.ends_with(&format!(" t {f}")));
        assert!(!defined, "ratelab-server defines {f}");
    }
}

#[test]
fn bad_flags_exit_2() {
    let out = Command::new(env!("CARGO_BIN_EXE_ratelab-server"))
        .args(["--capacity", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--capacity"), "{err}");
}
