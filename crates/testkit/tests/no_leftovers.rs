//! Every process the kit starts is gone once its guard drops, when the test ends normally and
//! when it panics: a redis-server, a cluster's six nodes, an nginx master and its workers.

use ratelab_testkit::nginx::Nginx;
use ratelab_testkit::redis_cluster::RedisCluster;
use ratelab_testkit::redis_server::RedisServer;
use std::time::{Duration, Instant};

/// Whether `pid` is a live process (a zombie, which only waits to be reaped, is not).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses and may hold spaces.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// The processes whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                    .and_then(|ppid| ppid.parse::<u32>().ok())
                    == Some(pid)
            })
        })
        .collect()
}

/// Asserts every pid of `pids` is gone within 5 s (an orphaned nginx worker is reaped by
/// init, not by the test).
fn assert_gone(what: &str, pids: &[u32]) {
    let start = Instant::now();
    while pids.iter().any(|&p| alive(p)) && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
    assert!(
        left.is_empty(),
        "{what}: processes {left:?} outlived their guard"
    );
}

#[test]
#[cfg_attr(
    any(ratelab_missing_redis, ratelab_missing_nginx),
    ignore = "redis-server or nginx is not installed (Debian: apt-get install redis-server nginx-light)"
)]
fn a_dropped_redis_server_and_nginx_leave_no_process() {
    let Some(redis) = RedisServer::start("a_dropped_redis_server_and_nginx_leave_no_process")
    else {
        return;
    };
    let Some(nginx) = Nginx::start(
        "a_dropped_redis_server_and_nginx_leave_no_process",
        "",
        "location / { root {root}; }",
    ) else {
        return;
    };
    let redis_pid = redis.pid().expect("the server runs");
    // The master forks its worker after it opens the port: wait for the worker.
    let started = std::time::Instant::now();
    while children(nginx.pid()).is_empty() && started.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut nginx_pids = vec![nginx.pid()];
    nginx_pids.extend(children(nginx.pid()));
    assert!(alive(redis_pid), "redis-server runs while its guard lives");
    assert!(
        nginx_pids.len() >= 2,
        "nginx runs a master and a worker: {nginx_pids:?}"
    );
    assert!(nginx_pids.iter().all(|&p| alive(p)));
    drop(redis);
    drop(nginx);
    assert_gone("redis-server", &[redis_pid]);
    assert_gone("nginx master and workers", &nginx_pids);
}

#[test]
#[cfg_attr(
    ratelab_missing_redis_cluster,
    ignore = "redis-server or redis-cli is not installed (Debian: apt-get install redis-server)"
)]
fn a_dropped_cluster_leaves_no_process() {
    let Some(cluster) = RedisCluster::start("a_dropped_cluster_leaves_no_process") else {
        return;
    };
    let pids: Vec<u32> = cluster.nodes.iter().filter_map(|n| n.pid()).collect();
    assert_eq!(pids.len(), 6, "six nodes run");
    drop(cluster);
    assert_gone("cluster nodes", &pids);
}

#[test]
#[cfg_attr(
    any(ratelab_missing_redis, ratelab_missing_nginx),
    ignore = "redis-server or nginx is not installed (Debian: apt-get install redis-server nginx-light)"
)]
fn a_panicking_test_leaves_no_process() {
    let test = "a_panicking_test_leaves_no_process";
    let (tx, rx) = std::sync::mpsc::channel();
    let panicked = std::thread::spawn(move || {
        let redis = RedisServer::start(test);
        let nginx = Nginx::start(test, "", "location / { root {root}; }");
        let mut pids: Vec<u32> = redis.iter().filter_map(|r| r.pid()).collect();
        if let Some(n) = &nginx {
            pids.push(n.pid());
            pids.extend(children(n.pid()));
        }
        tx.send(pids).unwrap();
        panic!("the test fails while its processes run");
    })
    .join();
    assert!(panicked.is_err(), "the thread panicked");
    let pids = rx.recv().unwrap();
    assert_gone("processes of a panicking test", &pids);
}
