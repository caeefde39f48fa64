//! `ratelab soak` against a real `ratelab-server`.

use crate::{probe_binary, server_binary};
use std::process::{Command, Output};

fn ratelab_probe(args: &[&str]) -> Output {
    Command::new(probe_binary()).args(args).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `ratelab soak`, bounded: it starts a real `ratelab-server`, visits every key,
/// keeps the hot keys denied, and reports each interval's figures and the server's memory.
#[test]
fn soak_runs_a_bounded_load_and_samples_the_server() {
    let dir = ratelab_testkit::temp::TempDir::new("soak");
    let json = dir.path().join("soak.json");
    let server = server_binary();
    let o = ratelab_probe(&[
        "soak",
        "--server",
        server.to_str().unwrap(),
        "--requests",
        "3000",
        "--keys",
        "500",
        "--concurrency",
        "8",
        "--interval-ms",
        "200",
        "--capacity",
        "5",
        "--refill-per-sec",
        "1",
        "--hot-every",
        "5",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains("| t (s) | requests |"), "{table}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).expect("the soak's JSON");
    let samples = r["samples"].as_array().unwrap();
    let sum = |k: &str| samples.iter().map(|s| s[k].as_u64().unwrap()).sum::<u64>();
    assert_eq!(sum("requests"), 3000);
    assert_eq!(sum("admitted") + sum("denied") + sum("errors"), 3000);
    assert_eq!(sum("errors"), 0);
    // 600 requests to 8 hot keys of 5 tokens: most are denied; the 500 others never are.
    assert!(sum("denied") >= 600 - 8 * 5 - 8 * 10, "{r:#}");
    assert!(sum("denied") <= 600, "{r:#}");
    assert!(samples.iter().all(|s| s["rss_kib"].as_u64().unwrap() > 0));
    assert_eq!(samples.last().unwrap()["keys_seen"], 500);

    let o = ratelab_probe(&["soak", "--server", "/nonexistent/ratelab-server"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("no such server binary"),
        "{}",
        stderr(&o)
    );
}
