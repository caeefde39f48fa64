//! The workspace as cargo sees it, for the tests that check it or run another package's
//! binary: a package's dependency graph ([`closure`]), the libc functions a binary defines
//! ([`defined_replacements`]), and a workspace binary built into this test's own target
//! directory ([`workspace_binary`]).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The cargo that built the tests (the one that runs them sets `CARGO`).
fn cargo() -> String {
    std::env::var("CARGO")
        .ok()
        .or_else(|| option_env!("CARGO").map(str::to_owned))
        .unwrap_or_else(|| "cargo".to_owned())
}

/// The crates `package` links: its normal and build dependencies, transitively, as
/// `cargo tree` resolves them for this machine with the workspace's own flags (which set
/// `--cfg madsim`, so a dependency that pulls madsim in under that flag would show).
pub fn closure(package: &str) -> BTreeSet<String> {
    let out = Command::new(cargo())
        .args(["tree", "--locked", "-p", package, "-e", "normal,build"])
        .args(["--prefix", "none", "--format", "{p}"])
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

/// The libc functions madsim's simulator replaces with `#[no_mangle]` definitions.
pub const REPLACED: [&str; 7] = [
    "clock_gettime",
    "gettimeofday",
    "getrandom",
    "getentropy",
    "sysconf",
    "pthread_attr_init",
    "gethostname",
];

/// The replaced functions `binary` defines, by binutils' `nm`; `None` without `nm`.
pub fn defined_replacements(binary: &Path) -> Option<Vec<&'static str>> {
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

/// Asserts that `package`'s resolved graph holds `expected` and no simulator, model checker
/// or crate that names them; and, so that the check can fail, that the simulation binary's
/// graph holds madsim.
pub fn assert_no_simulator_in_graph(package: &str, expected: &[&str]) {
    let deps = closure(package);
    for e in expected {
        assert!(deps.contains(*e), "{package} does not link {e}: {deps:?}");
    }
    for banned in ["madsim", "ratelab-sim", "ratelab-lab", "loom", "shuttle"] {
        assert!(!deps.contains(banned), "{package} links {banned}: {deps:?}");
    }
    assert!(closure("ratelab").contains("madsim"), "the canary");
}

/// Asserts that `binary` defines none of the libc functions madsim replaces, and that
/// `canary` (a binary that links the simulator) does, so that the check can fail. Without
/// `nm`: a failure when `RATELAB_REQUIRE_NM=1` (as in CI), else a loud skip.
pub fn assert_defines_no_replacement(binary: &Path, canary: &Path) {
    let Some(defined) = defined_replacements(binary) else {
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
        "{} defines madsim's replacements",
        binary.display()
    );
    let defined = defined_replacements(canary).expect("nm ran above");
    assert!(
        defined.contains(&"clock_gettime"),
        "the canary: {defined:?}"
    );
}

/// Binary `bin` of workspace package `package`, for a test of one package that runs another's
/// (cargo names only the package's own, in `CARGO_BIN_EXE_*`): the one in this test's target
/// directory, where a workspace `cargo test` builds every binary before any test runs; built
/// there with this test's profile when it is missing (`cargo test -p` of one package on a
/// fresh target). A binary left from an older build is used as it is: run the workspace's
/// `cargo test`, or build it, after changing its package. Panics, with cargo's output, if
/// it does not build.
pub fn workspace_binary(package: &str, bin: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/PROFILE/deps/TEST-HASH
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("a test binary under target/PROFILE/deps");
    let path = profile_dir.join(bin);
    if path.is_file() {
        return path;
    }
    let target = profile_dir.parent().expect("a target directory");
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => "dev",
        Some(other) => other,
    };
    let out = Command::new(cargo())
        .args(["build", "--quiet", "--locked", "-p", package, "--bin", bin])
        .args(["--profile", profile])
        .env("CARGO_TARGET_DIR", target)
        .output()
        .expect("cargo build runs");
    assert!(
        out.status.success(),
        "cargo build -p {package} --bin {bin}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(path.is_file(), "{} was not built", path.display());
    path
}
