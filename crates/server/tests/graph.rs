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
        .args(["tree", "--locked", "-p", package, "-e", "normal,build"])
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

/// The libc functions madsim's simulator replaces with `#[no_mangle]` definitions.
const REPLACED: [&str; 7] = [
    "clock_gettime",
    "gettimeofday",
    "getrandom",
    "getentropy",
    "sysconf",
    "pthread_attr_init",
    "gethostname",
];

/// The replaced functions `binary` defines, by binutils' `nm`; `None` without `nm`.
fn defined_replacements(binary: &std::path::Path) -> Option<Vec<&'static str>> {
    let out = Command::new("nm")
        .arg("--defined-only")
        .arg(binary)
        .output()
        .ok()?;
    assert!(
        out.status.success(),
        "nm {}: {}",
        binary.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let symbols = String::from_utf8_lossy(&out.stdout);
    assert!(
        symbols.lines().any(|l| l.ends_with(" main")),
        "nm listed no main in {}",
        binary.display()
    );
    let defines = |f: &str| symbols.lines().any(|l| l.ends_with(&format!(" T {f}")));
    Some(REPLACED.into_iter().filter(|f| defines(f)).collect())
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
