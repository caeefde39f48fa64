//! A soak of the server: a long, bounded run over many keys against a real `ratelab-server`,
//! sampled at a fixed interval for what grows when something leaks — the server's resident
//! memory and CPU per request, the latency tail, the denials.
//!
//! The run starts the server (the `ratelab-server` binary beside the running `ratelab`, or
//! `--server`) on loopback with a per-key limit and an edge limit too large to bind, and
//! sends `requests` requests from `concurrency` keep-alive connections. Keys are drawn so
//! that every one of `keys` keys is visited in turn (a stride through them, coprime to their
//! number), with one request in `hot_every` going to one of a few hot keys instead, which
//! run over their limit and are denied at a steady rate. Each interval reports requests,
//! admitted, denied, errors, latency p50 / p99 / max, and the server's RSS (`VmRSS` of
//! `/proc/PID/status`).
//!
//! The verdict compares the second half of the run with its first interval after warm-up
//! (once every key has been visited): RSS growth and p99 ratio, stated, never judged
//! against a threshold fitted to one machine.

use ratelab_check::percentile;
use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What to run.
#[derive(Clone, Debug)]
pub struct SoakConfig {
    /// The server binary and the arguments that come first (`ratelab serve` is
    /// `["…/ratelab", "serve"]`).
    pub server: Vec<String>,
    /// Further server arguments.
    pub server_args: Vec<String>,
    /// Requests to send in all.
    pub requests: u64,
    /// Distinct keys.
    pub keys: u64,
    /// Connections sending at once.
    pub concurrency: usize,
    /// One request in this many goes to a hot key (0: none).
    pub hot_every: u64,
    /// How often a sample is taken.
    pub interval: Duration,
    /// The per-key limit: capacity and refill per second.
    pub capacity: u64,
    /// Refill per second.
    pub refill_per_sec: u64,
}

/// One interval's sample.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Sample {
    /// Seconds since the start, at the end of the interval.
    pub at_s: f64,
    /// Requests answered in the interval.
    pub requests: u64,
    /// Of which admitted (200).
    pub admitted: u64,
    /// Of which denied (429).
    pub denied: u64,
    /// Of which anything else, or no answer.
    pub errors: u64,
    /// Latency percentiles and maximum, µs.
    pub p50_us: u64,
    /// p99, µs.
    pub p99_us: u64,
    /// Maximum, µs.
    pub max_us: u64,
    /// The server's resident memory at the end of the interval, KiB.
    pub rss_kib: u64,
    /// The server's CPU time (user and system) in the interval over its requests, µs.
    pub server_cpu_us_per_req: f64,
    /// Distinct keys visited so far.
    pub keys_seen: u64,
}

/// The whole run.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SoakReport {
    /// Requests sent.
    pub requests: u64,
    /// Distinct keys.
    pub keys: u64,
    /// Connections.
    pub concurrency: usize,
    /// Seconds it took.
    pub seconds: f64,
    /// The samples.
    pub samples: Vec<Sample>,
    /// The index of the first sample after warm-up (every key visited), if any.
    pub warm: Option<usize>,
}

impl SoakReport {
    /// RSS at the end over RSS at the first sample after warm-up.
    pub fn rss_growth(&self) -> Option<f64> {
        let first = self.samples.get(self.warm?)?.rss_kib;
        let last = self.samples.last()?.rss_kib;
        (first > 0).then(|| last as f64 / first as f64)
    }

    /// The median (nearest rank) p99 of the second half of the samples after warm-up over the
    /// p99 of the first sample after warm-up.
    pub fn p99_ratio(&self) -> Option<f64> {
        let warm = self.warm?;
        let after = &self.samples[warm..];
        let mut late: Vec<u64> = after[after.len() / 2..].iter().map(|s| s.p99_us).collect();
        late.sort_unstable();
        let median = percentile::of(&late, 0.5)?;
        let first = after.first()?.p99_us.max(1);
        Some(median as f64 / first as f64)
    }

    /// A Markdown table of the samples and the run's verdict.
    pub fn markdown(&self) -> String {
        let mut out = String::from(
            "| t (s) | requests | admitted | denied | errors | p50 µs | p99 µs | max µs | server CPU µs/req | RSS MiB | keys seen |\n\
             |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for (i, s) in self.samples.iter().enumerate() {
            let mark = if Some(i) == self.warm { " (warm)" } else { "" };
            out.push_str(&format!(
                "| {:.1}{mark} | {} | {} | {} | {} | {} | {} | {} | {:.1} | {:.1} | {} |\n",
                s.at_s,
                s.requests,
                s.admitted,
                s.denied,
                s.errors,
                s.p50_us,
                s.p99_us,
                s.max_us,
                s.server_cpu_us_per_req,
                s.rss_kib as f64 / 1024.0,
                s.keys_seen,
            ));
        }
        let rate = self.requests as f64 / self.seconds.max(1e-9);
        out.push_str(&format!(
            "\n{} requests over {} keys from {} connections in {:.0} s ({:.0} req/s). ",
            self.requests, self.keys, self.concurrency, self.seconds, rate
        ));
        match (self.rss_growth(), self.p99_ratio()) {
            (Some(g), Some(p)) => out.push_str(&format!(
                "After warm-up: RSS at the end {:.3}× the first warm sample's; p99 of the second half {:.2}× the first warm sample's.\n",
                g, p
            )),
            _ => out.push_str(
                "Never warm (not every key was visited): inconclusive, run longer.\n",
            ),
        }
        out
    }
}

/// The running server, killed when dropped.
struct Running {
    child: Child,
    url: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

fn start_server(c: &SoakConfig) -> Result<Running, String> {
    let (bin, first) = c.server.split_first().ok_or("no server binary")?;
    let mut child = Command::new(bin)
        .args(first)
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .args(["--capacity", &c.capacity.to_string()])
        .args(["--refill-per-sec", &c.refill_per_sec.to_string()])
        .args(["--ip-capacity", "1000000000000"])
        .args(["--ip-refill-per-sec", "1000000000000"])
        .args(&c.server_args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {bin}: {e}"))?;
    let mut first_line = String::new();
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut out = BufReader::new(stdout);
    out.read_line(&mut first_line)
        .map_err(|e| format!("{bin}: {e}"))?;
    // The rest of the banner is drained, so a full pipe never blocks the server.
    std::thread::spawn(move || for _ in out.lines() {});
    let Some(url) = first_line
        .trim()
        .rsplit_once("listening on ")
        .map(|(_, u)| u.to_owned())
    else {
        let _ = child.kill();
        return Err(format!("{bin} did not start: {first_line:?}"));
    };
    Ok(Running { child, url })
}

/// The resident memory of process `pid`, KiB (0 when unreadable).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// The CPU time process `pid` has used so far, user and system, in clock ticks (0 when
/// unreadable).
fn cpu_ticks(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    // Fields after the command's closing parenthesis; utime and stime are the 14th and 15th
    // of the whole line, the 12th and 13th after it.
    stat.rsplit_once(')')
        .map(|(_, rest)| {
            let f: Vec<&str> = rest.split_whitespace().collect();
            let tick = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            tick(11) + tick(12)
        })
        .unwrap_or(0)
}

/// Clock ticks per second (`USER_HZ`), 100 on Linux.
const TICKS_PER_SEC: f64 = 100.0;

/// A stride through `keys` keys that visits each once per `keys` steps.
fn stride(keys: u64) -> u64 {
    let gcd = |mut a: u64, mut b: u64| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    // Near the golden ratio of the key space, then up to the first coprime.
    let mut s = ((keys as f64 * 0.618_033_988_75) as u64).max(1);
    while gcd(s, keys) != 1 {
        s += 1;
    }
    s
}

/// Latencies, µs, counted in buckets 1/64 of a power of two wide (exact below 128 µs), so
/// that recording one is a counter's increment and a percentile a walk over the buckets:
/// the load generator never pauses to sort.
struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max: u64,
}

/// The largest latency told apart, µs (about 12 days).
const HISTOGRAM_MAX_US: u64 = 1 << 40;

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; Histogram::bucket(HISTOGRAM_MAX_US) + 1],
            total: 0,
            max: 0,
        }
    }
}

impl Histogram {
    fn bucket(v: u64) -> usize {
        let v = v.min(HISTOGRAM_MAX_US);
        if v < 128 {
            return v as usize;
        }
        let e = 63 - v.leading_zeros() as usize;
        128 + (e - 7) * 64 + ((v >> (e - 6)) - 64) as usize
    }

    /// The largest latency bucket `i` holds.
    fn upper(i: usize) -> u64 {
        if i < 128 {
            return i as u64;
        }
        let (e, m) = (7 + (i - 128) / 64, 64 + ((i - 128) % 64) as u64);
        ((m + 1) << (e - 6)) - 1
    }

    fn record(&mut self, us: u64) {
        self.counts[Self::bucket(us)] += 1;
        self.total += 1;
        self.max = self.max.max(us);
    }

    /// The `q` quantile by nearest rank ([`percentile::rank`]), rounded up to its bucket's top
    /// (never above the maximum seen).
    fn quantile(&self, q: f64) -> u64 {
        let rank = percentile::rank(self.total, q).max(1);
        let mut seen = 0;
        for (i, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Self::upper(i).min(self.max);
            }
        }
        0
    }
}

/// What the senders record for the interval in progress.
#[derive(Default)]
struct Interval {
    latencies: Histogram,
    admitted: u64,
    denied: u64,
    errors: u64,
}

/// Runs the soak and returns its report; `progress` is given each sample as it is taken.
pub fn run(c: &SoakConfig, mut progress: impl FnMut(&Sample)) -> Result<SoakReport, String> {
    if c.keys == 0 || c.requests == 0 || c.concurrency == 0 {
        return Err("requests, keys and concurrency must be at least 1".into());
    }
    let server = start_server(c)?;
    let pid = server.child.id();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(c.concurrency)
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| e.to_string())?;
    let next = Arc::new(AtomicU64::new(0));
    let interval = Arc::new(Mutex::new(Interval::default()));
    let step = stride(c.keys);
    let start = Instant::now();
    let mut samples = Vec::new();
    let mut warm = None;
    let mut ticks = cpu_ticks(pid);
    rt.block_on(async {
        let mut senders = Vec::new();
        for _ in 0..c.concurrency {
            let (client, next, interval) = (client.clone(), next.clone(), interval.clone());
            let (url, requests, keys, hot_every) =
                (server.url.clone(), c.requests, c.keys, c.hot_every);
            senders.push(tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= requests {
                        return;
                    }
                    let key = if hot_every > 0 && i % hot_every == 0 {
                        format!("hot-{}", (i / hot_every) % 8)
                    } else {
                        // The how-manyth regular request this is: the keys are visited in
                        // turn whatever the hot ones take.
                        let j = i.checked_div(hot_every).map_or(i, |h| i - (h + 1));
                        format!("k{}", j.wrapping_mul(step) % keys)
                    };
                    let sent = Instant::now();
                    let status = client
                        .get(&url)
                        .header("x-api-key", key)
                        .send()
                        .await
                        .map(|r| r.status().as_u16());
                    let us = sent.elapsed().as_micros() as u64;
                    let mut iv = interval.lock().unwrap_or_else(|e| e.into_inner());
                    iv.latencies.record(us);
                    match status {
                        Ok(200) => iv.admitted += 1,
                        Ok(429) => iv.denied += 1,
                        _ => iv.errors += 1,
                    }
                }
            }));
        }
        let mut tick =
            tokio::time::interval_at(tokio::time::Instant::now() + c.interval, c.interval);
        loop {
            let done = senders.iter().all(|s| s.is_finished());
            if !done {
                tick.tick().await;
            }
            let iv = std::mem::take(&mut *interval.lock().unwrap_or_else(|e| e.into_inner()));
            let lat = &iv.latencies;
            let now_ticks = cpu_ticks(pid);
            let cpu_s = now_ticks.saturating_sub(ticks) as f64 / TICKS_PER_SEC;
            ticks = now_ticks;
            let sent = next.load(Ordering::Relaxed).min(c.requests);
            let regular = sent
                - if c.hot_every > 0 {
                    sent.div_ceil(c.hot_every)
                } else {
                    0
                };
            let sample = Sample {
                at_s: start.elapsed().as_secs_f64(),
                requests: lat.total,
                admitted: iv.admitted,
                denied: iv.denied,
                errors: iv.errors,
                p50_us: lat.quantile(0.50),
                p99_us: lat.quantile(0.99),
                max_us: lat.max,
                rss_kib: rss_kib(pid),
                server_cpu_us_per_req: cpu_s * 1e6 / (lat.total.max(1) as f64),
                keys_seen: regular.min(c.keys),
            };
            if warm.is_none() && sample.keys_seen >= c.keys && !done {
                // The first full interval after every key was visited.
                warm = Some(samples.len() + 1);
            }
            if done && sample.requests == 0 {
                break;
            }
            progress(&sample);
            samples.push(sample);
            if done {
                break;
            }
        }
    });
    let warm = warm.filter(|&w| w < samples.len());
    Ok(SoakReport {
        requests: c.requests,
        keys: c.keys,
        concurrency: c.concurrency,
        seconds: start.elapsed().as_secs_f64(),
        samples,
        warm,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_histogram_is_exact_below_128_us_and_within_a_sixty_fourth_above() {
        for v in [
            0u64,
            1,
            127,
            128,
            129,
            255,
            256,
            1000,
            65_535,
            1 << 30,
            u64::MAX,
        ] {
            let i = Histogram::bucket(v);
            let top = Histogram::upper(i);
            let v = v.min(HISTOGRAM_MAX_US);
            assert!(top >= v, "{v}: bucket {i} tops at {top}");
            assert!(top - v <= v / 64, "{v}: bucket {i} tops at {top}");
            if i > 0 {
                assert!(Histogram::upper(i - 1) < v, "{v}");
            }
        }
        let mut h = Histogram::default();
        (1..=1000).for_each(|v| h.record(v));
        let median = h.quantile(0.5);
        assert!((500..=500 + 500 / 64).contains(&median), "{median}");
        let p99 = h.quantile(0.99);
        assert!((990..=990 + 990 / 64).contains(&p99), "{p99}");
        assert_eq!(h.quantile(1.0), 1000);
    }

    #[test]
    fn the_stride_visits_every_key_once_per_round() {
        for keys in [1u64, 2, 10, 97, 1000, 1 << 20] {
            let s = stride(keys);
            let mut seen = std::collections::BTreeSet::new();
            for i in 0..keys.min(5000) {
                seen.insert(i.wrapping_mul(s) % keys);
            }
            assert_eq!(seen.len() as u64, keys.min(5000), "{keys}");
        }
    }
}
