//! A bounded audit of two cheap targets, one from npm and one from PyPI, asserting what is
//! so by design: a limiter whose instances share an atomic counter stays within its policy,
//! a read-then-write one and instances that each count alone are caught, a field no client
//! can read is flagged, and a fail-closed limiter admits nothing while its store is frozen or
//! dead and decides again once it is back. The full audit is `ratelab audit`.

use ratelab_probe::audit::{self, Settings, card};
use std::path::Path;

/// The targets, when their packages are installed (`ratelab audit --install-only NAME`);
/// `None` (after saying why) when they are not and not required.
fn targets(test: &str, names: &[&str]) -> Option<Vec<audit::Target>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../audits");
    let names: Vec<String> = names.iter().map(|s| (*s).to_owned()).collect();
    let targets = audit::select(&root, &names).expect("the recipes load");
    let redis = std::process::Command::new("redis-server")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let how = "Debian: apt-get install redis-server";
    if !ratelab_testkit::require(test, "redis-server", redis, "RATELAB_REQUIRE_REDIS", how) {
        return None;
    }
    // Each target's packages are looked up at once (each lookup starts node or python).
    let missing: Vec<Option<String>> = std::thread::scope(|s| {
        let looking: Vec<_> = targets
            .iter()
            .map(|t| s.spawn(|| audit::install::ensure(&t.loaded, false).err()))
            .collect();
        looking.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (t, missing) in targets.iter().zip(missing) {
        let how = format!(
            "ratelab audit --install-only {}: {}",
            t.loaded.name,
            missing.as_deref().unwrap_or("")
        );
        let ok = ratelab_testkit::require(
            test,
            &t.loaded.name,
            missing.is_none(),
            "RATELAB_REQUIRE_AUDITS",
            &how,
        );
        if !ok {
            return None;
        }
    }
    Some(targets)
}

fn audited(t: &audit::Target) -> card::Card {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let done = rt
        .block_on(audit::audit(t, &Settings::bounded(), |_, _| {}))
        .unwrap_or_else(|e| panic!("{}: {e}", t.name()));
    card::card(&done)
}

fn checks(c: &card::Card) -> Vec<&str> {
    c.findings.iter().map(|f| f.check.as_str()).collect()
}

/// The checks that see over-admission.
const OVER: [&str; 2] = ["envelope", "linearizable"];

#[test]
fn an_atomic_limiter_holds_a_read_then_write_one_and_lone_instances_are_caught() {
    // The atomic target twice, side by side: identical runs give the same verdict.
    let names = [
        "rate-limiter-flexible/atomic",
        "rate-limiter-flexible/non-atomic",
        "rate-limiter-flexible/memory",
        "flask-limiter/redis-fixed",
        "rate-limiter-flexible/atomic",
    ];
    let Some(targets) = targets("audit", &names) else {
        return;
    };
    // Side by side: each target has its own store, instances and ports.
    let cards: Vec<card::Card> = std::thread::scope(|s| {
        let running: Vec<_> = targets.iter().map(|t| s.spawn(|| audited(t))).collect();
        running.into_iter().map(|h| h.join().unwrap()).collect()
    });
    fn verdict(c: &card::Card) -> (String, Vec<&str>) {
        let mut found = checks(c);
        found.sort_unstable();
        found.dedup();
        (c.conclusion.clone(), found)
    }
    assert_eq!(
        verdict(&cards[0]),
        verdict(&cards[4]),
        "two runs of one target: {:?} and {:?}",
        cards[0].findings,
        cards[4].findings
    );
    for (t, c) in targets.iter().zip(&cards) {
        let found = checks(c);
        eprint!("{}", card::text(c));
        assert_eq!(c.failed, 0, "{}: every request decided", c.target);
        assert!(c.requests > 250, "{}: {} requests", c.target, c.requests);
        match t.variant().name.as_str() {
            // One Lua script or one INCR per decision: within the policy.
            "atomic" | "redis-fixed" => assert!(
                !found.iter().any(|f| OVER.contains(f) || *f == "decisions"),
                "{}: {found:?}",
                c.target
            ),
            // A GET then a SET: two clients read the same count (the lost update).
            "non-atomic" => assert!(
                found.iter().any(|f| OVER.contains(f)),
                "{}: {found:?}",
                c.target
            ),
            // Round robin over two instances that each admit the limit.
            "memory" => {
                assert!(
                    found.iter().any(|f| OVER.contains(f)),
                    "{}: {found:?}",
                    c.target
                );
                assert!(
                    c.findings.iter().all(|f| f.cause.is_some()),
                    "every finding's cause is named: {:?}",
                    c.findings
                );
            }
            other => panic!("unexpected variant {other}"),
        }
        // Every target here that shares a store declares fail-closed: while its store was
        // frozen or dead it admitted nothing, and it decides again once the store is back.
        // (Its client has no command timeout, so a request sent while the store is frozen
        // may wait for it: the one failure-mode finding such a target may have.)
        if c.store != "none" {
            let f = c.faults.as_ref().expect("the store-fault phase ran");
            assert_eq!(f.down.admitted, 0, "{}: {f:?}", c.target);
            assert!(f.recovered.requests > 0, "{}: {f:?}", c.target);
            assert!(
                c.findings.iter().all(|x| x.check != "recovery"
                    && (x.check != "failure-mode"
                        || (x.witness.contains("got no answer until")
                            && x.cause.as_deref() == Some("its store client's configuration")))),
                "{}: {:?}",
                c.target,
                c.findings
            );
        } else {
            assert_eq!(c.faults, None, "{}: no store to fault", c.target);
        }
        if t.loaded.name == "rate-limiter-flexible" {
            // The README's headers, which the glue sends, give Retry-After as a fraction of
            // seconds: the glue's doing, no upstream item's.
            let fields = c.findings.iter().find(|f| f.check == "fields");
            assert!(
                fields.is_some_and(|f| f.witness.contains("retry-after")
                    && f.upstream.is_none()
                    && f.cause.as_deref() == Some("the audit's glue")),
                "{}: {:?}",
                c.target,
                c.findings
            );
        }
    }
}

#[test]
fn the_audits_page_is_rendered_from_the_results() {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
    let cards = card::read_all(&docs.join("results/audits")).expect("the results read");
    assert!(
        !cards.is_empty(),
        "docs/results/audits holds the published audit"
    );
    // Each finding's cause is what the recipes name today.
    let mut named = cards.clone();
    card::refresh(&mut named, &docs.join("../audits")).expect("the recipes load");
    assert!(
        named == cards,
        "docs/results/audits names causes the recipes no longer do: run `ratelab audit --render`"
    );
    let page = std::fs::read_to_string(docs.join("AUDITS.md")).expect("docs/AUDITS.md");
    assert!(
        page == card::markdown(
            &cards,
            &audit::explore::saved(&docs.join("results/explore")).expect("the campaigns read")
        ),
        "docs/AUDITS.md is not what `ratelab audit --render` writes from docs/results/audits"
    );
    // Every card's findings are reproducible by the command it prints.
    for c in &cards {
        assert_eq!(c.command, format!("ratelab audit {}", c.target));
    }
}

const DAEMON_RECIPE: &str = r#"
description = "A server that leaves a daemon behind."
upstream = "ratelab's tests"
store = "none"
failure_mode = "fail-closed"

[install]
programs = ["python3"]

[instance]
command = ["sh", "-c", "(setsid sleep 300 &) ; exec python3 -m http.server --bind 127.0.0.1 {port}"]
count = 1

[probe]
url = "http://127.0.0.1:{port}/"
policy = "first-hit:5,500ms"

[[variant]]
name = "daemon"
description = "One instance."
"#;

/// A directory of recipes holding [`DAEMON_RECIPE`] as `daemon`.
fn daemon_recipes(name: &str) -> ratelab_testkit::temp::TempDir {
    let dir = ratelab_testkit::temp::TempDir::new(name);
    let recipe = dir.join("daemon");
    std::fs::create_dir_all(&recipe).unwrap();
    std::fs::write(recipe.join("recipe.toml"), DAEMON_RECIPE).unwrap();
    dir
}

/// Whether process `pid` runs (exists, and is no zombie).
fn runs(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z'))
    })
}

/// An instance whose server forks a daemon away from it (a child that forks again and
/// exits, leaving the grandchild to init, out of the instance's process group and tree):
/// stopping the target stops the daemon too.
#[test]
fn stopping_a_target_stops_the_daemons_its_instances_forked_away() {
    let dir = daemon_recipes("ratelab-daemon");
    let t = &audit::select(dir.path(), &["daemon".to_owned()]).expect("the recipe loads")[0];
    let running = audit::instances::start(
        &t.loaded,
        audit::recipe::StoreKind::None,
        &Default::default(),
        1,
        &[],
    )
    .expect("the instance starts");
    // The daemon is the run's, though neither the instance's child nor in its group.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let daemon = loop {
        let found: Vec<u32> = running
            .processes()
            .into_iter()
            .map(|(pid, _)| pid)
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| c.starts_with("sleep\x00300"))
            })
            .collect();
        if let [pid] = found[..] {
            break pid;
        }
        assert!(std::time::Instant::now() < deadline, "no daemon: {found:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    drop(running);
    let alive = || runs(daemon);
    // SIGKILL takes a moment to land.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while alive() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!alive(), "the daemon {daemon} outlived its target");
}

/// An audit interrupted (SIGTERM) stops every process it started before it exits, a daemon
/// an instance forked away included, though no target's own stop runs.
#[test]
fn an_interrupted_audit_stops_every_process_it_started() {
    let dir = daemon_recipes("ratelab-interrupt");
    let mut audit = std::process::Command::new(env!("CARGO_BIN_EXE_ratelab-probe"))
        .args(["audit", "daemon", "--no-install", "--recipes"])
        .arg(dir.path())
        .arg("--docs")
        .arg(dir.join("docs"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let owner = format!("RATELAB_AUDIT_OWNER={}\0", audit.id());
    let owned = || -> Vec<u32> {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/environ"))
                    .is_ok_and(|env| env.windows(owner.len()).any(|w| w == owner.as_bytes()))
                    && runs(*pid)
            })
            .collect()
    };
    // The instance and its daemon, running.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while owned().len() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the audit started nothing"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::process::Command::new("kill")
        .args(["-TERM", &audit.id().to_string()])
        .status()
        .unwrap();
    assert_eq!(audit.wait().unwrap().code(), Some(130));
    // SIGKILL takes a moment to land.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while !owned().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(owned(), Vec::<u32>::new(), "processes outlived the audit");
}
