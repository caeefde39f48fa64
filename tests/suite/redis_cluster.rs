//! The store on a real local Redis Cluster (three primaries, three replicas, private, on free
//! loopback ports): decisions exactly the core's on keys spread over every primary, a request
//! whose limits' keys are in different slots decided all or nothing with a refund, scripts
//! reloaded after `SCRIPT FLUSH`, leases and the fence under one hash tag, and the naive path
//! losing updates there as on one server. And a failover under load: the hot key's primary is
//! killed while senders decide on it, once with plain asynchronous replication and once with
//! WAIT after each decision (the two runs at once, each on a cluster of its own); the
//! overshoot stays within the bound derived from the replica lag measured during the run (0
//! with acknowledged waits), calls fail at the failover, and the
//! replica is promoted and decides. `ratelab failover` runs the same longer, and restarts the
//! killed node as the promoted primary's replica. (One test binary, so the clusters of all
//! these tests wait out their node timeouts side by side.)

use crate::caller_clock::CallerClock;
use crate::multi_conformance;
use ratelab_testkit::redis_cluster;

use ratelab_core::{Algorithm, Nanos, TokenBucket};
use ratelab_probe::failover::{FailoverConfig, run};
use ratelab_store::redis_conn::slot;
use ratelab_store::redis_store::{RedisOptions, RedisStore};
use ratelab_store::{FenceVerdict, Key, LeaseClient, Path, StoreClient, TimeSource, decide_remote};
use ratelab_testkit::redis_server::info_field;
use redis_cluster::RedisCluster;
use std::time::Duration;

const EPOCH_NS: u64 = 1_764_500_000_000_000_000;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The tests' store settings: keys under `prefix`, 500 ms per call.
fn options(prefix: &str) -> RedisOptions {
    RedisOptions {
        prefix: prefix.into(),
        timeout: Duration::from_millis(500),
    }
}

async fn connect(cluster: &RedisCluster, bucket: TokenBucket, prefix: &str) -> RedisStore {
    RedisStore::connect_cluster(&cluster.seeds(), bucket, options(prefix))
        .await
        .unwrap()
}

#[test]
#[cfg_attr(
    ratelab_missing_redis_cluster,
    ignore = "redis-server or redis-cli is not installed (Debian: apt-get install redis-server)"
)]
fn cluster_decisions_are_the_cores_and_cross_slot_requests_are_all_or_nothing() {
    let Some(cluster) = RedisCluster::start("cluster_decisions") else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let bucket = TokenBucket::per_second(5, 20).unwrap();
        let store = connect(&cluster, bucket, "conf:").await;
        assert!(store.is_cluster());
        // A cluster URL names it too, by any of its nodes.
        let url = format!("redis+cluster://127.0.0.1:{}", cluster.nodes[4].port);
        let by_url = RedisStore::connect(&url, bucket, RedisOptions::default())
            .await
            .unwrap();
        assert!(by_url.is_cluster());
        // Keys on every primary: each decision exactly the core's, on both paths.
        let keys: Vec<Key> = (0..12)
            .map(|i| Key::new(&format!("k{i}")).unwrap())
            .collect();
        let primaries: std::collections::BTreeSet<u16> = keys
            .iter()
            .map(|k| cluster.primary_of(&format!("conf:{}", k.as_str())).unwrap())
            .collect();
        assert_eq!(primaries.len(), 3, "the keys span every primary");
        let mut states = vec![None; keys.len()];
        let mut clock = CallerClock::at(EPOCH_NS);
        for i in 0..240u64 {
            let t = clock.step((i * 7_919) % 40_000_000);
            let k = (i as usize * 5) % keys.len();
            let cost = 1 + i % 3;
            let path = if i % 2 == 0 {
                Path::Atomic
            } else {
                Path::Naive
            };
            let got = decide_remote(&store, path, TimeSource::Caller, &keys[k], Nanos(t), cost)
                .await
                .unwrap();
            let (next, want) = bucket.transition(states[k], Nanos(t), cost).unwrap();
            if want.allowed {
                states[k] = Some(next);
            }
            assert_eq!(
                got.decision, want,
                "request {i} on {:?}, {path} path",
                keys[k]
            );
        }

        // Two limits whose keys are in different slots: a wide one (100) and a narrow one (3).
        let wide = store
            .sibling(TokenBucket::per_second(100, 1).unwrap(), "wide:")
            .unwrap();
        let narrow = store
            .sibling(TokenBucket::per_second(3, 1).unwrap(), "narrow:")
            .unwrap();
        let key = Key::new("client").unwrap();
        assert_ne!(slot(b"wide:client"), slot(b"narrow:client"));
        let now = Some(Nanos(EPOCH_NS));
        let mut admitted = 0;
        for _ in 0..10 {
            let items = [(&wide, &key, 1), (&narrow, &key, 1)];
            let all = RedisStore::apply_all(&items, now).unwrap().await.unwrap();
            if all.allowed {
                admitted += 1;
            } else {
                assert!(
                    all.decisions[0].allowed && !all.decisions[1].allowed,
                    "{all:?}"
                );
                // The wide limit was refunded: it reports what it holds after the refund.
                assert_eq!(all.decisions[0].remaining, 97, "{all:?}");
            }
        }
        assert_eq!(admitted, 3);
        // A refund slower than the denial waits for lands in the background: margin for it.
        tokio::time::sleep(Duration::from_millis(200)).await;
        // The narrow limit's denials spent nothing at the wide one: 100 − 3 − this one.
        let alone = wide.apply(&key, now, 1).await.unwrap();
        assert_eq!(alone.decision.remaining, 96);

        // Keys in one slot (one hash tag) are one script, as on one server.
        let a = store
            .sibling(TokenBucket::per_second(2, 1).unwrap(), "{t}a:")
            .unwrap();
        let b = store
            .sibling(TokenBucket::per_second(9, 1).unwrap(), "{t}b:")
            .unwrap();
        for want in [true, true, false] {
            let items = [(&a, &key, 1), (&b, &key, 1)];
            let all = RedisStore::apply_all(&items, now).unwrap().await.unwrap();
            assert_eq!(all.allowed, want);
        }
        assert_eq!(b.apply(&key, now, 1).await.unwrap().decision.remaining, 6);

        // NOSCRIPT: after every primary forgets its scripts, calls reload them.
        cluster.on_primaries(&["SCRIPT", "FLUSH"]);
        let again = store
            .apply(&keys[0], Some(Nanos(clock.step(1))), 1)
            .await
            .unwrap();
        assert_eq!(again.decision.limit, 5);
        let items = [(&wide, &key, 1), (&narrow, &key, 1)];
        assert!(RedisStore::apply_all(&items, now).unwrap().await.is_ok());
        // A burst after a flush: 32 concurrent calls over every primary's slots, all of which
        // find the script missing, load it once between them: one `SCRIPT LOAD` per primary.
        // The primaries hold the calls a moment (`CLIENT PAUSE`) so that they arrive together;
        // a round in which they still did not proves nothing and is run again. The calls go
        // through a store of their own whose timeout leaves the pause and the loads room on a
        // loaded machine.
        let burst_store = RedisStore::connect_cluster(
            &cluster.seeds(),
            TokenBucket::per_second(5, 1).unwrap(),
            RedisOptions {
                prefix: "burst:".into(),
                timeout: Duration::from_secs(5),
            },
        )
        .await
        .unwrap();
        let mut bursts = 0;
        for round in 0..10 {
            if bursts == 2 {
                break;
            }
            cluster.on_primaries(&["SCRIPT", "FLUSH"]);
            cluster.on_primaries(&["CONFIG", "RESETSTAT"]);
            cluster.on_primaries(&["CLIENT", "PAUSE", "300"]);
            let calls: Vec<_> = (0..32)
                .map(|i| {
                    let store = burst_store.clone();
                    tokio::spawn(async move {
                        let k = Key::new(&format!("burst{round}-{i}")).unwrap();
                        store.apply(&k, None, 1).await
                    })
                })
                .collect();
            for c in calls {
                c.await.unwrap().expect("decided after the load");
            }
            let infos = cluster.on_primaries(&["INFO", "all"]);
            let loads: Vec<u64> = infos
                .iter()
                .map(|i| info_field(i, "cmdstat_script|load", "calls"))
                .collect();
            assert!(
                loads.iter().all(|&n| n == 1),
                "round {round}: SCRIPT LOADs per primary: {loads:?}"
            );
            let missing: u64 = infos
                .iter()
                .map(|i| info_field(i, "errorstat_NOSCRIPT", "count"))
                .sum();
            if missing > 1 {
                bursts += 1;
            }
        }
        assert_eq!(
            bursts, 2,
            "rounds in which the calls met the primaries together"
        );

        // Concurrent cross-slot requests: refunds race with other requests' spends. A refund
        // gives back only a spend still standing, so a race may cost a phantom denial, never
        // an admission beyond a limit: 96 requests at once from 4 clients, each at its own
        // narrow limit (3) and one shared wide limit (8), on the store's clock, one token an
        // hour.
        let hourly = |b| TokenBucket::new(b, 1, Nanos::from_millis(3_600_000)).unwrap();
        let shared = store.sibling(hourly(8), "shared:").unwrap();
        let own = store.sibling(hourly(3), "own:").unwrap();
        let one = Key::new("all").unwrap();
        let clients: Vec<Key> = (0..4)
            .map(|i| Key::new(&format!("c{i}")).unwrap())
            .collect();
        for c in &clients {
            assert_ne!(
                slot(format!("own:{}", c.as_str()).as_bytes()),
                slot(b"shared:all")
            );
        }
        let tasks: Vec<_> = (0..96)
            .map(|i| {
                let (shared, own, one) = (shared.clone(), own.clone(), one.clone());
                let client = clients[i % clients.len()].clone();
                tokio::spawn(async move {
                    let items = [(&shared, &one, 1), (&own, &client, 1)];
                    let all = RedisStore::apply_all(&items, None).unwrap().await;
                    (i % 4, all.is_ok_and(|a| a.allowed))
                })
            })
            .collect();
        let mut per_client = [0u32; 4];
        for t in tasks {
            let (c, admitted) = t.await.unwrap();
            per_client[c] += u32::from(admitted);
        }
        let total: u32 = per_client.iter().sum();
        println!("concurrent cross-slot requests admitted per client: {per_client:?}");
        assert!(per_client.iter().all(|&n| n <= 3), "{per_client:?}");
        assert!(
            total <= 8,
            "the shared limit admitted {total}: {per_client:?}"
        );
        assert!(total > 0, "{per_client:?}");
    });
}

#[test]
#[cfg_attr(
    ratelab_missing_redis_cluster,
    ignore = "redis-server or redis-cli is not installed (Debian: apt-get install redis-server)"
)]
fn cluster_leases_and_the_fence_run_under_one_hash_tag() {
    let Some(cluster) = RedisCluster::start("cluster_leases") else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let store = connect(&cluster, TokenBucket::per_second(5, 20).unwrap(), "lease:").await;
        let ttl = Nanos::from_millis(200);
        let a = store.acquire("cleanup", "a", ttl).await.unwrap().unwrap();
        assert_eq!(store.acquire("cleanup", "b", ttl).await, Ok(None));
        assert_eq!(
            store.fenced_set("cleanup", "ledger", a, "a swept").await,
            Ok(FenceVerdict::Accepted)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        let b = store.acquire("cleanup", "b", ttl).await.unwrap().unwrap();
        assert!(b > a, "{b} after {a}");
        assert_eq!(
            store
                .fenced_set("cleanup", "ledger", a, "a's stale sweep")
                .await,
            Ok(FenceVerdict::Stale { highest: b })
        );
        assert_eq!(
            store.fenced_get("cleanup", "ledger").await,
            Ok(Some((a, "a swept".into())))
        );
    });
}

#[test]
#[cfg_attr(
    ratelab_missing_redis_cluster,
    ignore = "redis-server or redis-cli is not installed (Debian: apt-get install redis-server)"
)]
fn on_a_cluster_the_naive_path_still_loses_updates_and_the_atomic_one_does_not() {
    let Some(cluster) = RedisCluster::start("cluster_race") else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let store = connect(&cluster, TokenBucket::per_second(4, 1).unwrap(), "race:").await;
        let mut naive = Vec::new();
        for round in 0..20u64 {
            for (path, out) in [(Path::Naive, Some(&mut naive)), (Path::Atomic, None)] {
                let key = Key::new(&format!("r{round}-{path}")).unwrap();
                // Three of four tokens spent: one left for 32 concurrent requests.
                store.apply(&key, None, 3).await.unwrap();
                let tasks: Vec<_> = (0..32)
                    .map(|_| {
                        let (s, k) = (store.clone(), key.clone());
                        tokio::spawn(async move {
                            decide_remote(&s, path, TimeSource::Store, &k, Nanos::ZERO, 1)
                                .await
                                .is_ok_and(|o| o.decision.allowed)
                        })
                    })
                    .collect();
                let mut n = 0;
                for t in tasks {
                    n += u32::from(t.await.unwrap());
                }
                match out {
                    Some(v) => v.push(n),
                    None => assert_eq!(n, 1, "atomic path, round {round}"),
                }
            }
        }
        println!("naive path on a cluster, 32 tasks, 1 token left: admitted {naive:?}");
        assert!(
            naive.iter().any(|&n| n > 1),
            "the naive path lost an update"
        );
    });
}

#[test]
#[cfg_attr(
    ratelab_missing_redis_cluster,
    ignore = "redis-server or redis-cli is not installed (Debian: apt-get install redis-server)"
)]
fn with_wait_a_failover_never_grants_a_fencing_token_twice() {
    let Some(mut cluster) = RedisCluster::start("cluster_lease_failover") else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let store = connect(&cluster, TokenBucket::per_second(5, 20).unwrap(), "fo:")
            .await
            .with_wait(1, Duration::from_millis(200));
        let ttl = Nanos::from_millis(100);
        let mut last = 0;
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_millis(120)).await;
            last = store.acquire("job", "a", ttl).await.unwrap().unwrap();
        }
        // The lease's primary dies; its replica, which acknowledged every grant, takes over.
        let primary = cluster.primary_of("fo:{lease:job}:token").unwrap();
        cluster.kill(primary);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let next = loop {
            assert!(
                std::time::Instant::now() < deadline,
                "no grant after the failover"
            );
            if let Ok(Some(t)) = store.acquire("job", "b", ttl).await {
                break t;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(next > last, "token {next} granted again after {last}");
    });
}

#[test]
#[cfg_attr(
    ratelab_missing_redis_cluster,
    ignore = "redis-server or redis-cli is not installed (Debian: apt-get install redis-server)"
)]
fn a_failover_under_load_stays_within_its_bound_and_recovers() {
    if !redis_cluster::installed() {
        // Says why, and fails when Redis is required.
        assert!(redis_cluster::RedisCluster::start("a_failover_under_load").is_none());
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let cfg = |wait| FailoverConfig {
        senders: 4,
        seconds: 4.5,
        kill_at: 0.3,
        restart_after: None,
        wait,
        // As `ratelab failover`: the call's timeout exceeds the longest wait.
        timeout: Duration::from_millis(90),
        ..FailoverConfig::default()
    };
    let (plain, waited) = (cfg(None), cfg(Some(Duration::from_millis(20))));
    let (a, b) = rt.block_on(async { tokio::join!(run(&plain), run(&waited)) });
    for r in [a.unwrap(), b.unwrap()] {
        println!("{r:?}");
        // The bound is derived from the lag measured and the admissions it puts at risk (0
        // with WAIT when every wait was acknowledged; B only when the lag is unknown).
        assert!(r.lag_samples > 0, "the replica's lag was measured: {r:?}");
        assert!(r.overshoot <= r.bound, "{r:?}");
        assert!(r.failed > 0, "the kill was felt: {r:?}");
        assert!(r.promoted_ms.is_some(), "the replica was promoted: {r:?}");
        assert!(
            r.recovered_ms.is_some(),
            "the promoted replica decided: {r:?}"
        );
        assert!(r.admitted > plain.capacity, "{r:?}");
    }
}

/// A bucket whose slot moves to another primary while it is in use: decisions follow the
/// `ASK` redirection while the slot is migrating (the key already on the new primary, which
/// has never run the script) and the `MOVED` one after, and the bucket's state moves with it.
#[test]
#[cfg_attr(
    ratelab_missing_redis_cluster,
    ignore = "redis-server or redis-cli is not installed (Debian: apt-get install redis-server)"
)]
fn decisions_follow_a_slot_migration_through_ask_and_moved() {
    let Some(cluster) = RedisCluster::start("cluster_migration") else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let hourly = TokenBucket::new(10, 1, Nanos::from_millis(3_600_000)).unwrap();
        let store = connect(&cluster, hourly, "mig:").await;
        let key = Key::new("moving").unwrap();
        let stored = "mig:moving";
        let from = cluster.primary_of(stored).unwrap();
        let to = cluster
            .nodes
            .iter()
            .map(|n| n.port)
            .find(|&p| p != from && redis_cluster::cli(p, &["ROLE"]).starts_with("master"))
            .unwrap();
        let id = |port: u16| {
            redis_cluster::cli(port, &["CLUSTER", "MYID"])
                .trim()
                .to_owned()
        };
        let s = slot(stored.as_bytes()).to_string();
        let remaining = || async {
            store
                .apply(&key, None, 1)
                .await
                .map(|a| a.decision.remaining)
        };
        assert_eq!(remaining().await, Ok(9));
        assert_eq!(remaining().await, Ok(8));

        // Migrating: the key goes to the new primary; the old one answers ASK for it.
        let (to_id, from_id) = (id(to), id(from));
        assert_eq!(
            redis_cluster::cli(to, &["CLUSTER", "SETSLOT", &s, "IMPORTING", &from_id]).trim(),
            "OK"
        );
        assert_eq!(
            redis_cluster::cli(from, &["CLUSTER", "SETSLOT", &s, "MIGRATING", &to_id]).trim(),
            "OK"
        );
        let to_port = to.to_string();
        assert_eq!(
            redis_cluster::cli(
                from,
                &["MIGRATE", "127.0.0.1", &to_port, stored, "0", "5000"]
            )
            .trim(),
            "OK"
        );
        assert!(
            redis_cluster::cli(from, &["GET", stored]).contains("ASK"),
            "the old primary redirects the key"
        );
        assert_eq!(
            remaining().await,
            Ok(7),
            "decided on the new primary, by ASK"
        );

        // Migrated: every primary names the new owner; the old one now answers MOVED.
        for n in &cluster.nodes {
            if redis_cluster::cli(n.port, &["ROLE"]).starts_with("master") {
                redis_cluster::cli(n.port, &["CLUSTER", "SETSLOT", &s, "NODE", &to_id]);
            }
        }
        assert_eq!(
            remaining().await,
            Ok(6),
            "decided on the new primary, after MOVED"
        );
        assert_eq!(cluster.primary_of(stored), Some(to));
    });
}

/// The several-limits property of `tests/suite/redis.rs`, on a cluster: the limits' keys fall in
/// different slots, so requests are decided slot by slot and refunded where another slot
/// denies, and still answer exactly as the core's all-or-nothing decision.
#[test]
#[cfg_attr(
    ratelab_missing_redis_cluster,
    ignore = "redis-server or redis-cli is not installed (Debian: apt-get install redis-server)"
)]
fn cross_slot_decisions_over_several_limits_are_the_cores() {
    let Some(cluster) = RedisCluster::start("cluster_several_limits") else {
        return;
    };
    let seeds = cluster.seeds();
    let n =
        multi_conformance::several_limits_decide_as_the_core(&runtime(), 24, |bucket, prefix| {
            let options = options(prefix);
            let seeds = seeds.clone();
            async move { RedisStore::connect_cluster(&seeds, bucket, options).await }
        });
    println!("the cluster and the core agreed on {n} generated request sequences");
    assert!(n >= 24, "{n}");
    // Case N's limits keep key "k" under multiN:0:, multiN:1: (and multiN:2:): in every case
    // the first two are in different slots, so each case exercised the per-slot path.
    for case in 1..=n {
        assert_ne!(
            slot(format!("multi{case}:0:k").as_bytes()),
            slot(format!("multi{case}:1:k").as_bytes()),
            "case {case}"
        );
    }
}
