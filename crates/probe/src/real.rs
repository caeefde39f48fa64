//! Real concurrency on a real `redis-server`: the overshoot ladder with tokio tasks over real
//! connections, and the atomic path's speed beside `redis-benchmark` running the same script.

use ratelab_check::envelope::{self, Admission, Envelope};
use ratelab_check::percentile;
use ratelab_core::{Algorithm, Nanos, TokenBucket};
use ratelab_store::redis_store::{RedisOptions, RedisStore, SCRIPT};
use ratelab_store::rng::StreamRng;
use ratelab_store::{
    Applied, Key, LimitError, Outcome, Path, Read, StoreClient, StoreError, TimeSource,
    decide_remote,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One point of the real-Redis ladder, one run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RealPoint {
    /// `naive` or `atomic`.
    pub path: String,
    /// Concurrent senders (Poisson arrival streams).
    pub concurrency: u32,
    /// Which repetition of the ladder, from 0.
    pub run: u32,
    /// Requests sent.
    pub offered: u64,
    /// Requests admitted.
    pub admitted: u64,
    /// Requests that failed.
    pub errors: u64,
    /// B + R·T over the key's run (Redis TIME).
    pub envelope: u64,
    /// Admitted beyond the envelope.
    pub excess: u64,
    /// Largest excess in any interval.
    pub max_excess: u64,
    /// Mean time per decision seen by the sender, µs.
    pub mean_latency_us: f64,
    /// Mean store round trip (one call: `GET`+`TIME`, `SET`, or the script), µs.
    pub rtt_us: f64,
    /// Mean real race window (naive path, admitted requests), µs.
    pub race_window_us: Option<f64>,
    /// Median lateness of a request's start behind its scheduled arrival, µs.
    pub late_p50_us: f64,
    /// 99th percentile of that lateness, µs.
    pub late_p99_us: f64,
    /// Kolmogorov–Smirnov distance between the realised gaps of all senders' starts and the
    /// exponential distribution of the merged Poisson stream.
    pub arrivals_ks: f64,
    /// The same distance for the times the store executed each request's read (Redis
    /// `TIME`, µs resolution).
    pub store_arrivals_ks: f64,
    /// Of the gaps between consecutive reads at the store, the percentage under
    /// [`CLOSE_US`].
    pub store_close_pct: f64,
    /// Seconds of load.
    pub seconds: u64,
    /// When the store executed each read, µs after the first (Redis `TIME`), in order.
    /// Written to the results file as the gaps between consecutive reads.
    #[serde(with = "gaps_on_disk")]
    pub store_reads_us: Vec<u64>,
}

/// Reads closer than this at the store, µs, count as arriving together.
pub const CLOSE_US: f64 = 10.0;

/// Sorted times as their first value and the gaps after it: a third of the text.
mod gaps_on_disk {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(times: &[u64], s: S) -> Result<S::Ok, S::Error> {
        let mut prev = 0;
        s.collect_seq(times.iter().map(|&t| {
            let gap = t.saturating_sub(prev);
            prev = t;
            gap
        }))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
        let gaps = Vec::<u64>::deserialize(d)?;
        let mut t = 0u64;
        Ok(gaps
            .into_iter()
            .map(|g| {
                t = t.saturating_add(g);
                t
            })
            .collect())
    }
}

/// The real ladder's settings (the same policy and per-sender rate as the simulated sweep).
#[derive(Clone, Debug)]
pub struct RealConfig {
    /// Concurrent senders.
    pub concurrency: Vec<u32>,
    /// Seconds per point.
    pub seconds: u64,
    /// Requests per second per sender.
    pub rate_per_client: u64,
    /// B.
    pub capacity: u64,
    /// R per second.
    pub refill_per_sec: u64,
    /// Repetitions of the whole ladder.
    pub runs: u32,
}

/// A store client that notes when each of its calls began and ended: one per decision, so a
/// naive decision's read and write can be paired.
#[derive(Clone, Debug)]
struct Timed<C> {
    inner: C,
    calls: Arc<Mutex<Vec<(Instant, Instant)>>>,
}

impl<C> Timed<C> {
    fn new(inner: C) -> Self {
        Timed {
            inner,
            calls: Arc::default(),
        }
    }

    fn note(&self, began: Instant) {
        let mut calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        calls.push((began, Instant::now()));
    }

    fn calls(&self) -> Vec<(Instant, Instant)> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl<C: StoreClient> StoreClient for Timed<C> {
    type Algorithm = C::Algorithm;

    fn algorithm(&self) -> &C::Algorithm {
        self.inner.algorithm()
    }

    async fn get(&self, key: &Key) -> Result<Read<<C::Algorithm as Algorithm>::State>, StoreError> {
        let began = Instant::now();
        let r = self.inner.get(key).await;
        self.note(began);
        r
    }

    async fn set(
        &self,
        key: &Key,
        state: <C::Algorithm as Algorithm>::State,
        ttl: Nanos,
    ) -> Result<(), StoreError> {
        let began = Instant::now();
        let r = self.inner.set(key, state, ttl).await;
        self.note(began);
        r
    }

    async fn apply(&self, key: &Key, now: Option<Nanos>, cost: u64) -> Result<Applied, LimitError> {
        let began = Instant::now();
        let r = self.inner.apply(key, now, cost).await;
        self.note(began);
        r
    }
}

/// One decision of a real point, as its sender saw it.
struct Sent {
    /// When it was due, and when its task began.
    due: Instant,
    began: Instant,
    took: Duration,
    result: Result<Outcome, LimitError>,
    calls: Vec<(Instant, Instant)>,
}

/// Asks the kernel for the least timer slack on the calling thread, so its sleeps end when
/// asked instead of up to 50 µs later. Best effort: without it the lateness is measured all
/// the same.
fn least_timer_slack() {
    if let Ok(link) = std::fs::read_link("/proc/thread-self")
        && let Some(tid) = link.file_name()
    {
        let path = std::path::Path::new("/proc")
            .join(tid)
            .join("timerslack_ns");
        std::fs::write(path, "1").ok();
    }
}

/// The merged arrival times of `c` Poisson senders at `rate` per second each, ns from the
/// start, each sender on its own seeded stream.
fn schedule(c: u32, rate: u64, seconds: u64, nonce: u64) -> Vec<u64> {
    let mean = 1e9 / rate as f64;
    let end = seconds * 1_000_000_000;
    let mut all = Vec::new();
    for i in 0..c {
        let mut rng = StreamRng::new(nonce, u64::from(i));
        let mut t = rng.exponential(mean);
        while t < end {
            all.push(t);
            t += rng.exponential(mean);
        }
    }
    all.sort_unstable();
    all
}

/// Sends every arrival of `times` at its time, from a pacing thread (tokio's timer works in
/// whole milliseconds and would release the arrivals of one millisecond together), each as
/// its own task on the runtime. Returns the decisions, and how many requests were lost to a
/// task or the pacing thread dying (counted as failed, never dropped from the count).
async fn send_all(store: &RedisStore, key: &Key, path: Path, times: Vec<u64>) -> (Vec<Sent>, u64) {
    let scheduled = times.len() as u64;
    let rt = tokio::runtime::Handle::current();
    let (store, key) = (store.clone(), key.clone());
    let pacer = std::thread::spawn(move || {
        least_timer_slack();
        let start = Instant::now() + Duration::from_millis(10);
        let mut tasks = Vec::with_capacity(times.len());
        for t in times {
            let due = start + Duration::from_nanos(t);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            let (store, key) = (store.clone(), key.clone());
            tasks.push(rt.spawn(async move {
                let began = Instant::now();
                let timed = Timed::new(store);
                let result =
                    decide_remote(&timed, path, TimeSource::Store, &key, Nanos::ZERO, 1).await;
                Sent {
                    due,
                    began,
                    took: began.elapsed(),
                    result,
                    calls: timed.calls(),
                }
            }));
        }
        tasks
    });
    let Some(tasks) = tokio::task::spawn_blocking(move || pacer.join())
        .await
        .ok()
        .and_then(|r| r.ok())
    else {
        return (Vec::new(), scheduled);
    };
    let mut sent = Vec::with_capacity(tasks.len());
    let mut lost = scheduled - tasks.len() as u64;
    for t in tasks {
        match t.await {
            Ok(s) => sent.push(s),
            Err(_) => lost += 1,
        }
    }
    (sent, lost)
}

fn mean(xs: impl Iterator<Item = f64>) -> Option<f64> {
    let (n, s) = xs.fold((0usize, 0.0), |(n, s), x| (n + 1, s + x));
    (n > 0).then(|| s / n as f64)
}

fn us(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e3
}

/// The middle of a call's round trip.
fn middle((a, b): (Instant, Instant)) -> Instant {
    a + (b - a) / 2
}

/// Runs one point: `c` Poisson senders sharing one key.
async fn point(store: &RedisStore, cfg: &RealConfig, path: Path, c: u32, run: u32) -> RealPoint {
    let nonce = 1000
        + u64::from(c)
        + if path == Path::Naive { 0 } else { 1 << 20 }
        + (u64::from(run) << 32);
    let key = Key::new(&format!("sweep:{}:{c}:{run}", path.name())).expect("valid key");
    let times = schedule(c, cfg.rate_per_client, cfg.seconds, nonce);
    let (sent, lost) = send_all(store, &key, path, times).await;
    let mut adm = Vec::new();
    let mut errors = lost;
    for (i, s) in sent.iter().enumerate() {
        match &s.result {
            Ok(o) if o.decision.allowed => adm.push(Admission {
                at: o.decided_at,
                id: i as u64,
                cost: 1,
            }),
            Ok(_) => {}
            Err(_) => errors += 1,
        }
    }
    adm.sort_unstable();
    let admitted = adm.len() as u64;
    let env = Envelope::of_bucket(store.algorithm());
    let by_key = BTreeMap::from([("k", adm)]);
    let e = envelope::envelope(&by_key, env);
    let envelope = envelope::allowance(&by_key, env);
    // The store-side race window of a naive admission: from its read to its write, each
    // placed in the middle of its call's round trip.
    let race = mean(
        sent.iter()
            .filter(|s| s.calls.len() == 2)
            .map(|s| us(middle(s.calls[1]) - middle(s.calls[0]))),
    );
    let mut late: Vec<f64> = sent
        .iter()
        .map(|s| us(s.began.saturating_duration_since(s.due)))
        .collect();
    late.sort_by(f64::total_cmp);
    let pct = |q: f64| percentile::of(&late, q).unwrap_or(0.0);
    let origin = sent.iter().map(|s| s.began).min();
    let starts: Vec<u64> = sent
        .iter()
        .map(|s| origin.map_or(0, |o| (s.began - o).as_nanos() as u64))
        .collect();
    let merged_mean = 1e9 / (cfg.rate_per_client as f64 * f64::from(c));
    // When the store executed each read (the atomic script, or the naive GET: Redis TIME runs
    // right after it in the same pipeline).
    let at_store: Vec<u64> = sent
        .iter()
        .filter_map(|s| s.result.as_ref().ok())
        .map(|o| o.decided_at.as_u64())
        .collect();
    let store_gaps = ratelab_check::arrivals::gaps(&at_store);
    let first_read = at_store.iter().copied().min().unwrap_or(0);
    let mut store_reads_us: Vec<u64> = at_store.iter().map(|t| (t - first_read) / 1_000).collect();
    store_reads_us.sort_unstable();
    RealPoint {
        path: path.name().to_owned(),
        concurrency: c,
        run,
        offered: sent.len() as u64 + lost,
        admitted,
        errors,
        envelope,
        excess: e.total_excess,
        max_excess: e.max_excess,
        mean_latency_us: mean(sent.iter().map(|s| us(s.took))).unwrap_or(0.0),
        rtt_us: mean(sent.iter().flat_map(|s| &s.calls).map(|&(a, b)| us(b - a))).unwrap_or(0.0),
        race_window_us: race,
        late_p50_us: pct(0.5),
        late_p99_us: pct(0.99),
        arrivals_ks: ratelab_check::arrivals::ks_exponential(
            &ratelab_check::arrivals::gaps(&starts),
            merged_mean,
        ),
        store_arrivals_ks: ratelab_check::arrivals::ks_exponential(&store_gaps, merged_mean),
        store_close_pct: 100.0 * store_gaps.iter().filter(|&&g| g < CLOSE_US * 1e3).count() as f64
            / store_gaps.len().max(1) as f64,
        seconds: cfg.seconds,
        store_reads_us,
    }
}

/// Runs the ladder on both paths, `cfg.runs` times.
pub async fn ladder(
    url: &str,
    cfg: &RealConfig,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Vec<RealPoint>, String> {
    let bucket =
        TokenBucket::per_second(cfg.capacity, cfg.refill_per_sec).map_err(|e| e.to_string())?;
    let opts = RedisOptions {
        prefix: "ratelab:sweep:".into(),
        timeout: Duration::from_secs(2),
    };
    let store = RedisStore::connect(url, bucket, opts)
        .await
        .map_err(|e| e.to_string())?;
    store
        .clear()
        .await
        .map_err(|e| format!("cannot clear old sweep keys: {e}"))?;
    let total = cfg.concurrency.len() * 2 * cfg.runs as usize;
    let mut points = Vec::new();
    for run in 0..cfg.runs {
        for path in Path::ALL {
            for &c in &cfg.concurrency {
                points.push(point(&store, cfg, path, c, run).await);
                progress(points.len(), total);
            }
        }
    }
    Ok(points)
}

/// One throughput measurement.
#[derive(Clone, Copy, Debug)]
pub struct Throughput {
    /// Decisions per second (decisions that returned, admitted or denied).
    pub per_sec: f64,
    /// Decisions made.
    pub decisions: u64,
    /// Of those, admitted.
    pub admitted: u64,
    /// Calls that failed (timeouts, errors): not decisions, and not in `per_sec`.
    pub errors: u64,
    /// Median latency of the decisions, µs.
    pub p50_us: f64,
    /// 99th percentile latency of the decisions, µs.
    pub p99_us: f64,
}

/// `clients` tasks deciding on `path` as fast as they can for `seconds`, over 1000 keys.
pub async fn throughput(
    store: &RedisStore,
    path: Path,
    clients: usize,
    seconds: f64,
) -> Throughput {
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let (mut lat, mut admitted, mut errors) = (Vec::new(), 0u64, 0u64);
                let mut k = i;
                while Instant::now() < deadline {
                    k = (k * 7 + 13) % 1000;
                    let key = Key::new(&format!("bench:{k}")).expect("key");
                    let t = Instant::now();
                    match decide_remote(&store, path, TimeSource::Store, &key, Nanos::ZERO, 1).await
                    {
                        Ok(o) => {
                            lat.push(t.elapsed().as_nanos() as u64);
                            admitted += u64::from(o.decision.allowed);
                        }
                        Err(_) => errors += 1,
                    }
                }
                (lat, admitted, errors)
            })
        })
        .collect();
    let (mut lat, mut admitted, mut errors) = (Vec::new(), 0, 0);
    for t in tasks {
        match t.await {
            Ok((l, a, e)) => {
                lat.extend(l);
                admitted += a;
                errors += e;
            }
            // A task that died decided nothing: count it as failed.
            Err(_) => errors += 1,
        }
    }
    let wall = started.elapsed().as_secs_f64();
    lat.sort_unstable();
    let pct = |q: f64| percentile::of(&lat, q).map_or(f64::NAN, |ns| ns as f64 / 1e3);
    Throughput {
        per_sec: lat.len() as f64 / wall,
        decisions: lat.len() as u64,
        admitted,
        errors,
        p50_us: pct(0.5),
        p99_us: pct(0.99),
    }
}

impl Throughput {
    /// The measurement, or why it cannot be reported: a throughput with failed calls in it
    /// measures the failures too.
    pub fn clean(self, what: &str) -> Result<Throughput, String> {
        if self.errors > 0 || self.decisions == 0 {
            return Err(format!(
                "{what}: {} of {} calls failed; no throughput is reported from a run with errors",
                self.errors,
                self.errors + self.decisions
            ));
        }
        Ok(self)
    }
}

/// Runs `redis-benchmark` with the same script by EVALSHA at `clients` connections against
/// `target` (on a cluster, `--cluster`: each connection sends keys of its node's slots).
pub fn redis_benchmark(
    target: &BenchTarget,
    sha: &str,
    bucket: &TokenBucket,
    clients: usize,
    requests: u64,
) -> Result<Throughput, String> {
    let mut cmd = Command::new("redis-benchmark");
    cmd.args([
        "-h",
        "127.0.0.1",
        "-p",
        &target.port.to_string(),
        "-c",
        &clients.to_string(),
        "-n",
        &requests.to_string(),
    ]);
    if target.is_cluster() {
        cmd.arg("--cluster");
    }
    let out = cmd
        .args([
            "-r",
            "1000",
            "--csv",
            "EVALSHA",
            sha,
            "1",
            if target.is_cluster() {
                "ratelab:bench:{tag}:key:__rand_int__"
            } else {
                "ratelab:bench:key:__rand_int__"
            },
        ])
        .args([
            bucket.capacity().to_string(),
            bucket.refill_amount().to_string(),
            bucket.refill_period().as_u64().to_string(),
            "1".into(),
            String::new(),
            String::new(),
        ])
        .output()
        .map_err(|e| format!("cannot run redis-benchmark: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
    let row = text
        .lines()
        .find(|l| l.starts_with("\"EVALSHA"))
        .ok_or_else(|| {
            format!(
                "unexpected redis-benchmark output: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
    let f: Vec<f64> = row
        .split("\",\"")
        .skip(1)
        .map(|v| v.trim_matches('"').parse().unwrap_or(f64::NAN))
        .collect();
    if f.len() < 6 {
        return Err(format!("unexpected redis-benchmark row: {row}"));
    }
    Ok(Throughput {
        per_sec: f[0],
        decisions: requests,
        admitted: 0,
        errors: 0,
        p50_us: f[3] * 1e3,
        p99_us: f[5] * 1e3,
    })
}

/// What `ratelab bench --redis` measures: one server, or a Redis Cluster's primaries.
#[derive(Clone, Debug)]
pub struct BenchTarget {
    /// The URL `RedisStore` connects to (`redis+cluster://…` for a cluster).
    pub url: String,
    /// The port `redis-benchmark` is pointed at (a seed node, for a cluster).
    pub port: u16,
    /// Every node that serves commands: the server, or each primary.
    pub nodes: Vec<String>,
}

impl BenchTarget {
    /// The target `url` names, with `port` its (first) node's port; a cluster's primaries
    /// are read from `CLUSTER NODES` of its first seed.
    pub async fn of(url: &str, port: u16) -> Result<BenchTarget, String> {
        let nodes = match ratelab_store::redis_conn::cluster_seeds(url) {
            None => vec![url.to_owned()],
            Some(seeds) => {
                let seed = seeds.first().ok_or("a cluster URL without nodes")?;
                let text: String = redis::cmd("CLUSTER")
                    .arg("NODES")
                    .query_async(&mut connect(seed).await?)
                    .await
                    .map_err(|e| format!("{seed}: CLUSTER NODES: {e}"))?;
                let primaries: Vec<String> = text
                    .lines()
                    .filter(|l| {
                        // A live primary with an address: not failing, nor still joining.
                        let flags: Vec<&str> =
                            l.split(' ').nth(2).unwrap_or("").split(',').collect();
                        flags.contains(&"master")
                            && !flags
                                .iter()
                                .any(|f| matches!(*f, "fail" | "fail?" | "noaddr" | "handshake"))
                    })
                    .filter_map(|l| {
                        let addr = l.split(' ').nth(1)?.split('@').next()?;
                        Some(format!("redis://{addr}/"))
                    })
                    .collect();
                if primaries.is_empty() {
                    return Err(format!("{seed}: the cluster has no live primary"));
                }
                primaries
            }
        };
        Ok(BenchTarget {
            url: url.to_owned(),
            port,
            nodes,
        })
    }

    /// Whether it is a cluster.
    pub fn is_cluster(&self) -> bool {
        ratelab_store::redis_conn::cluster_seeds(&self.url).is_some()
    }

    /// Loads the script on every node; its SHA1.
    pub async fn load_script(&self) -> Result<String, String> {
        let mut sha = String::new();
        for node in &self.nodes {
            sha = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(SCRIPT)
                .query_async(&mut connect(node).await?)
                .await
                .map_err(|e| format!("{node}: {e}"))?;
        }
        Ok(sha)
    }

    /// Calls of `command` every node has served (from `INFO commandstats`).
    pub async fn command_calls(&self, command: &str) -> Result<u64, String> {
        let line = format!("cmdstat_{command}");
        let mut total = 0;
        for node in &self.nodes {
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query_async(&mut connect(node).await?)
                .await
                .map_err(|e| format!("{node}: {e}"))?;
            total += ratelab_procs::redis::info_field(&info, &line, "calls");
        }
        Ok(total)
    }
}

/// A plain connection to one node.
async fn connect(url: &str) -> Result<redis::aio::MultiplexedConnection, String> {
    redis::Client::open(url)
        .map_err(|e| format!("{url}: {e}"))?
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| format!("{url}: {e}"))
}

/// `ratelab bench --redis`: the atomic path beside `redis-benchmark` running the same script,
/// and the naive path beside the atomic one at two policies — one where many decisions are
/// denials (the naive path then skips its `SET`) and one where every decision is admitted
/// (the naive path always writes). Every figure comes from decisions that returned; a
/// measurement with any failed call is refused.
pub async fn bench(target: &BenchTarget, clients: usize, secs: f64) -> Result<(), String> {
    let url = target.url.as_str();
    let tight = TokenBucket::per_second(100, 50).map_err(|e| e.to_string())?;
    let open = TokenBucket::per_second(1_000_000, 1_000_000).map_err(|e| e.to_string())?;
    let connect = |bucket: TokenBucket, prefix: &str| {
        let opts = RedisOptions {
            prefix: prefix.into(),
            timeout: Duration::from_secs(2),
        };
        RedisStore::connect(url, bucket, opts)
    };
    let tight_store = connect(tight, "ratelab:bench:tight:")
        .await
        .map_err(|e| e.to_string())?;
    let open_store = connect(open, "ratelab:bench:open:")
        .await
        .map_err(|e| e.to_string())?;
    // Every measurement starts from empty buckets: one path must not inherit the buckets
    // another drained (more denials, fewer writes).
    let measure = |store: &RedisStore, path: Path, what: &'static str| {
        let store = store.clone();
        async move {
            store.clear().await.map_err(|e| e.to_string())?;
            throughput(&store, path, clients, secs).await.clean(what)
        }
    };
    let sha = target.load_script().await?;
    let calls = |c: &'static str| target.command_calls(c);
    let before = (calls("evalsha").await?, calls("eval").await?);
    let ours = measure(&tight_store, Path::Atomic, "atomic path").await?;
    let after = (calls("evalsha").await?, calls("eval").await?);
    let scripts = after.0.saturating_sub(before.0) + after.1.saturating_sub(before.1);
    let per_decision = scripts as f64 / ours.decisions as f64;
    let naive = measure(&tight_store, Path::Naive, "naive path").await?;
    let n = (ours.per_sec * secs).max(10_000.0) as u64;
    let theirs = redis_benchmark(target, &sha, &tight, clients, n)?;
    let open_atomic = measure(
        &open_store,
        Path::Atomic,
        "atomic path, every decision admitted",
    );
    let open_atomic = open_atomic.await?;
    let open_naive = measure(
        &open_store,
        Path::Naive,
        "naive path, every decision admitted",
    );
    let open_naive = open_naive.await?;
    for (what, t) in [("atomic", &open_atomic), ("naive", &open_naive)] {
        if t.admitted != t.decisions {
            return Err(format!(
                "the all-admitted policy denied {} of {} {what} decisions",
                t.decisions - t.admitted,
                t.decisions
            ));
        }
    }
    for s in [&tight_store, &open_store] {
        s.clear().await.map_err(|e| e.to_string())?;
    }
    // redis-benchmark reports no decisions, only replies: its admitted share is unknown.
    let table = |rows: &[(&str, &Throughput, bool)]| {
        let mut t = crate::table::numeric(["", "decisions/s", "p50 µs", "p99 µs", "admitted"], 1);
        for &(name, m, admitted_known) in rows {
            t.add_row([
                name.to_owned(),
                format!("{:.0}", m.per_sec),
                format!("{:.0}", m.p50_us),
                format!("{:.0}", m.p99_us),
                if admitted_known {
                    format!("{:.0}%", 100.0 * m.admitted as f64 / m.decisions as f64)
                } else {
                    "–".to_owned()
                },
            ]);
        }
        t
    };
    println!("{clients} concurrent clients, {secs} s per measurement, 1000 keys; no call failed\n");
    println!("token bucket B = 100, R = 50/s per key (a denied naive decision skips its SET):");
    println!(
        "{}",
        table(&[
            ("ratelab atomic path (EVALSHA)", &ours, true),
            ("redis-benchmark, same script by EVALSHA", &theirs, false),
            (
                "ratelab naive path (GET+TIME, SET if admitted)",
                &naive,
                true
            ),
        ])
    );
    println!("\ntoken bucket B = R = 1 000 000 per key (every decision admitted):");
    println!(
        "{}",
        table(&[
            ("ratelab atomic path (EVALSHA)", &open_atomic, true),
            ("ratelab naive path (GET+TIME, SET)", &open_naive, true),
        ])
    );
    println!(
        "\natomic / redis-benchmark: {:.2}",
        ours.per_sec / theirs.per_sec
    );
    println!(
        "naive / atomic: {:.2} at B = 100, {:.2} with every decision admitted",
        naive.per_sec / ours.per_sec,
        open_naive.per_sec / open_atomic.per_sec
    );
    println!("script calls (EVALSHA + EVAL) per atomic decision: {per_decision:.3}");
    Ok(())
}
