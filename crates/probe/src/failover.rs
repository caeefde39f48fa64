//! What a Redis Cluster failover costs a token bucket, measured on a real local cluster
//! (`ratelab failover`).
//!
//! Senders decide on one hot key back to back while the primary that owns its slot is killed
//! (SIGKILL) and its replica is promoted. Every decision is recorded: admitted or denied with
//! the store's time, or failed. The report gives the failed calls and the window they span,
//! and the overshoot on the hot key: the largest excess of store-admitted requests over the
//! envelope B + R·Δt in any interval, as the checkers crate computes it.
//!
//! The default policy, B = 100 and R = 20/s, takes B/R = 5 s to refill from empty, longer
//! than the outage a failover causes (about 2 s): a promoted replica's older state is then
//! still visible at its first decisions, as an overshoot, rather than refilled away.
//!
//! **The bound.** Replication is asynchronous: the promoted replica holds the bucket's state
//! as of some instant `t_kill − L`, L the replication lag, so it grants again the tokens
//! spent by the admissions the old primary acknowledged in those last L. Those are at most
//! what the bucket could admit in L, B + R·L, and the promoted state holds at most B tokens
//! more than the true one, so the excess over the envelope is at most min(B, A_L) in any
//! interval, A_L the admissions acknowledged in the last L before the kill; at steady
//! saturation (the bucket empty at the kill) A_L ≤ R·L + 1.
//!
//! The run measures both sides of that bound rather than assuming them. Until the kill, a
//! probe writes a marker key in the hot key's slot on the primary every 2 ms and reads the
//! replica (`READONLY`) back to back until the marker shows there: L is the largest time from
//! the write's acknowledgement to its being read on the replica (an upper estimate: it
//! includes a read's round trip). A_L is then counted from the history: admissions sent
//! before the kill whose answer came at most L before it or later. The reported bound is
//! min(B, A_L); a marker the replica does not show within 100 ms leaves the lag unknown, and
//! the bound B.
//!
//! With `WAIT 1` after each admitted decision ([`RedisStore::with_wait`]) an acknowledged
//! decision is on the replica before the sender hears of it, so the promoted state lacks no
//! acknowledged decision and the bound is 0 — unless a wait before the kill came back short
//! ([`RedisStore::waits_short`]; the bound is then that of asynchronous replication, with a
//! lag of at least the wait), or
//! covered nothing (a connection replaced between the script and the `WAIT`), which no
//! reply shows.

use ratelab_check::envelope::{self, Admission, Envelope};
use ratelab_check::percentile;
use ratelab_core::{Nanos, TokenBucket};
use ratelab_procs::redis::{self as local_redis, RedisCluster};
use ratelab_store::redis_conn::slot;
use ratelab_store::redis_store::{RedisOptions, RedisStore};
use ratelab_store::{Key, LimitError, Outcome, Path, TimeSource, decide_remote};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The experiment's settings.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FailoverConfig {
    /// Concurrent senders on the hot key.
    pub senders: u32,
    /// Seconds of traffic.
    pub seconds: f64,
    /// Seconds into the traffic at which the hot key's primary is killed.
    pub kill_at: f64,
    /// Seconds after the replica's promotion at which the killed node is started again (it
    /// rejoins as the promoted primary's replica), if at all.
    pub restart_after: Option<f64>,
    /// B.
    pub capacity: u64,
    /// R per second.
    pub refill_per_sec: u64,
    /// `WAIT` for one replica after each decision, for at most this long.
    pub wait: Option<Duration>,
    /// Each call's timeout.
    pub timeout: Duration,
}

impl Default for FailoverConfig {
    fn default() -> Self {
        FailoverConfig {
            senders: 16,
            seconds: 6.0,
            kill_at: 2.0,
            restart_after: Some(4.0),
            capacity: 100,
            refill_per_sec: 20,
            wait: None,
            timeout: Duration::from_millis(50),
        }
    }
}

/// What one run measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FailoverReport {
    /// Whether each decision waited for a replica.
    pub wait: bool,
    /// Decisions made (admitted or denied).
    pub decided: u64,
    /// Of them, admitted.
    pub admitted: u64,
    /// Calls that failed (timeout, connection lost, cluster down): a gateway fails these
    /// open or closed.
    pub failed: u64,
    /// The last failure's reason.
    pub last_error: Option<String>,
    /// From the kill to the first decision after it (by the promoted primary), ms.
    pub recovered_ms: Option<f64>,
    /// Calls that failed after that first decision.
    pub failed_after_recovery: u64,
    /// Of them, after the killed node was back as a replica.
    pub failed_after_restart: u64,
    /// Decisions after the killed node was back as a replica.
    pub decided_after_restart: u64,
    /// From the kill to the cluster naming the replica the slot's primary, ms.
    pub promoted_ms: Option<f64>,
    /// From the kill to the last failed call, ms (0 if none failed).
    pub last_failure_ms: f64,
    /// The largest excess over B + R·Δt in any interval on the hot key.
    pub overshoot: u64,
    /// The largest replication lag the probe measured before the kill, µs (`None` if no
    /// sample completed).
    pub replica_lag_max_us: Option<f64>,
    /// Lag samples taken.
    pub lag_samples: u64,
    /// Markers the replica did not show within the probe's patience (100 ms): when any, the
    /// lag is unknown and the bound is B.
    pub lag_samples_given_up: u64,
    /// Admissions acknowledged within that lag of the kill (A_L): those a promotion can lose.
    pub at_risk: u64,
    /// Waits that came back with no replica before the kill (the run with WAIT).
    pub waits_short_before_kill: u64,
    /// The bound on the overshoot derived from the measured lag: min(B, A_L); 0 with WAIT
    /// when every wait before the kill was acknowledged. With the lag unknown, B.
    pub bound: u64,
    /// Median and 99th percentile latency of decisions before the kill, µs.
    pub p50_us: f64,
    /// See `p50_us`.
    pub p99_us: f64,
}

/// One call.
struct Call {
    sent: Instant,
    done: Instant,
    /// `Some((allowed, store time))` when decided.
    decided: Option<(bool, Nanos)>,
    /// Why it failed, when it did.
    error: Option<String>,
}

/// Runs the experiment on a fresh private cluster.
pub async fn run(cfg: &FailoverConfig) -> Result<FailoverReport, String> {
    let cluster = RedisCluster::create()?;
    let bucket =
        TokenBucket::per_second(cfg.capacity, cfg.refill_per_sec).map_err(|e| e.to_string())?;
    let mut store = connect(&cluster, bucket, "failover:", cfg.timeout).await?;
    if let Some(w) = cfg.wait {
        store = store.with_wait(1, w);
    }
    let key = Key::new("hot").map_err(|e| e.to_string())?;
    let primary = cluster
        .primary_of(HOT)
        .ok_or("no primary serves the hot key's slot")?;
    let start = Instant::now();
    let until = start + Duration::from_secs_f64(cfg.seconds);
    let mut tasks = Vec::new();
    for _ in 0..cfg.senders {
        let (store, key) = (store.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            let mut calls = Vec::new();
            while Instant::now() < until {
                let sent = Instant::now();
                let r = decide(&store, &key).await;
                let done = Instant::now();
                calls.push(Call {
                    sent,
                    done,
                    decided: r.as_ref().ok().map(|o| (o.decision.allowed, o.decided_at)),
                    error: r.as_ref().err().map(ToString::to_string),
                });
                if r.is_err() {
                    // A failed call returns at once when the node is gone: pace retries.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            calls
        }));
    }
    let stop_probe = Arc::new(AtomicBool::new(false));
    let probe = tokio::spawn(probe_lag(primary, HOT, stop_probe.clone()));
    tokio::time::sleep(Duration::from_secs_f64(cfg.kill_at)).await;
    stop_probe.store(true, Ordering::Relaxed);
    let lags = probe.await.map_err(|e| e.to_string())??;
    let waits_short_before_kill = store.waits_short();
    let mut cluster = cluster;
    // The kill is sent now and the process reaped after it: admissions answered from here
    // on were decided no later than the death.
    let kill_sent = Instant::now();
    cluster.kill(primary);
    let killed = Instant::now();
    // The promotion, as the cluster reports it: another node serves the hot key's slot.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut promoted = None;
    while Instant::now() < deadline {
        if cluster.primary_of(HOT).is_some_and(|p| p != primary) {
            promoted = Some(Instant::now());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut restarted = None;
    if let (Some(after), Some(_)) = (cfg.restart_after, promoted) {
        tokio::time::sleep(Duration::from_secs_f64(after)).await;
        cluster.restart(primary)?;
        // Back once it is in sync as a replica (not counted back if it never is).
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if local_redis::cli(primary, &["INFO", "replication"]).contains("master_link_status:up")
            {
                restarted = Some(Instant::now());
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let mut calls = Vec::new();
    for t in tasks {
        calls.extend(t.await.map_err(|e| e.to_string())?);
    }
    let mut r = report(cfg, &bucket, &calls, (killed, restarted));
    r.promoted_ms = promoted.map(|t| t.duration_since(killed).as_secs_f64() * 1e3);
    r.lag_samples = lags.samples.len() as u64;
    r.lag_samples_given_up = lags.gave_up;
    let lag = lags.samples.iter().max().copied();
    r.replica_lag_max_us = lag.map(|l| l.as_secs_f64() * 1e6);
    r.waits_short_before_kill = waits_short_before_kill;
    // A wait that came back short shows a lag at least that long.
    let lag = match (lag, cfg.wait) {
        (Some(l), Some(w)) if waits_short_before_kill > 0 => Some(l.max(w)),
        (l, _) => l,
    };
    r.at_risk = lag.map_or(0, |l| at_risk(&calls, kill_sent, l));
    r.bound = derived_bound(
        cfg.capacity,
        &lags,
        cfg.wait.is_some() && waits_short_before_kill == 0,
        r.at_risk,
    );
    Ok(r)
}

/// The hot key as stored (the store's prefix, then the key).
const HOT: &str = "failover:hot";

/// The bound on the overshoot from what the run measured: B when the lag is unknown (no
/// sample, or a sample the replica never showed); 0 when every admission before the kill
/// waited for the replica and got it; else min(B, the admissions at risk).
fn derived_bound(capacity: u64, lags: &LagSamples, all_waited: bool, at_risk: u64) -> u64 {
    if lags.samples.is_empty() || lags.gave_up > 0 {
        capacity
    } else if all_waited {
        0
    } else {
        capacity.min(at_risk)
    }
}

/// Admissions sent before the kill whose answer came no earlier than `lag` before the kill
/// was sent: the old primary acknowledged them within the replication lag of its death, so
/// the replica may lack them. (A call sent before the kill can only have been decided by the
/// old primary: its timeout is far shorter than a promotion.)
fn at_risk(calls: &[Call], kill_sent: Instant, lag: Duration) -> u64 {
    let from = kill_sent.checked_sub(lag).unwrap_or(kill_sent);
    calls
        .iter()
        .filter(|c| matches!(c.decided, Some((true, _))) && c.sent < kill_sent && c.done >= from)
        .count() as u64
}

/// The replica lag samples of a run.
#[derive(Debug, Default)]
struct LagSamples {
    /// From a write's acknowledgement on the primary to its being read on the replica.
    samples: Vec<Duration>,
    /// Samples the replica did not show within the probe's patience: the lag is unknown.
    gave_up: u64,
}

/// How long the probe waits for the replica to show one marker.
const PATIENCE: Duration = Duration::from_millis(100);

/// Measures the replication lag of `primary` (a node's port) to its replica until `stop`:
/// every 2 ms a marker in `key`'s slot is written on the primary, then read on the replica
/// (`READONLY`) back to back until it shows there; each sample is the time from the write's
/// acknowledgement to that read's answer. A marker the replica does not show within
/// [`PATIENCE`] is counted as given up.
async fn probe_lag(primary: u16, key: &str, stop: Arc<AtomicBool>) -> Result<LagSamples, String> {
    let info = local_redis::cli(primary, &["INFO", "replication"]);
    let replica =
        replica_port(&info).ok_or_else(|| format!("node {primary} has no replica: {info}"))?;
    let marker = marker_key(key)?;
    let open = |port: u16| async move {
        redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .map_err(|e| e.to_string())?
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| format!("lag probe, node {port}: {e}"))
    };
    let (mut w, mut r) = (open(primary).await?, open(replica).await?);
    let () = redis::cmd("READONLY")
        .query_async(&mut r)
        .await
        .map_err(|e| e.to_string())?;
    let mut lags = LagSamples::default();
    let mut n: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let set: redis::RedisResult<()> = redis::cmd("SET")
            .arg(&marker)
            .arg(n)
            .query_async(&mut w)
            .await;
        if set.is_err() {
            break;
        }
        let acked = Instant::now();
        loop {
            let seen: Option<u64> = redis::cmd("GET")
                .arg(&marker)
                .query_async(&mut r)
                .await
                .unwrap_or(None);
            let waited = acked.elapsed();
            if seen == Some(n) {
                lags.samples.push(waited);
                break;
            }
            if waited >= PATIENCE {
                lags.gave_up += 1;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(lags)
}

/// The port of a primary's first replica, from its `INFO replication` text.
fn replica_port(info: &str) -> Option<u16> {
    info.lines()
        .find(|l| l.starts_with("slave0:"))
        .and_then(|l| l.split(',').find_map(|f| f.strip_prefix("port=")))
        .and_then(|p| p.trim().parse().ok())
}

/// A key of the same hash slot as `key`, which has no hash tag of its own: `key` as the hash
/// tag of another (so on the same primary, in the same replication stream).
fn marker_key(key: &str) -> Result<String, String> {
    let marker = format!("{{{key}}}:lag");
    if slot(marker.as_bytes()) == slot(key.as_bytes()) {
        Ok(marker)
    } else {
        Err(format!("no marker key in the slot of {key}"))
    }
}

fn report(
    cfg: &FailoverConfig,
    bucket: &TokenBucket,
    calls: &[Call],
    (killed, restarted): (Instant, Option<Instant>),
) -> FailoverReport {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mut adm: Vec<Admission> = calls
        .iter()
        .enumerate()
        .filter_map(|(i, c)| match c.decided {
            Some((true, at)) => Some(Admission {
                at,
                id: i as u64,
                cost: 1,
            }),
            _ => None,
        })
        .collect();
    adm.sort_unstable();
    let admitted = adm.len() as u64;
    let by_key = BTreeMap::from([("hot", adm)]);
    let overshoot = envelope::envelope(&by_key, Envelope::of_bucket(bucket)).max_excess;
    let failed: Vec<&Call> = calls.iter().filter(|c| c.decided.is_none()).collect();
    let last_failure_ms = failed
        .iter()
        .map(|c| ms(c.done.saturating_duration_since(killed)))
        .fold(0.0, f64::max);
    // The first decision of a call sent after the kill.
    let recovered = calls
        .iter()
        .filter(|c| c.decided.is_some() && c.sent >= killed)
        .map(|c| c.done)
        .min();
    let failed_after =
        |t: Option<Instant>| t.map_or(0, |t| failed.iter().filter(|c| c.sent >= t).count() as u64);
    let mut before: Vec<f64> = calls
        .iter()
        .filter(|c| c.decided.is_some() && c.done < killed)
        .map(|c| c.done.duration_since(c.sent).as_secs_f64() * 1e6)
        .collect();
    before.sort_by(f64::total_cmp);
    let pct = |q: f64| percentile::of(&before, q).unwrap_or(0.0);
    FailoverReport {
        wait: cfg.wait.is_some(),
        decided: calls.iter().filter(|c| c.decided.is_some()).count() as u64,
        admitted,
        failed: failed.len() as u64,
        last_error: failed
            .iter()
            .max_by_key(|c| c.done)
            .and_then(|c| c.error.clone()),
        recovered_ms: recovered.map(|t| ms(t.duration_since(killed))),
        failed_after_recovery: failed_after(recovered),
        failed_after_restart: failed_after(restarted),
        decided_after_restart: restarted.map_or(0, |t| {
            calls
                .iter()
                .filter(|c| c.decided.is_some() && c.sent >= t)
                .count() as u64
        }),
        promoted_ms: None,
        last_failure_ms,
        overshoot,
        replica_lag_max_us: None,
        lag_samples: 0,
        lag_samples_given_up: 0,
        at_risk: 0,
        waits_short_before_kill: 0,
        bound: cfg.capacity,
        p50_us: pct(0.50),
        p99_us: pct(0.99),
    }
}

/// Decisions per second on `store`: `senders` back to back for `seconds`, each on one of
/// `keys` keys drawn in turn (so a cluster's keys spread over its primaries).
pub async fn throughput(store: &RedisStore, senders: u32, seconds: f64, keys: u32) -> f64 {
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let tasks: Vec<_> = (0..senders)
        .map(|s| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut n = 0u64;
                let mut i = s;
                while Instant::now() < until {
                    let Ok(key) = Key::new(&format!("scale:{}", i % keys)) else {
                        break;
                    };
                    i = i.wrapping_add(senders);
                    let r = decide(&store, &key).await;
                    n += u64::from(r.is_ok());
                }
                n
            })
        })
        .collect();
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap_or(0);
    }
    total as f64 / start.elapsed().as_secs_f64()
}

/// [`throughput`] on a fresh private cluster of three primaries.
pub async fn cluster_throughput(senders: u32, seconds: f64, keys: u32) -> Result<f64, String> {
    let cluster = RedisCluster::create()?;
    let bucket = TokenBucket::per_second(1_000_000, 1_000_000).map_err(|e| e.to_string())?;
    let store = connect(&cluster, bucket, "scale:", Duration::from_millis(500)).await?;
    Ok(throughput(&store, senders, seconds, keys).await)
}

/// A private local Redis Cluster (three primaries, three replicas on free loopback ports, no
/// persistence), stopped when dropped: what `ratelab sweep --redis auto-cluster` runs on.
#[derive(Debug)]
pub struct LocalCluster {
    cluster: RedisCluster,
}

impl LocalCluster {
    /// Creates one, or explains why not (no `redis-server` or `redis-cli`, or a cluster that
    /// never became ok).
    pub fn start() -> Result<LocalCluster, String> {
        if !local_redis::cluster_installed() {
            return Err(
                "redis-server and redis-cli are needed for a private cluster \
                        (Debian: apt-get install redis-server), or pass a redis+cluster:// URL"
                    .into(),
            );
        }
        Ok(LocalCluster {
            cluster: RedisCluster::create()?,
        })
    }

    /// Its URL, `redis+cluster://` with every node as a seed.
    pub fn url(&self) -> String {
        self.cluster.url()
    }
}

/// A store for `bucket` on `cluster`, under `prefix`.
async fn connect(
    cluster: &RedisCluster,
    bucket: TokenBucket,
    prefix: &str,
    timeout: Duration,
) -> Result<RedisStore, String> {
    let options = RedisOptions {
        prefix: prefix.into(),
        timeout,
    };
    RedisStore::connect_cluster(&cluster.seeds(), bucket, options)
        .await
        .map_err(|e| e.to_string())
}

/// One atomic decision on the store's clock, at cost 1.
async fn decide(store: &RedisStore, key: &Key) -> Result<Outcome, LimitError> {
    decide_remote(store, Path::Atomic, TimeSource::Store, key, Nanos::ZERO, 1).await
}

/// `ratelab failover`'s results, as committed in `docs/results/failover.json`: the settings
/// and the run without and with `WAIT`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FailoverResults {
    /// The settings of both runs (`wait`: the WAIT run's).
    pub config: FailoverConfig,
    /// Cores of the machine.
    pub cores: usize,
    /// The runs: asynchronous replication, then `WAIT 1`.
    pub runs: Vec<FailoverReport>,
}

/// The docs' table of a [`FailoverResults`] (docs/CLUSTER.md, block `figures:failover-real`).
pub fn failover_table(results: &FailoverResults) -> String {
    let r = &results.config;
    let opt = |v: Option<f64>| v.map_or("never".to_owned(), |m| format!("{m:.0}"));
    let wait_ms = r.wait.map_or(0, |w| w.as_millis());
    let mut out = format!(
        "B = {}, R = {}/s, {} senders on one hot key, {} s per run on {} cores; the key's primary \
         killed {} s in{}.\n\n\
         | run | decided | admitted | failed | promoted after (ms) | recovered after (ms) | failed after recovery | failed after restart | replica lag, max µs (samples, given up) | admissions at risk | waits short | overshoot | bound | p50 µs | p99 µs |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        r.capacity,
        r.refill_per_sec,
        r.senders,
        r.seconds,
        results.cores,
        r.kill_at,
        r.restart_after.map_or(String::new(), |a| format!(
            ", restarted {a} s after the promotion"
        )),
    );
    for run in &results.runs {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} ({}, {}) | {} | {} | {} | {} | {:.0} | {:.0} |\n",
            if run.wait {
                format!("WAIT 1 (at most {wait_ms} ms) after each admission")
            } else {
                "asynchronous replication".to_owned()
            },
            run.decided,
            run.admitted,
            run.failed,
            opt(run.promoted_ms),
            opt(run.recovered_ms),
            run.failed_after_recovery,
            run.failed_after_restart,
            opt(run.replica_lag_max_us),
            run.lag_samples,
            run.lag_samples_given_up,
            run.at_risk,
            if run.wait {
                run.waits_short_before_kill.to_string()
            } else {
                "–".to_owned()
            },
            run.overshoot,
            run.bound,
            run.p50_us,
            run.p99_us,
        ));
    }
    if let (Some(a), Some(w)) = (
        results.runs.iter().find(|x| !x.wait),
        results.runs.iter().find(|x| x.wait),
    ) {
        let ratio = |x: f64, y: f64| if y > 0.0 { x / y } else { 0.0 };
        out.push_str(&format!(
            "\nWAIT against asynchronous replication: {:.2}× the decisions, {:.2}× the p50 and \
             {:.2}× the p99 before the kill; overshoot {} against {}.\n",
            ratio(w.decided as f64, a.decided as f64),
            ratio(w.p50_us, a.p50_us),
            ratio(w.p99_us, a.p99_us),
            w.overshoot,
            a.overshoot,
        ));
    }
    out
}

/// `ratelab failover --scale`'s results, as committed in `docs/results/cluster-scale.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ScaleResults {
    /// Concurrent senders.
    pub senders: u32,
    /// Seconds per measurement.
    pub seconds: u64,
    /// Keys the senders spread over.
    pub keys: u32,
    /// Cores of the machine.
    pub cores: usize,
    /// Decisions per second on one redis-server.
    pub one_server: f64,
    /// Decisions per second on a cluster of three primaries.
    pub three_primaries: f64,
}

/// The docs' table of a [`ScaleResults`] (docs/CLUSTER.md, block `figures:cluster-scale`).
pub fn scale_table(s: &ScaleResults) -> String {
    format!(
        "{} senders over {} keys, {} s each, {} cores.\n\n\
         | store | decisions/s |\n|---|---:|\n\
         | one redis-server | {:.0} |\n| cluster, three primaries | {:.0} |\n\n\
         Three primaries / one: {:.2}.\n",
        s.senders,
        s.keys,
        s.seconds,
        s.cores,
        s.one_server,
        s.three_primaries,
        if s.one_server > 0.0 {
            s.three_primaries / s.one_server
        } else {
            0.0
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(sent: Instant, done: Instant, admitted: Option<bool>) -> Call {
        Call {
            sent,
            done,
            decided: admitted.map(|a| (a, Nanos::ZERO)),
            error: None,
        }
    }

    #[test]
    fn admissions_at_risk_are_those_answered_within_the_lag_of_the_kill() {
        let kill = Instant::now() + Duration::from_secs(1);
        let ms = Duration::from_millis;
        let calls = [
            // Answered 5 ms before the kill: on the replica by then.
            call(kill - ms(6), kill - ms(5), Some(true)),
            // Answered within the last millisecond: at risk.
            call(kill - ms(2), kill - Duration::from_micros(500), Some(true)),
            // Sent before, answered after the kill was sent: at risk.
            call(kill - ms(1), kill + ms(1), Some(true)),
            // A denial wrote nothing; a failure decided nothing.
            call(kill - ms(1), kill, Some(false)),
            call(kill - ms(1), kill, None),
            // Sent after the kill: decided by the promoted replica.
            call(kill + ms(1), kill + ms(2), Some(true)),
        ];
        assert_eq!(at_risk(&calls, kill, ms(1)), 2);
        assert_eq!(at_risk(&calls, kill, ms(10)), 3);
        assert_eq!(at_risk(&calls, kill, Duration::ZERO), 1);
    }

    #[test]
    fn the_bound_is_b_when_the_lag_is_unknown_and_zero_only_when_every_wait_held() {
        let measured = LagSamples {
            samples: vec![Duration::from_micros(300)],
            gave_up: 0,
        };
        let unknown = LagSamples {
            samples: vec![Duration::from_micros(300)],
            gave_up: 1,
        };
        assert_eq!(derived_bound(100, &measured, false, 2), 2);
        assert_eq!(derived_bound(100, &measured, false, 500), 100);
        assert_eq!(derived_bound(100, &measured, true, 2), 0);
        assert_eq!(derived_bound(100, &unknown, false, 2), 100);
        assert_eq!(derived_bound(100, &unknown, true, 0), 100);
        assert_eq!(derived_bound(100, &LagSamples::default(), true, 0), 100);
    }

    #[test]
    fn the_replica_port_is_read_from_info_replication() {
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:1\r\n\
                    slave0:ip=127.0.0.1,port=40123,state=online,offset=1234,lag=0\r\n";
        assert_eq!(replica_port(info), Some(40123));
        assert_eq!(
            replica_port("# Replication\r\nrole:master\r\nconnected_slaves:0\r\n"),
            None
        );
    }

    #[test]
    fn the_lag_marker_shares_the_hot_keys_slot() {
        let marker = marker_key(HOT).unwrap();
        assert_ne!(marker, HOT);
        assert_eq!(slot(marker.as_bytes()), slot(HOT.as_bytes()));
        assert!(marker_key("{a}b").is_err());
    }
}
