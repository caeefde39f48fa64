//! The server to deploy links no simulator: its resolved dependency graph holds no madsim,
//! no model checker and no ratelab crate that names them; and the binary serves.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
fn the_server_binary_serves_and_limits() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ratelab-server"))
        .args(["--listen", &format!("127.0.0.1:{port}"), "--capacity", "2"])
        .args(["--refill-per-sec", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the server did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let statuses: Vec<u16> = rt.block_on(async {
        let c = reqwest::Client::new();
        let mut out = Vec::new();
        for _ in 0..3 {
            let r = c
                .get(format!("http://127.0.0.1:{port}/"))
                .header("x-api-key", "ana")
                .send()
                .await
                .unwrap();
            out.push(r.status().as_u16());
        }
        out
    });
    child.kill().ok();
    child.wait().ok();
    assert_eq!(statuses, [200, 200, 429]);
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
