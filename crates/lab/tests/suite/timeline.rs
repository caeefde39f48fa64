//! The timeline: one key's requests drawn from a real run, and, when a browser is at hand,
//! rendered by headless Chromium.

use ratelab_sim::{RunOptions, Scenario};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn page(file: &str) -> (String, usize, bool) {
    let sc = Scenario::load(&root().join(file)).expect("scenario");
    let seed = sc.spec().seeds.get()[0];
    let options = RunOptions {
        keep_events: true,
        ..RunOptions::default()
    };
    let (report, history) = ratelab_sim::run(&sc, seed, options);
    let key = ratelab_lab::timeline::default_key(&report, &history).expect("a key");
    let on_key = history.requests.iter().filter(|r| r.key == key).count();
    let html = ratelab_lab::timeline::html(&sc, &report, &history, &key, None);
    (html, on_key, report.excess_witness.is_some())
}

#[test]
fn the_page_draws_every_request_of_its_key_and_the_violation() {
    let (html, on_key, witness) = page("sim-scenarios/naive-canary.json");
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert_eq!(html.matches(r#"class="request""#).count(), on_key);
    assert!(witness, "the naive canary exceeds the envelope");
    assert_eq!(html.matches(r#"class="violation""#).count(), 1);
    assert_eq!(html.matches("<svg").count(), html.matches("</svg>").count());
    assert!(html.contains(r#"class="envelope""#) && html.contains(r#"class="admitted""#));
    let (faulty, _, _) = page("sim-scenarios/partition-one-gateway.json");
    assert!(
        faulty.contains(r#"class="fault""#),
        "fault windows are shaded"
    );
}

fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

#[test]
#[cfg_attr(
    ratelab_missing_chromium,
    ignore = "no headless Chromium is installed (Debian: apt-get install chromium)"
)]
fn a_headless_browser_renders_the_page() {
    let Some(browser) = chromium() else {
        assert!(
            std::env::var("RATELAB_REQUIRE_CHROMIUM").as_deref() != Ok("1"),
            "RATELAB_REQUIRE_CHROMIUM is set and no chromium is installed"
        );
        eprintln!("SKIPPED: no chromium on PATH (Debian: apt-get install chromium)");
        return;
    };
    let dir = std::env::temp_dir().join(format!("ratelab-timeline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (html, on_key, _) = page("sim-scenarios/naive-canary.json");
    let file = dir.join("t.html");
    std::fs::write(&file, html).expect("write");
    let url = format!("file://{}", file.display());
    let common = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
    ];
    let dom = Command::new(browser)
        .args(common)
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .expect("chromium runs");
    let dom = String::from_utf8_lossy(&dom.stdout);
    // The browser parsed the SVG into elements: every request's bar is in its DOM.
    assert_eq!(
        dom.matches(r#"class="request""#).count(),
        on_key,
        "{dom:.400}"
    );
    let png = dir.join("t.png");
    let shot = Command::new(browser)
        .args(common)
        .arg(format!("--screenshot={}", png.display()))
        .arg("--window-size=1240,600")
        .arg(&url)
        .output()
        .expect("chromium runs");
    let bytes = std::fs::read(&png).unwrap_or_else(|e| {
        panic!(
            "no screenshot ({e}): {}",
            String::from_utf8_lossy(&shot.stderr)
        )
    });
    assert!(bytes.starts_with(b"\x89PNG"), "a PNG");
    assert!(
        bytes.len() > 10_000,
        "{} bytes: an empty page?",
        bytes.len()
    );
    let _ = std::fs::remove_dir_all(Path::new(&dir));
}
