//! The real-world commands, from their settings to the tables they print and the files and
//! doc blocks they write: the failover and its scale figures (`ratelab failover`), the
//! atomic path beside `redis-benchmark` (`ratelab bench --redis`) and the black-box
//! checker's benchmark (`ratelab probe bench`).
//!
//! Each returns the command's exit code: [`EXIT_BAD_INPUT`] after printing `error: …` for
//! anything the caller can fix (a missing doc, no redis-server, an unreachable store).

use crate::real;
use std::process::ExitCode;

/// The exit code of a run whose checks failed.
pub const EXIT_FAILED: u8 = 1;
/// The exit code of bad input: flags, files, a store that cannot be reached.
pub const EXIT_BAD_INPUT: u8 = 2;
/// Exit code: no check failed, but some could not conclude (a key whose linearizability
/// search ran out of its budget): unknown, never a pass.
pub const EXIT_UNKNOWN: u8 = 3;

/// Resolves `--redis`: `auto` starts a private server (kept alive by the returned guard).
fn redis_url(arg: &str) -> Result<(String, Option<ratelab_procs::redis::RedisServer>), String> {
    if arg == "auto" {
        let server = ratelab_procs::redis::RedisServer::start()?;
        Ok((server.url(), Some(server)))
    } else {
        Ok((arg.to_owned(), None))
    }
}

/// What a private store for the real ladder or the benchmark keeps alive.
#[derive(Debug)]
pub enum PrivateStore {
    /// A private redis-server.
    Server(#[allow(dead_code)] ratelab_procs::redis::RedisServer),
    /// A private local cluster.
    Cluster(#[allow(dead_code)] crate::failover::LocalCluster),
}

/// Resolves a `--redis` of the ladder or the benchmark: [`redis_url`], or `auto-cluster` for
/// a private local cluster (kept alive by the returned guard).
pub fn redis_store_arg(arg: &str) -> Result<(String, Option<PrivateStore>), String> {
    if arg == "auto-cluster" {
        let cluster = crate::failover::LocalCluster::start()?;
        return Ok((cluster.url(), Some(PrivateStore::Cluster(cluster))));
    }
    let (url, server) = redis_url(arg)?;
    Ok((url, server.map(PrivateStore::Server)))
}

/// `ratelab failover --scale`: decisions per second on one server and on three primaries.
pub fn scale(senders: u32, seconds: u64, out: &std::path::Path, doc: &std::path::Path) -> ExitCode {
    use ratelab_store::redis_store::{RedisOptions, RedisStore};
    if let Err(e) = check_block(doc, "cluster-scale") {
        eprintln!("error: {e}");
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    let keys = 10_000;
    let one = tokio_rt().block_on(async {
        let server = ratelab_procs::redis::RedisServer::start()?;
        let bucket = ratelab_core::TokenBucket::per_second(1_000_000, 1_000_000)
            .map_err(|e| e.to_string())?;
        let options = RedisOptions {
            prefix: "scale:".into(),
            timeout: std::time::Duration::from_millis(500),
        };
        let store = RedisStore::connect(&server.url(), bucket, options)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<f64, String>(crate::failover::throughput(&store, senders, seconds as f64, keys).await)
    });
    let three = tokio_rt().block_on(crate::failover::cluster_throughput(
        senders,
        seconds as f64,
        keys,
    ));
    let (one_server, three_primaries) = match (one, three) {
        (Ok(one), Ok(three)) => (one, three),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let results = crate::failover::ScaleResults {
        senders,
        seconds,
        keys,
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
        one_server,
        three_primaries,
    };
    let table = crate::failover::scale_table(&results);
    println!("{table}");
    write_results(&results, out, "cluster-scale", doc, &table)
}

/// Checks, before a measurement, that its results will have a place: `doc` has a
/// `figures:NAME` block.
fn check_block(doc: &std::path::Path, name: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(doc).map_err(|e| format!("{}: {e}", doc.display()))?;
    crate::blocks::replace_block(&text, &format!("figures:{name}"), "")
        .map(|_| ())
        .map_err(|e| format!("{}: {e}", doc.display()))
}

/// Writes `results` to `OUT/NAME.json` and `table` into `doc`'s `figures:NAME` block.
fn write_results<T: serde::Serialize>(
    results: &T,
    out: &std::path::Path,
    name: &str,
    doc: &std::path::Path,
    table: &str,
) -> ExitCode {
    let json = out.join(format!("{name}.json"));
    let written = std::fs::create_dir_all(out)
        .and_then(|()| {
            std::fs::write(
                &json,
                serde_json::to_string_pretty(results).expect("results serialize") + "\n",
            )
        })
        .map_err(|e| format!("{}: {e}", json.display()))
        .and_then(|()| std::fs::read_to_string(doc).map_err(|e| format!("{}: {e}", doc.display())))
        .and_then(|text| {
            crate::blocks::replace_block(&text, &format!("figures:{name}"), table)
                .map_err(|e| format!("{}: {e}", doc.display()))
        })
        .and_then(|text| std::fs::write(doc, text).map_err(|e| format!("{}: {e}", doc.display())));
    match written {
        Ok(()) => {
            eprintln!("wrote {} and {}", json.display(), doc.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}

/// `ratelab failover`: the same failover without and with WAIT, side by side.
pub fn failover(
    cfg: crate::failover::FailoverConfig,
    wait: std::time::Duration,
    json: bool,
    (out, doc): (&std::path::Path, &std::path::Path),
) -> ExitCode {
    if let Err(e) = check_block(doc, "failover-real") {
        eprintln!("error: {e}");
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    let mut runs = Vec::new();
    for w in [None, Some(wait)] {
        let cfg = crate::failover::FailoverConfig {
            wait: w,
            ..cfg.clone()
        };
        eprintln!(
            "failover{}: {} senders, {} s, kill at {} s …",
            if w.is_some() { " with WAIT" } else { "" },
            cfg.senders,
            cfg.seconds,
            cfg.kill_at
        );
        match tokio_rt().block_on(crate::failover::run(&cfg)) {
            Ok(r) => runs.push(r),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(EXIT_BAD_INPUT);
            }
        }
    }
    let results = crate::failover::FailoverResults {
        config: crate::failover::FailoverConfig {
            wait: Some(wait),
            ..cfg
        },
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
        runs,
    };
    let table = crate::failover::failover_table(&results);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&results).expect("results serialize")
        );
    } else {
        println!("{table}");
    }
    write_results(&results, out, "failover-real", doc, &table)
}

/// A multi-threaded tokio runtime for a measurement.
pub fn tokio_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime starts")
}

/// `ratelab bench --redis URL`: [`real::bench`] on the server or cluster `url` names (a private
/// one for `auto` or `auto-cluster`).
pub fn redis_bench(url: &str, clients: u64, seconds: u64) -> ExitCode {
    let fail = |e: String| {
        eprintln!("error: {e}");
        ExitCode::from(EXIT_BAD_INPUT)
    };
    if seconds > 60 {
        return fail(format!(
            "--seconds {seconds}: the Redis benchmark takes 1 to 60 s per measurement"
        ));
    }
    let clients = clients as usize;
    let (url, store) = match redis_store_arg(url) {
        Ok(u) => u,
        Err(e) => return fail(e),
    };
    // One server's port, or a cluster's first seed's (where redis-benchmark starts).
    let first = ratelab_store::redis_conn::cluster_seeds(&url)
        .and_then(|s| s.into_iter().next())
        .unwrap_or_else(|| url.clone());
    let Some(port) = first
        .trim_end_matches('/')
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
    else {
        return fail(format!("cannot find the port in {url}"));
    };
    let result = tokio_rt().block_on(async {
        let target = real::BenchTarget::of(&url, port).await?;
        real::bench(&target, clients, seconds as f64).await
    });
    drop(store);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

/// `ratelab probe bench`: both limiters, each seed, then the totals.
pub fn probe_bench(base: crate::probe::bench::BenchShape, seeds: u64) -> ExitCode {
    use crate::probe::{bench as checker, policy};
    println!(
        "black-box checker: {} operations over {} keys, {} closed-loop clients waiting up to \
         {} between requests, claim {}, clock resolution {}, budget {} per key",
        base.ops,
        base.keys,
        base.concurrency,
        base.think,
        policy::describe(&checker::CLAIM),
        checker::CLOCK_RESOLUTION,
        base.budget
    );
    let mut t = crate::table::numeric(
        [
            "limiter",
            "seed",
            "admitted",
            "black-box s",
            "store-order s",
            "ratio",
            "keys ok/violated/unknown",
            "max excess",
        ],
        1,
    );
    let mut in_flight = Vec::new();
    for lost_updates in [false, true] {
        let limiter = if lost_updates { "read-write" } else { "atomic" };
        let shape = crate::probe::bench::BenchShape {
            lost_updates,
            ..base
        };
        let (mut bb, mut st, mut flying) = (0.0, 0.0, 0.0);
        for seed in 1..=seeds {
            let (r, _) = checker::run(&shape, seed);
            bb += r.black_box_s;
            st += r.stamped_s;
            flying += r.in_flight;
            t.add_row([
                limiter.to_owned(),
                r.seed.to_string(),
                r.admitted.to_string(),
                format!("{:.3}", r.black_box_s),
                format!("{:.4}", r.stamped_s),
                format!("{:.0}", r.black_box_s / r.stamped_s.max(1e-9)),
                format!("{}/{}/{}", r.keys.0, r.keys.1, r.keys.2),
                r.max_excess.to_string(),
            ]);
        }
        t.add_row([
            limiter.to_owned(),
            "total".to_owned(),
            String::new(),
            format!("{bb:.3}"),
            format!("{st:.4}"),
            format!("{:.0}", bb / st.max(1e-9)),
            String::new(),
            String::new(),
        ]);
        in_flight.push((limiter, flying / seeds as f64));
    }
    println!("{t}");
    for (limiter, flying) in in_flight {
        println!("{limiter}: {flying:.1} requests in flight on average");
    }
    ExitCode::SUCCESS
}
