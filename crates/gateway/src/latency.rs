//! The store-latency histogram, `ratelab_store_latency_seconds{limit}`: fixed buckets for
//! sub-millisecond store calls, counted in atomics and rendered in the Prometheus text format
//! beside the recorder's own series ([`render`]).
//!
//! A store call is timed on every request, so recording must cost next to nothing: one bucket
//! found among [`BOUNDS`] and two relaxed atomic additions, with no allocation (the metrics
//! recorder's histograms keep every sample until they are drained). Histograms are kept per
//! limit name for the life of the process, as a recorder keeps a series: a limit reloaded
//! with new parameters goes on counting in its name's histogram, and every series exists,
//! at zero, from the moment its limit is made.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The metric's name.
pub const NAME: &str = "ratelab_store_latency_seconds";

/// The buckets' upper bounds, in seconds: 25 µs to 1 s (longer calls, past any sensible
/// timeout, fall in `+Inf`).
pub const BOUNDS: [f64; 14] = [
    0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25, 1.0,
];

/// The same bounds in nanoseconds, compared without floating point.
const BOUNDS_NS: [u64; 14] = [
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    1_000_000_000,
];

/// One limit's histogram.
#[derive(Debug, Default)]
pub struct Histogram {
    /// Calls per bucket (not cumulative); the last is `+Inf`'s own.
    counts: [AtomicU64; BOUNDS.len() + 1],
    /// The calls' total time, nanoseconds.
    sum_ns: AtomicU64,
}

impl Histogram {
    /// Records one call of `nanos` nanoseconds.
    pub fn record(&self, nanos: u64) {
        let bucket = BOUNDS_NS
            .iter()
            .position(|&b| nanos <= b)
            .unwrap_or(BOUNDS.len());
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(nanos, Ordering::Relaxed);
    }

    /// The cumulative counts (`le` each bound, then `+Inf`) and the sum, seconds.
    pub fn snapshot(&self) -> ([u64; BOUNDS.len() + 1], f64) {
        let mut cumulative = [0; BOUNDS.len() + 1];
        let mut total = 0u64;
        for (c, n) in cumulative.iter_mut().zip(&self.counts) {
            total = total.saturating_add(n.load(Ordering::Relaxed));
            *c = total;
        }
        (cumulative, self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9)
    }
}

/// Every limit name's histogram, in name order.
fn registry() -> &'static Mutex<BTreeMap<Arc<str>, Arc<Histogram>>> {
    static REGISTRY: OnceLock<Mutex<BTreeMap<Arc<str>, Arc<Histogram>>>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

/// The histogram of the limit called `name`, made at zero on first use.
pub fn for_limit(name: &Arc<str>) -> Arc<Histogram> {
    let mut all = registry().lock().unwrap_or_else(|e| e.into_inner());
    all.entry(name.clone()).or_default().clone()
}

/// The histograms in the Prometheus text format (with their `HELP` and `TYPE` lines; empty
/// while no limit exists).
pub fn render() -> String {
    let all = registry().lock().unwrap_or_else(|e| e.into_inner());
    let mut out = String::new();
    if all.is_empty() {
        return out;
    }
    let _ = writeln!(out, "# HELP {NAME} Time of each store call, by limit.");
    let _ = writeln!(out, "# TYPE {NAME} histogram");
    for (name, h) in all.iter() {
        let limit = escape(name);
        let (cumulative, sum) = h.snapshot();
        for (bound, n) in BOUNDS.iter().zip(&cumulative) {
            let _ = writeln!(out, "{NAME}_bucket{{limit=\"{limit}\",le=\"{bound}\"}} {n}");
        }
        let count = cumulative[BOUNDS.len()];
        let _ = writeln!(
            out,
            "{NAME}_bucket{{limit=\"{limit}\",le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(out, "{NAME}_sum{{limit=\"{limit}\"}} {sum}");
        let _ = writeln!(out, "{NAME}_count{{limit=\"{limit}\"}} {count}");
    }
    out.push('\n');
    out
}

/// A label value escaped as the text format requires (backslash, quote, newline).
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_call_lands_in_the_first_bucket_that_holds_it_and_counts_are_cumulative() {
        let h = Histogram::default();
        for nanos in [0, 25_000, 25_001, 999_999_999, 1_000_000_001] {
            h.record(nanos);
        }
        let (c, sum) = h.snapshot();
        assert_eq!(c[0], 2, "0 and exactly 25 µs are le 25 µs");
        assert_eq!(c[1], 3, "25.001 µs is le 50 µs");
        assert_eq!(c[BOUNDS.len() - 2], 3);
        assert_eq!(c[BOUNDS.len() - 1], 4, "just under 1 s is le 1 s");
        assert_eq!(c[BOUNDS.len()], 5, "past 1 s only in +Inf");
        assert!((sum - 2.000_050_001).abs() < 1e-9, "{sum}");
        for (b, ns) in BOUNDS.iter().zip(BOUNDS_NS) {
            assert_eq!((b * 1e9).round() as u64, ns);
        }
    }

    #[test]
    fn the_text_has_every_bucket_sum_and_count_per_limit_with_escaped_names() {
        let name: Arc<str> = Arc::from("latency-test \"q\"");
        let h = for_limit(&name);
        assert!(Arc::ptr_eq(&h, &for_limit(&name)), "one histogram per name");
        h.record(30_000);
        let text = render();
        let limit = r#"limit="latency-test \"q\"""#;
        assert!(text.contains(&format!("{NAME}_bucket{{{limit},le=\"0.000025\"}} 0\n")));
        assert!(text.contains(&format!("{NAME}_bucket{{{limit},le=\"0.00005\"}} 1\n")));
        assert!(text.contains(&format!("{NAME}_bucket{{{limit},le=\"+Inf\"}} 1\n")));
        assert!(text.contains(&format!("{NAME}_sum{{{limit}}} 0.00003\n")));
        assert!(text.contains(&format!("{NAME}_count{{{limit}}} 1\n")));
        assert_eq!(
            text.matches("# TYPE ratelab_store_latency_seconds histogram")
                .count(),
            1
        );
    }
}
