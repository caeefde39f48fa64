//! The request log and its time-range scan, on the fixed-window boundary-spike scenario.
//!
//! The simulator runs the shipped scenario with every gateway's request log kept; the logs go
//! to files; `reqlog::scan` (what `ratelab log scan` runs) must recover, from the ids' time
//! order alone, exactly the requests the window-spike checker saw admitted during the spike —
//! compared by request, not by count — while parsing only the lines in the range.

use ratelab_testkit::docs;

use ratelab_check::envelope::admissions;
use ratelab_check::history::Answer;
use ratelab_check::window::window_spike;
use ratelab_core::Nanos;
use ratelab_gateway::reqlog::{ScanQuery, ScanResult, scan};
use ratelab_sim::faults;
use ratelab_sim::scenario::{Bounded, FaultSpec, Signed};
use ratelab_sim::{History, RunOptions, SIM_EPOCH_MS, Scenario};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const SCENARIO: &str = "sim-scenarios/fixed-window-boundary-burst.json";
/// How far around the spike the scan reaches: less than the quiet time between bursts.
const SLACK_MS: u64 = 20;

fn scenario() -> Scenario {
    Scenario::load(&scenario_file()).expect("the scenario")
}

fn scenario_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(SCENARIO)
}

/// The scenario on `n` gateways, validated again like a file.
fn on_gateways(n: u64, edit: impl FnOnce(&mut ratelab_sim::ScenarioSpec)) -> Scenario {
    let mut spec = scenario().spec().clone();
    spec.gateways = Bounded::new(n).expect("a valid gateway count");
    edit(&mut spec);
    Scenario::from_spec(&scenario_file(), spec).expect("still a valid scenario")
}

/// Runs seed 1 and writes each gateway's log to its own file.
fn logs(sc: &Scenario, test: &str) -> (History, Vec<PathBuf>) {
    let options = RunOptions {
        request_logs: true,
        ..RunOptions::default()
    };
    let (report, history) = ratelab_sim::run(sc, 1, options);
    assert!(report.passed, "{:?}", report.failures);
    let dir = std::env::temp_dir().join(format!("ratelab-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let files = history
        .request_logs
        .iter()
        .map(|(gateway, text)| {
            let f = dir.join(format!("{gateway}.jsonl"));
            std::fs::write(&f, text).unwrap();
            f
        })
        .collect();
    (history, files)
}

/// The spike the checker found: its key, its start (store time) and the ids admitted in it.
fn spike(sc: &Scenario, h: &History) -> (String, Nanos, BTreeSet<u64>) {
    let window = Nanos::from_millis(sc.spec().policy.window_ms.unwrap());
    let by_key = admissions(&h.requests);
    let s = window_spike(&by_key, window);
    let end = s.from.saturating_add(window);
    let ids: BTreeSet<u64> = by_key[s.key.as_str()]
        .iter()
        .filter(|a| a.at >= s.from && a.at < end)
        .map(|a| a.id)
        .collect();
    assert_eq!(ids.len() as u64, s.max_in_window);
    (s.key, s.from, ids)
}

/// The scan's query around `[from, from + window)` of simulated time, shifted by `shift_ms`.
fn around(sc: &Scenario, from: Nanos, shift_ms: u64, key: &str) -> ScanQuery {
    let from_ms = from.as_u64() / 1_000_000 + shift_ms;
    ScanQuery {
        from_ms: SIM_EPOCH_MS + from_ms - SLACK_MS,
        to_ms: SIM_EPOCH_MS + from_ms + sc.spec().policy.window_ms.unwrap() + SLACK_MS,
        key: Some(key.into()),
        decision: Some("allowed".into()),
    }
}

fn traces(r: &ScanResult) -> BTreeSet<u64> {
    r.lines
        .iter()
        .map(|l| l.fields["trace"].as_u64().expect("a trace id"))
        .collect()
}

fn lines(files: &[PathBuf]) -> u64 {
    files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap().lines().count() as u64)
        .sum()
}

#[test]
fn log_scan_recovers_exactly_the_requests_admitted_in_the_boundary_spike() {
    let sc = scenario();
    let (h, files) = logs(&sc, "spike");
    let (key, from, admitted) = spike(&sc, &h);
    assert!(
        admitted.len() >= 180,
        "the spike: {} admitted",
        admitted.len()
    );
    let r = scan(&files, &around(&sc, from, 0, &key)).unwrap();
    assert_eq!(
        traces(&r),
        admitted,
        "the scan's admissions are the checker's"
    );
    assert!(r.lines.windows(2).all(|w| w[0].id < w[1].id), "id order");
    // Every request has exactly one line.
    assert_eq!(lines(&files), h.requests.len() as u64);
    // Each id carries its decision's time: minted when the store's verdict came back, one
    // network hop after the store decided (no clock skew here).
    for l in &r.lines {
        let q = &h.requests[l.fields["trace"].as_u64().unwrap() as usize];
        let Some((_, Answer::Allowed { decided_at, .. })) = q.answer else {
            panic!("#{} was not admitted: {:?}", q.id, q.answer);
        };
        let decided_ms = SIM_EPOCH_MS + decided_at.as_u64() / 1_000_000;
        let id_ms = ratelab_gateway::reqlog::id_millis(&l.id).unwrap();
        assert!(
            (decided_ms..=decided_ms + 5).contains(&id_ms),
            "#{}: id at {id_ms} ms, decided at {decided_ms} ms",
            q.id
        );
    }
    // The denials in the same range are the rest of the requests the clients sent then.
    let denied = scan(
        &files,
        &ScanQuery {
            decision: Some("denied".into()),
            ..around(&sc, from, 0, &key)
        },
    )
    .unwrap();
    for l in &denied.lines {
        let q = &h.requests[l.fields["trace"].as_u64().unwrap() as usize];
        assert!(
            matches!(q.answer, Some((_, Answer::Denied { .. }))),
            "{q:?}"
        );
    }
    // Only the range was parsed: the binary search read a few ids, the rest were skipped.
    let f = &r.files[0];
    let in_range = (r.lines.len() + denied.lines.len()) as u64;
    assert_eq!(
        f.in_range, in_range,
        "every line in the range, and no other, was parsed"
    );
    assert!(in_range < lines(&files), "{f:?}");
    let q = around(&sc, from, 0, &key);
    docs::check_block(
        "docs/GATEWAY.md",
        "log-scan",
        &format!(
            "On the fixed-window boundary-burst scenario (`ratelab run\n\
             sim-scenarios/fixed-window-boundary-burst.json --seed 1 --request-logs /tmp/rl`, then\n\
             `ratelab log scan /tmp/rl/seed-1/gateway-0.jsonl --from {} --to {} --key {key}\n\
             --decision allowed`) the scan reads {} ids, parses the {} lines in the range out of {},\n\
             and prints the {} admitted requests of the boundary spike.\n",
            q.from_ms,
            q.to_ms,
            f.probes,
            f.in_range,
            lines(&files),
            r.lines.len()
        ),
    );
    assert!(
        f.probes <= 2 * (64 - f.bytes.leading_zeros()) as u64,
        "{f:?}"
    );
}

#[test]
fn merged_logs_of_three_gateways_give_the_same_answer() {
    let sc = on_gateways(3, |_| {});
    let (h, files) = logs(&sc, "merged");
    assert_eq!(files.len(), 3);
    let (key, from, admitted) = spike(&sc, &h);
    let r = scan(&files, &around(&sc, from, 0, &key)).unwrap();
    assert_eq!(traces(&r), admitted);
    assert!(
        r.lines.windows(2).all(|w| w[0].id < w[1].id),
        "merged in id order"
    );
    let gateways: BTreeSet<&str> = r
        .lines
        .iter()
        .map(|l| l.fields["gateway"].as_str().unwrap())
        .collect();
    assert_eq!(gateways.len(), 3, "every gateway took part in the spike");
}

/// A gateway whose clock runs 2 s ahead stamps its ids 2 s late: a window on the merged logs
/// selects what each gateway's *clock* placed in it. The same window finds the other gateways'
/// share of the spike; the skewed gateway's share is found 2 s later, and not where it was
/// in true time.
#[test]
fn a_skewed_gateways_requests_are_found_where_its_clock_put_them() {
    let sc = on_gateways(3, |spec| {
        spec.faults.push(FaultSpec::Clock(faults::Clock {
            gateway: 2,
            offset_ms: Some(Signed::new(2_000).unwrap()),
            drift_ppm: None,
        }))
    });
    let (h, files) = logs(&sc, "skewed");
    let (key, from, admitted) = spike(&sc, &h);
    let on = |g: u32| -> BTreeSet<u64> {
        admitted
            .iter()
            .copied()
            .filter(|&id| h.requests[id as usize].gateway == g)
            .collect()
    };
    let (straight, skewed) = (&files[..2], &files[2..]);
    assert!(files[2].ends_with("gateway-2.jsonl"));
    let r = scan(straight, &around(&sc, from, 0, &key)).unwrap();
    assert_eq!(traces(&r), &on(0) | &on(1));
    let late = scan(skewed, &around(&sc, from, 2_000, &key)).unwrap();
    assert_eq!(traces(&late), on(2));
    assert!(!on(2).is_empty());
    // The unshifted window, which holds the spike in true time, holds none of gateway 2's
    // share by id.
    let missed = scan(skewed, &around(&sc, from, 0, &key)).unwrap();
    assert!(missed.lines.is_empty(), "{:?}", traces(&missed));
}

/// Every request has one line, and its `decision` is the answer the client got: checked on the
/// scenarios that produce every kind (fail-open, kill switch, guard rejections, denials).
#[test]
fn every_line_carries_the_decision_the_client_got() {
    for file in [
        "sim-scenarios/gateway/fail-open-store-errors.json",
        "sim-scenarios/gateway/breaker-opens-and-closes.json",
        "sim-scenarios/gateway/kill-switch.json",
        "sim-scenarios/gateway/bloom-guard-abusive-mix.json",
    ] {
        let sc = Scenario::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).unwrap();
        let name = sc.name().to_owned();
        let (h, files) = logs(&sc, &name);
        let mut seen = BTreeSet::new();
        let mut kinds = std::collections::BTreeMap::<String, u64>::new();
        let all = ScanQuery {
            from_ms: 0,
            to_ms: u64::MAX,
            ..ScanQuery::default()
        };
        for l in scan(&files, &all).unwrap().lines {
            let v = &l.fields;
            let trace = v["trace"].as_u64().unwrap();
            assert!(seen.insert(trace), "{name}: two lines for #{trace}");
            let q = &h.requests[trace as usize];
            let want = match q.answer {
                Some((_, Answer::Allowed { .. })) => "allowed",
                Some((_, Answer::Denied { .. } | Answer::Full | Answer::Cached { .. })) => "denied",
                Some((_, Answer::FailedOpen(r))) => {
                    assert_eq!(v["fail_open"], r.name(), "{name}: #{trace}");
                    "failed_open"
                }
                Some((_, Answer::Bypassed)) => "bypassed",
                Some((_, Answer::Rejected)) => "rejected",
                Some((_, Answer::Error(_))) => "unavailable",
                None => panic!("{name}: #{trace} was logged but never answered"),
            };
            assert_eq!(v["decision"], want, "{name}: #{trace}: {}", l.text);
            assert_eq!(v["key"], q.key.as_str(), "{name}: #{trace}");
            *kinds.entry(want.into()).or_default() += 1;
        }
        assert_eq!(seen.len(), h.requests.len(), "{name}: one line per request");
        println!("{name}: {kinds:?}");
    }
}
