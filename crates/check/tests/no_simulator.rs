//! The checkers crate has no simulator in its dependency graph: the real-Redis runs, the
//! probes and the production server use it without linking madsim (whose `#[no_mangle]`
//! libc replacements would come along). Read from the resolved graph in `Cargo.lock`, over
//! every dependency kind the lock records (normal, build and dev, optional ones included).

use std::collections::{BTreeMap, BTreeSet};

/// Each package's dependencies, by name, from `Cargo.lock`.
fn lock_graph() -> BTreeMap<String, Vec<String>> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.lock");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut graph: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for block in text.split("[[package]]").skip(1) {
        let mut name = None;
        let mut deps = Vec::new();
        let mut in_deps = false;
        for line in block.lines().map(str::trim) {
            if let Some(n) = line.strip_prefix("name = ") {
                name = Some(n.trim_matches('"').to_owned());
            } else if line.starts_with("dependencies = [") {
                in_deps = true;
            } else if in_deps && line.starts_with(']') {
                in_deps = false;
            } else if in_deps {
                // `"name"` or `"name version"` (when several versions are locked).
                let dep = line.trim_matches(|c| c == '"' || c == ',');
                deps.push(dep.split(' ').next().unwrap_or(dep).to_owned());
            }
        }
        if let Some(n) = name {
            graph.entry(n).or_default().extend(deps);
        }
    }
    graph
}

fn closure(graph: &BTreeMap<String, Vec<String>>, root: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![root.to_owned()];
    while let Some(p) = todo.pop() {
        if seen.insert(p.clone()) {
            todo.extend(graph.get(&p).into_iter().flatten().cloned());
        }
    }
    seen
}

#[test]
fn the_checkers_depend_on_no_simulator_or_model_checker() {
    let graph = lock_graph();
    let check = closure(&graph, "ratelab-check");
    assert!(check.contains("ratelab-core"), "{check:?}");
    for banned in ["madsim", "ratelab-sim", "loom", "shuttle"] {
        assert!(
            !check.contains(banned),
            "ratelab-check pulls in {banned}: {check:?}"
        );
    }
    // The walk can see madsim when it is there.
    assert!(closure(&graph, "ratelab-sim").contains("madsim"));
}
