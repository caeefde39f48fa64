//! docs/ARCHITECTURE.md draws the workspace's dependencies as cargo resolves them today: the
//! picture is recomputed from `cargo metadata` and compared with the doc's block.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// Each workspace package's normal dependencies on other workspace packages.
fn workspace_graph() -> BTreeMap<String, BTreeSet<String>> {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    let packages = meta["packages"].as_array().expect("packages");
    let names: BTreeSet<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|d| d["kind"].is_null())
                .filter_map(|d| d["name"].as_str())
                .filter(|d| names.contains(d))
                .map(str::to_owned)
                .collect();
            (p["name"].as_str().unwrap_or_default().to_owned(), deps)
        })
        .collect()
}

/// The longest chain of dependencies under `name` (0 for a crate that depends on none).
fn layer(
    graph: &BTreeMap<String, BTreeSet<String>>,
    name: &str,
    memo: &mut BTreeMap<String, usize>,
) -> usize {
    if let Some(&l) = memo.get(name) {
        return l;
    }
    let l = graph[name]
        .iter()
        .map(|d| layer(graph, d, memo) + 1)
        .max()
        .unwrap_or(0);
    memo.insert(name.to_owned(), l);
    l
}

/// The picture: the crates layer by layer, each with what it depends on (without the
/// `ratelab-` prefix), the proofs' package (no normal dependencies) left out.
fn picture(graph: &BTreeMap<String, BTreeSet<String>>) -> String {
    let short = |n: &str| n.strip_prefix("ratelab-").unwrap_or(n).to_owned();
    let mut memo = BTreeMap::new();
    let mut layers: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
    for name in graph.keys().filter(|n| *n != "ratelab-proofs") {
        layers
            .entry(layer(graph, name, &mut memo))
            .or_default()
            .push(name);
    }
    let mut out = String::from("```text\n");
    for (l, names) in layers {
        for (i, name) in names.iter().enumerate() {
            let deps: Vec<String> = graph[*name].iter().map(|d| short(d)).collect();
            let on = if deps.is_empty() {
                "(nothing in the workspace)".to_owned()
            } else {
                format!("← {}", deps.join(", "))
            };
            let head = if i == 0 {
                format!("{l}")
            } else {
                String::new()
            };
            out.push_str(&format!("{head:>2}  {name:<28} {on}\n"));
        }
    }
    out.push_str("```\n");
    out
}

#[test]
fn the_architecture_page_draws_todays_dependencies() {
    let graph = workspace_graph();
    // What the picture must show, checked on the graph itself so the check can fail.
    let reaches = |from: &str, to: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_owned()];
        while let Some(n) = stack.pop() {
            if n == to {
                return true;
            }
            if seen.insert(n.clone()) {
                stack.extend(graph[&n].iter().cloned());
            }
        }
        false
    };
    assert!(reaches("ratelab", "ratelab-sim"));
    for real in ["ratelab-probe", "ratelab-server", "ratelab-check"] {
        assert!(
            !reaches(real, "ratelab-sim"),
            "{real} reaches the simulator"
        );
    }
    ratelab_testkit::docs::check_block("docs/ARCHITECTURE.md", "crate-graph", &picture(&graph));
}

/// The loom and shuttle harness builds without the simulator: nothing madsim in its resolved
/// graph, and no `cfg(madsim)` in its code (the simulator's crate, by contrast, refuses to
/// build without it).
#[test]
fn the_model_checking_harness_needs_no_simulator() {
    let deps = ratelab_testkit::cargo::closure("ratelab-harness");
    assert!(
        deps.contains("loom") && deps.contains("shuttle"),
        "{deps:?}"
    );
    assert!(!deps.contains("madsim"), "{deps:?}");
    assert!(ratelab_testkit::cargo::closure("ratelab-sim").contains("madsim"));
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/harness/src");
    for entry in std::fs::read_dir(&dir).expect("the harness's sources") {
        let path = entry.expect("an entry").path();
        let text = std::fs::read_to_string(&path).expect("a source file");
        assert!(!text.contains("cfg(madsim)"), "{}", path.display());
    }
}
