//! Exploring audits against a deliberately racy target (a few lines of Python that read a
//! window's count, pause, and write it back): the campaign finds the lost update with no
//! scenario written for it, repeats and shrinks the schedule, and the standalone reproducer
//! it writes shows the violation against a fresh instance, outside ratelab.

use ratelab_probe::audit::{self, explore};
use std::process::{Command, Stdio};
use std::time::Duration;

const RECIPE: &str = r#"
description = "A window opened by each key's first request that reads its count, pauses, and writes it back: concurrent requests read the same count."
upstream = "ratelab's tests"
store = "none"
failure_mode = "fail-closed"

[install]
programs = ["python3"]

[instance]
command = ["python3", "server.py"]
count = 1
env = { PORT = "{port}" }

[probe]
url = "http://127.0.0.1:{port}/"
key_header = "x-key"
policy = "first-hit:5,500ms"
clock_resolution = "1ms"

[[variant]]
name = "racy"
description = "One instance."
"#;

const SERVER: &str = r#"
import os, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

windows = {}

class Limit(BaseHTTPRequestHandler):
    def do_GET(self):
        key, now = self.headers.get("x-key"), time.monotonic()
        opened, seen = windows.get(key, (now, 0))
        if now - opened >= 0.5:
            opened, seen = now, 0
        time.sleep(0.06)
        if seen < 5:
            windows[key] = (opened, seen + 1)
            self.send_response(200)
        else:
            self.send_response(429)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass

ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Limit).serve_forever()
"#;

#[test]
fn an_exploring_audit_finds_a_racy_window_and_its_reproducer_shows_it_outside_ratelab() {
    let dir = ratelab_testkit::temp::TempDir::new("ratelab-explore");
    let recipe = dir.join("racy");
    std::fs::create_dir_all(&recipe).unwrap();
    std::fs::write(recipe.join("recipe.toml"), RECIPE).unwrap();
    std::fs::write(recipe.join("server.py"), SERVER).unwrap();
    let targets = audit::select(dir.path(), &["racy".to_owned()]).expect("the recipe loads");
    let mut settings = explore::Settings {
        seeds: 1,
        repeats: 2,
        time: Duration::from_secs(3),
        length: Duration::from_millis(1_200),
        most_requests: 200,
        shrink: Duration::ZERO,
        install: false,
        ..explore::Settings::full()
    };
    // The first seed whose schedule opens a key with six requests within 30 ms (a burst on
    // a key nobody used, whose window the check sees open), where any read-then-write
    // limiter races. The schedule is the seed's alone, so this is the same seed every run.
    let claim = ratelab_probe::probe::policy::parse("first-hit:5,500ms").unwrap();
    let shape = explore::shape(
        &claim,
        audit::recipe::StoreKind::None,
        1,
        ratelab_core::Nanos::from_secs(1),
        &settings,
    );
    settings.first = (1..1_000)
        .find(|&seed| {
            let s = explore::schedule::draw(seed, &shape);
            s.keys().into_iter().any(|k| {
                let at: Vec<u64> = s
                    .requests
                    .iter()
                    .filter(|r| r.key == k)
                    .map(|r| r.at_us)
                    .collect();
                at.len() >= 6 && at[5] - at[0] <= 30_000
            })
        })
        .expect("a seed that crowds a key");
    let out = dir.join("out");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    // A campaign whose one seed was judged inconclusive (a machine too loaded for the
    // checks to decide) is run again, twice at most; one that passed is not.
    let mut attempts = 0;
    let e = loop {
        attempts += 1;
        let e = rt
            .block_on(explore::explore(&targets[0], &settings, &out, |l| {
                eprintln!("{l}")
            }))
            .expect("the campaign runs");
        eprint!("{}", explore::text(&e));
        if !e.findings.is_empty() || e.unknown == 0 || attempts == 3 {
            break e;
        }
    };
    assert_eq!(e.could_not_run, None);
    let lost = e
        .findings
        .iter()
        .find(|f| f.check == "linearizable" || f.check == "envelope")
        .unwrap_or_else(|| panic!("the lost update is found: {e:#?}"));
    assert!(lost.k >= 1 && lost.k <= lost.n && lost.n == 2, "{lost:?}");
    assert!(lost.shrunk_to.0 <= lost.shrunk_from.0, "{lost:?}");
    assert!(
        lost.replay
            .starts_with("ratelab audit --explore racy/racy --replay ")
    );
    let script = lost.script.as_ref().expect("a reproducer");
    // Outside ratelab: a fresh instance, the script, nothing else. A race shown by timing
    // alone is a chance, not a certainty, on a loaded machine: one run in three must show it.
    let mut said = vec![run_outside(&recipe, script)];
    while said.len() < 3 && said.iter().all(|(code, _)| *code != Some(1)) {
        said.push(run_outside(&recipe, script));
    }
    assert!(said.iter().any(|(code, _)| *code == Some(1)), "{said:#?}");
    // The campaign's record reads back as AUDITS.md renders it.
    explore::save(&out, &e).unwrap();
    let saved = explore::saved(&out).unwrap();
    assert_eq!(saved.len(), 1);
    assert!(explore::section(&saved).contains("| `racy/racy` |"));
    // `--confirm`: the target started afresh, the reproducer written again and run as a
    // user would, its verdict recorded beside the finding (one confirmation in three must
    // show it, as above).
    settings.repeats = 1;
    let confirm = || {
        let confirmed = rt
            .block_on(explore::confirm::confirm(
                &targets[0],
                &settings,
                &out,
                |l| eprintln!("{l}"),
            ))
            .expect("the reproducers run");
        let outside = confirmed
            .findings
            .iter()
            .find(|f| f.check == lost.check)
            .and_then(|f| f.outside.clone())
            .expect("the finding's reproducer ran");
        (confirmed, outside)
    };
    let mut tries = vec![confirm()];
    while tries.len() < 3 && tries.iter().all(|t| t.1.k == 0) {
        tries.push(confirm());
    }
    let (confirmed, outside) = tries.last().expect("one confirmation").clone();
    assert_eq!(
        (outside.k, outside.n, outside.errors),
        (1, 1, 0),
        "{:#?}",
        tries.iter().map(|t| &t.1).collect::<Vec<_>>()
    );
    assert!(
        outside.said.iter().any(|l| l == "reproduced"),
        "{outside:?}"
    );
    assert!(
        explore::section(&[confirmed]).contains("outside ratelab 1 of 1"),
        "the section names the reproducer's runs"
    );
}

/// Runs `script` against a fresh instance of the recipe's server: its exit code and what it
/// printed. A run that shows the violation exits 1 and says `reproduced` and `admitted`.
fn run_outside(recipe: &std::path::Path, script: &std::path::Path) -> (Option<i32>, String) {
    let port = ratelab_procs::free_port();
    let mut server = Command::new("python3")
        .arg(recipe.join("server.py"))
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let run = Command::new("python3")
        .arg(script)
        .arg(format!("http://127.0.0.1:{port}/"))
        .output()
        .unwrap();
    server.kill().ok();
    server.wait().ok();
    let said = String::from_utf8_lossy(&run.stdout).into_owned();
    let code = run.status.code();
    if code == Some(1) {
        assert!(
            said.contains("reproduced") && said.contains("admitted"),
            "{said}"
        );
    }
    (code, said + &String::from_utf8_lossy(&run.stderr))
}
