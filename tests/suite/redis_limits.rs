//! Every limiter family on a real `redis-server` (`LIMITS_SCRIPT`): on generated limits of
//! mixed families and request sequences, one script call over one key or several decides
//! exactly as the core's all-or-nothing decision, field for field — through clock steps
//! forward and back, idle gaps past a key's lifetime, keys Redis expired (deleted when the
//! core says their state is over), and a script cache flushed mid-sequence (`NOSCRIPT`); on a
//! Redis Cluster too, each request's keys in one slot, and as a store client across slots
//! (decided per slot, given back where another slot denied).

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use ratelab_core::TokenBucket;
use ratelab_core::all::{Effect, Part, decide_all};
use ratelab_core::{
    Algorithm, FirstHitWindow, FixedWindow, Nanos, Policy, PolicyState, SlidingWindow,
    SteppedBucket,
};
use ratelab_store::redis_conn::Conn;
use ratelab_store::redis_limits::{self, LIMITS_SCRIPT, ScriptLimit};
use ratelab_store::redis_policy::RedisPolicy;
use ratelab_store::redis_store::{RedisOptions, RedisStore};
use ratelab_store::{Key, LimitError, Path, StoreClient, StoreError, TimeSource, decide_remote};
use ratelab_testkit::redis_cluster::RedisCluster;
use ratelab_testkit::redis_server::RedisServer;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Today-ish, in ns since the epoch: the script must stay exact at realistic clocks.
const EPOCH_NS: i64 = 1_764_500_000_123_456_789;

const TIMEOUT: Duration = Duration::from_secs(2);

/// A limit of family `family` (0 to 4) from three drawn numbers.
fn policy(family: u8, n: u64, window_ns: u64, amount: u64) -> Policy {
    let w = Nanos(window_ns);
    match family {
        0 => Policy::FixedWindow(FixedWindow::new(n, w).unwrap()),
        1 => Policy::FirstHitWindow(FirstHitWindow::new(n, w).unwrap()),
        2 => Policy::SlidingWindow(SlidingWindow::new(n, w).unwrap()),
        3 => Policy::SteppedBucket(SteppedBucket::new(n, amount, Nanos(window_ns / 4)).unwrap()),
        _ => Policy::TokenBucket(TokenBucket::new(n, amount, Nanos(window_ns / 4)).unwrap()),
    }
}

fn limits() -> impl Strategy<Value = Vec<Policy>> {
    let one = (
        0u8..5,
        1u64..=12,
        prop_oneof![
            4 => Just(1_000_000_000u64),
            4 => (22u32..=32).prop_map(|b| 1u64 << b),
            4 => 4_000_000u64..=4_000_000_000,
            1 => 4_000_000_000u64..(1 << 49),
        ],
        1u64..=4,
    )
        .prop_map(|(f, n, w, a)| policy(f, n, w, a))
        // The script's exact range (a stepped bucket's fill time, a bucket's scaled time):
        // beyond it a limit is refused, which a test of its own shows.
        .prop_filter("within the script's exact range", |p| {
            ScriptLimit::new(*p).is_ok()
        });
    prop::collection::vec(one, 1..=3)
}

/// How the clock moves before a request.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// By this many ns (now and then back).
    By(i64),
    /// To the first limit's next window boundary, plus this many ns (-1, 0 or 1): where a
    /// window ends, the first hit's as well when it opened on one.
    Boundary(i64),
}

/// Per request: the clock's step, and its cost.
fn requests() -> impl Strategy<Value = Vec<(Step, u64)>> {
    let step = prop_oneof![
        6 => (0i64..400_000_000).prop_map(Step::By),
        2 => (0i64..9_000_000_000).prop_map(Step::By),
        1 => (-300_000_000i64..0).prop_map(Step::By),
        1 => (-60_000_000_000i64..-300_000_000).prop_map(Step::By),
        2 => (-1i64..=1).prop_map(Step::Boundary),
    ];
    prop::collection::vec((step, 1u64..=3), 1..80)
}

/// The time after `step` from `t`, the window boundaries those of `p`'s quota.
fn moved(t: i64, step: Step, p: &Policy) -> i64 {
    match step {
        Step::By(d) => t + d,
        Step::Boundary(off) => {
            let w = p.quota().window.as_u64() as i64;
            (t / w + 1) * w + off
        }
    }
}

/// Where the sequences run: a connection, each sequence's key for each limit, and whether to
/// flush the script cache now and then (on one server: a cluster routes `SCRIPT FLUSH` to
/// one node of its choosing).
struct Target {
    conn: Conn,
    key: fn(u64, usize) -> String,
    flush: bool,
}

/// Runs `cases` generated sequences on `target`, each request compared with the core's
/// all-or-nothing decision: (decisions, sequences).
fn agree(rt: &tokio::runtime::Runtime, target: &Target, cases: u32) -> (u64, u64) {
    let script = redis::Script::new(&SCRIPT_KEEPING_KEYS);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let sequences = AtomicU64::new(0);
    let decisions = AtomicU64::new(0);
    runner
        .run(&(limits(), requests()), |(policies, ops)| {
            let case = sequences.fetch_add(1, Ordering::Relaxed) + 1;
            let mut conn = target.conn.clone();
            let limits: Vec<ScriptLimit> = policies
                .iter()
                .map(|p| ScriptLimit::new(*p).unwrap())
                .collect();
            let keys: Vec<String> = (0..limits.len()).map(|i| (target.key)(case, i)).collect();
            let mut states: Vec<Option<PolicyState>> = vec![None; limits.len()];
            let mut t = EPOCH_NS;
            for (i, &(step, cost)) in ops.iter().enumerate() {
                t = moved(t, step, &policies[0]);
                let now = Nanos(t as u64);
                let costs: Vec<u64> = policies.iter().map(|p| cost.min(p.quota().limit)).collect();
                rt.block_on(async {
                    // Redis's own expiry of a key whose state is over, as the core says.
                    for (k, (p, s)) in keys.iter().zip(policies.iter().zip(&mut states)) {
                        if s.is_some_and(|st| p.expires_at(&st) <= now) && i % 3 == 0 {
                            let _: () = redis::cmd("DEL")
                                .arg(k)
                                .query_async(&mut conn)
                                .await
                                .unwrap();
                            *s = None;
                        }
                    }
                    if target.flush && i % 17 == 16 {
                        let _: () = redis::cmd("SCRIPT")
                            .arg("FLUSH")
                            .query_async(&mut conn)
                            .await
                            .unwrap();
                    }
                });
                let parts: Vec<(&str, &ScriptLimit, u64)> = keys
                    .iter()
                    .zip(&limits)
                    .zip(&costs)
                    .map(|((k, l), c)| (k.as_str(), l, *c))
                    .collect();
                let began = Instant::now();
                let got = rt
                    .block_on(redis_limits::decide(&mut conn, &script, &parts, Some(now)))
                    .unwrap();
                // What Redis's clock can have moved between the script's write and its read of
                // the lifetime: no more than the whole call took.
                let took = u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX);
                let core: Vec<Part<'_, Policy>> = policies
                    .iter()
                    .zip(&states)
                    .zip(&costs)
                    .map(|((p, s), c)| Part {
                        algorithm: p,
                        state: *s,
                        cost: *c,
                    })
                    .collect();
                let want = decide_all(&core, now).unwrap();
                let want_decisions: Vec<_> = want.parts.iter().map(|(_, d)| *d).collect();
                prop_assert_eq!(got.allowed, want.allowed, "request {} at {}", i, t);
                prop_assert_eq!(
                    &got.decisions,
                    &want_decisions,
                    "request {} of {:?} at {} under {:?}",
                    i,
                    ops,
                    t,
                    policies
                );
                prop_assert_eq!(got.store_time, now);
                for ((s, (effect, _)), (k, p)) in states
                    .iter_mut()
                    .zip(&want.parts)
                    .zip(keys.iter().zip(&policies))
                {
                    if let Effect::Spent(next) = effect {
                        *s = Some(*next);
                        let ttl = rt.block_on(lifetime(&mut conn, k));
                        let want = p.ttl(next, now).as_u64().div_ceil(1_000_000).max(1);
                        // PTTL gives what is left of it, rounded down: less by what passed since
                        // the script set it.
                        let ttl = u64::try_from(ttl).unwrap_or(0);
                        prop_assert!(
                            ttl <= want && ttl.saturating_add(took.saturating_add(1)) >= want,
                            "{}: {} ms, not {}",
                            k,
                            ttl,
                            want
                        );
                    }
                }
                decisions.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        })
        .unwrap();
    (decisions.into_inner(), sequences.into_inner())
}

/// The limits script, and at its end, for each key, the lifetime it gave it (ms, kept under
/// `KEY:ttl`), which is then lifted. The sequences run on the caller's clock, now and then
/// stepping back; Redis's own expiry, on its clock, would drop a key the caller's clock
/// still needs (the sequences delete a key themselves when the core says its state is over).
/// The lifetime read is the one just set, less what passed since (at most the whole call).
static SCRIPT_KEEPING_KEYS: LazyLock<String> = LazyLock::new(|| {
    let script = LIMITS_SCRIPT.as_str();
    let end = script
        .rfind("return reply")
        .expect("the script returns its reply");
    format!(
        "{}{}",
        &script[..end],
        "for i = 1, #KEYS do\n\
           redis.call('SET', KEYS[i] .. ':ttl', redis.call('PTTL', KEYS[i]))\n\
           redis.call('PERSIST', KEYS[i])\n\
         end\n\
         return reply\n"
    )
});

/// The lifetime the script gave `key` when it last wrote it, ms.
async fn lifetime(conn: &mut Conn, key: &str) -> i64 {
    redis::cmd("GET")
        .arg(format!("{key}:ttl"))
        .query_async(conn)
        .await
        .unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Runs `cases` sequences on `target` and says how many agreed.
fn report(target: &Target, rt: &tokio::runtime::Runtime, cases: u32, on: &str) {
    let (decisions, sequences) = agree(rt, target, cases);
    println!(
        "{on}: the limits script and the core agreed on {decisions} decisions in {sequences} sequences"
    );
}

#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn the_limits_script_decides_every_family_exactly_as_the_core() {
    let Some(server) =
        RedisServer::start("the_limits_script_decides_every_family_exactly_as_the_core")
    else {
        return;
    };
    let rt = runtime();
    let conn = rt.block_on(Conn::open(&server.url(), TIMEOUT)).unwrap();
    let key = |case, i| format!("w{case}:{i}");
    report(
        &Target {
            conn,
            key,
            flush: true,
        },
        &rt,
        96,
        "one server",
    );
}

/// The same on a Redis Cluster, each request's keys in one slot (one hash tag).
#[test]
#[cfg_attr(
    ratelab_missing_redis_cluster,
    ignore = "redis-server or redis-cli is not installed (Debian: apt-get install redis-server)"
)]
fn the_limits_script_decides_as_the_core_on_a_cluster() {
    let Some(cluster) = RedisCluster::start("limits_on_a_cluster") else {
        return;
    };
    let rt = runtime();
    let conn = rt
        .block_on(Conn::open_cluster(&cluster.seeds(), TIMEOUT))
        .unwrap();
    let key = |case, i| format!("{{w{case}}}:{i}");
    report(
        &Target {
            conn,
            key,
            flush: false,
        },
        &rt,
        24,
        "a cluster",
    );
}

/// How far the caller's clock moves: `step` ns, and at least as far as Redis's clock has
/// moved since `last` (and 1 ms more), so that whatever Redis expires on its clock the core
/// has let go of too on the caller's.
fn ahead(last: &mut Instant, step: u64) -> u64 {
    let real = u64::try_from(last.elapsed().as_nanos()).unwrap_or(u64::MAX);
    *last = Instant::now();
    step.max(real.saturating_add(1_000_000))
}

/// One policy of each family, four requests a window (or bucket) each.
fn one_of_each_family() -> [Policy; 5] {
    let ms = Nanos::from_millis;
    [
        Policy::FixedWindow(FixedWindow::new(4, ms(700)).unwrap()),
        Policy::FirstHitWindow(FirstHitWindow::new(4, ms(700)).unwrap()),
        Policy::SlidingWindow(SlidingWindow::new(4, ms(700)).unwrap()),
        Policy::SteppedBucket(SteppedBucket::new(4, 2, ms(300)).unwrap()),
        Policy::TokenBucket(TokenBucket::per_second(4, 5).unwrap()),
    ]
}

/// A client of each of `policies` over `base`'s connections, the `i`th one's keys under
/// `{prefix}{i}:`.
fn clients_of(base: &RedisStore, policies: &[Policy], prefix: &str) -> Vec<RedisPolicy> {
    policies
        .iter()
        .enumerate()
        .map(|(i, p)| RedisPolicy::new(base, *p, &format!("{prefix}{i}:")).unwrap())
        .collect()
}

/// A store on `server` whose connections the families' clients share (its own bucket and
/// prefix unused).
async fn base_store(server: &RedisServer) -> RedisStore {
    let options = RedisOptions {
        prefix: "unused:".into(),
        timeout: TIMEOUT,
    };
    let bucket = TokenBucket::per_second(1, 1).unwrap();
    RedisStore::connect(&server.url(), bucket, options)
        .await
        .unwrap()
}

/// Every family as a store client (`RedisPolicy`): sequential decisions at the caller's times
/// equal the core's on both paths (the naive one reads and writes the state as the script
/// does), and one request at limits of mixed families through `apply_all` is the core's
/// all-or-nothing decision.
#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn every_family_as_a_store_client_decides_as_the_core_on_both_paths() {
    let Some(server) = RedisServer::start("every_family_as_a_store_client") else {
        return;
    };
    let rt = runtime();
    let policies = one_of_each_family();
    rt.block_on(async {
        let base = base_store(&server).await;
        let clients = clients_of(&base, &policies, "p");
        let key = Key::new("k").unwrap();
        for (client, policy) in clients.iter().zip(&policies) {
            let mut state = None;
            // EPOCH_NS is off the microsecond: the decision's time comes back to the nanosecond.
            let mut t = EPOCH_NS as u64;
            let mut last = Instant::now();
            for j in 0..120u64 {
                t += ahead(&mut last, (j * 7_919_000) % 90_000_000);
                let cost = 1 + j % 2;
                let path = if j % 3 == 0 {
                    Path::Naive
                } else {
                    Path::Atomic
                };
                let got = decide_remote(client, path, TimeSource::Caller, &key, Nanos(t), cost)
                    .await
                    .unwrap();
                let (next, want) = policy.transition(state, Nanos(t), cost).unwrap();
                if want.allowed {
                    state = Some(next);
                }
                assert_eq!(
                    got.decision, want,
                    "{policy:?}: request {j} on the {path} path"
                );
                if path == Path::Atomic {
                    assert_eq!(got.decided_at, Nanos(t), "{policy:?}: request {j}'s time");
                }
            }
        }
        every_family_at_once(&clients, &policies, ("p", "all"), (true, false)).await;
    });
}

/// Every family's call sent ahead of its reply (`StoreClient::send`, as the HTTP front makes
/// it) and its reply read (`StoreClient::read_sent`) decide as the core, field for field, on
/// the caller's clock; a state the script did not write is read as `Corrupt`; and a reply
/// from a store that lost its scripts (`SCRIPT FLUSH`) asks for the call again (`None`),
/// nothing spent, after which `apply` (which loads the script) goes on where the core does.
#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn every_family_sent_ahead_of_its_reply_decides_as_the_core() {
    let Some(server) = RedisServer::start("every_family_sent_ahead") else {
        return;
    };
    let rt = runtime();
    let policies = one_of_each_family();
    rt.block_on(async {
        let base = base_store(&server).await;
        let mut conn = Conn::open(&server.url(), TIMEOUT).await.unwrap();
        let (key, bad) = (Key::new("k").unwrap(), Key::new("bad").unwrap());
        for (i, policy) in policies.iter().enumerate() {
            let client = RedisPolicy::new(&base, *policy, &format!("s{i}:")).unwrap();
            let sent = async |key: &Key, t: u64, cost: u64| {
                let call = client
                    .send(key, Some(Nanos(t)), cost)
                    .expect("one server sends");
                let reply = call.expect("sent").await.expect("a reply");
                client.read_sent(reply)
            };
            let mut state = None;
            let mut t = EPOCH_NS as u64;
            let mut last = Instant::now();
            for j in 0..60u64 {
                t += ahead(&mut last, (j * 7_919_000) % 90_000_000);
                let cost = 1 + j % 2;
                // The family's script is loaded by its first `apply` (the server's first
                // request after a start asks for the call again): only then is it sent.
                let got = match sent(&key, t, cost).await {
                    Some(read) => read.unwrap(),
                    None if j == 0 => client.apply(&key, Some(Nanos(t)), cost).await.unwrap(),
                    None => panic!("{policy:?}: request {j} asked to be sent again"),
                };
                let (next, want) = policy.transition(state, Nanos(t), cost).unwrap();
                if want.allowed {
                    state = Some(next);
                }
                assert_eq!(got.decision, want, "{policy:?}: request {j}");
                assert_eq!(got.store_time, Nanos(t), "{policy:?}: request {j}'s time");
            }
            let _: () = redis::cmd("SET")
                .arg(format!("s{i}:bad"))
                .arg("not a state")
                .query_async(&mut conn)
                .await
                .unwrap();
            let refused = sent(&bad, t, 1).await;
            assert_eq!(
                refused,
                Some(Err(LimitError::Store(StoreError::Corrupt))),
                "{policy:?}"
            );
            let _: () = redis::cmd("SCRIPT")
                .arg("FLUSH")
                .query_async(&mut conn)
                .await
                .unwrap();
            t += ahead(&mut last, 1_000_000);
            assert_eq!(sent(&key, t, 1).await, None, "{policy:?}: sent again");
            let got = client.apply(&key, Some(Nanos(t)), 1).await.unwrap();
            let (_, want) = policy.transition(state, Nanos(t), 1).unwrap();
            assert_eq!(got.decision, want, "{policy:?}: after the flush");
        }
    });
}

/// Several limits' step sent ahead of its reply (`StoreClient::send_all`, as the HTTP front
/// sends a request at several limits) and its reply read (`read_sent_all`) decide as the
/// core's all-or-nothing step, field for field: limits of every family (the limits script)
/// and token buckets alone (the bucket's own script). A key given twice and a cost beyond a
/// limit are refused without the store; a state the script did not write is `Corrupt`; a
/// store that lost its scripts asks for the step again (`None`), nothing spent.
#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn several_limits_sent_ahead_of_their_reply_decide_as_the_core() {
    let Some(server) = RedisServer::start("several_limits_sent_ahead") else {
        return;
    };
    let rt = runtime();
    let families = one_of_each_family();
    let buckets = [
        Policy::TokenBucket(TokenBucket::per_second(3, 5).unwrap()),
        Policy::TokenBucket(TokenBucket::per_second(5, 2).unwrap()),
    ];
    rt.block_on(async {
        let base = base_store(&server).await;
        let mut conn = Conn::open(&server.url(), TIMEOUT).await.unwrap();
        let clients = |policies: &[Policy], prefix: &str| clients_of(&base, policies, prefix);
        let (mixed, bucketed) = (clients(&families, "m"), clients(&buckets, "b"));
        // Each script loaded, by a step through `apply_all` on keys of their own.
        let warm = Key::new("warm").unwrap();
        for group in [&mixed, &bucketed] {
            let items: Vec<_> = group.iter().map(|c| (c, &warm, 1)).collect();
            step(&items, EPOCH_NS as u64, Way::Awaited).await.unwrap();
        }
        let denied =
            every_family_at_once_by(&mixed, &families, ("m", "all"), (true, false), Way::Sent);
        denied.await;
        let denied =
            every_family_at_once_by(&bucketed, &buckets, ("b", "all"), (true, false), Way::Sent);
        denied.await;
        let t = EPOCH_NS as u64 + 10_000_000_000;
        for group in [&mixed, &bucketed] {
            let (a, b) = (Key::new("a").unwrap(), Key::new("b").unwrap());
            let twice = [(&group[0], &a, 1), (&group[0], &a, 1)];
            assert_eq!(
                step(&twice, t, Way::Sent).await,
                Err(LimitError::RepeatedKey)
            );
            let most = group[1].algorithm().quota().limit;
            let over = [(&group[0], &a, 1), (&group[1], &b, most + 1)];
            let refused = step(&over, t, Way::Sent).await;
            assert!(matches!(refused, Err(LimitError::Cost(_))), "{refused:?}");
        }
        // Refused without the store, and a step that could not read a key: nothing written.
        let (ok, bad) = (Key::new("ok").unwrap(), Key::new("bad").unwrap());
        for (group, p) in [(&mixed, "m"), (&bucketed, "b")] {
            let _: () = redis::cmd("SET")
                .arg(format!("{p}1:bad"))
                .arg("not a state")
                .query_async(&mut conn)
                .await
                .unwrap();
            let corrupt = [(&group[0], &ok, 1), (&group[1], &bad, 1)];
            let read = step(&corrupt, t, Way::Sent).await;
            assert_eq!(read, Err(LimitError::Store(StoreError::Corrupt)), "{p}");
            let unwritten = [format!("{p}0:a"), format!("{p}1:b"), format!("{p}0:ok")];
            let there: usize = redis::cmd("EXISTS")
                .arg(&unwritten[..])
                .query_async(&mut conn)
                .await
                .unwrap();
            assert_eq!(there, 0, "{p}: {unwritten:?}");
        }
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut conn)
            .await
            .unwrap();
        for group in [&mixed, &bucketed] {
            let fresh = Key::new("fresh").unwrap();
            let items: Vec<_> = group.iter().map(|c| (c, &fresh, 1)).collect();
            let sent = RedisPolicy::send_all(&items, Some(Nanos(t)))
                .unwrap()
                .unwrap();
            let reply = sent.await.unwrap();
            assert!(
                RedisPolicy::read_sent_all(&items, reply).is_none(),
                "asked again"
            );
            // Nothing was spent: the step through `apply_all` (the script loaded again) is
            // each limit's first.
            let all = step(&items, t, Way::Awaited).await.unwrap();
            let parts: Vec<Part<'_, Policy>> = group
                .iter()
                .map(|c| Part {
                    algorithm: c.algorithm(),
                    state: None,
                    cost: 1,
                })
                .collect();
            let want = decide_all(&parts, Nanos(t)).unwrap();
            let decisions: Vec<_> = want.parts.iter().map(|(_, d)| *d).collect();
            assert_eq!(all.decisions, decisions);
        }
    });
}

/// One request at every one of `clients` (of `policies`) at once, 60 times on the caller's
/// clock: each the core's all-or-nothing decision, every key's field for field (a key whose
/// spend was given back reports what the core's unspent key holds).
/// The clients' keys are `{prefix}{i}:{name}{i}`. `denials`: whether some request must be
/// denied (the limits are tight enough); `refunds`: whether some must be denied with a slot
/// whose every limit admitted it (a cluster gives that slot's spend back). Returns how many
/// were. Each step goes through `apply_all`, or with `way` = [`Way::Sent`] is sent ahead of
/// its reply (`send_all`, as the HTTP front sends it) and its reply read (`read_sent_all`).
async fn every_family_at_once(
    clients: &[RedisPolicy],
    policies: &[Policy],
    (prefix, name): (&str, &str),
    (denials, refunds): (bool, bool),
) -> u32 {
    every_family_at_once_by(
        clients,
        policies,
        (prefix, name),
        (denials, refunds),
        Way::Awaited,
    )
    .await
}

/// How [`every_family_at_once_by`] takes each step.
#[derive(Clone, Copy, PartialEq)]
enum Way {
    /// `apply_all`.
    Awaited,
    /// `send_all`, then `read_sent_all`.
    Sent,
}

/// One step over `items` on the caller's clock at `t`, taken the `way` asked.
async fn step(
    items: &[(&RedisPolicy, &Key, u64)],
    t: u64,
    way: Way,
) -> Result<ratelab_store::AllApplied, LimitError> {
    match way {
        Way::Awaited => {
            RedisPolicy::apply_all(items, Some(Nanos(t)))
                .expect("one store")
                .await
        }
        Way::Sent => {
            let sent = RedisPolicy::send_all(items, Some(Nanos(t))).expect("one server sends")?;
            let reply = sent.await.expect("a reply");
            RedisPolicy::read_sent_all(items, reply).expect("the scripts are loaded")
        }
    }
}

/// [`every_family_at_once`], each step taken the `way` asked.
async fn every_family_at_once_by(
    clients: &[RedisPolicy],
    policies: &[Policy],
    (prefix, name): (&str, &str),
    (denials, refunds): (bool, bool),
    way: Way,
) -> u32 {
    let keys: Vec<Key> = (0..clients.len())
        .map(|i| Key::new(&format!("{name}{i}")).unwrap())
        .collect();
    // Each limit's slot: the key as stored, under its client's prefix.
    let slots: Vec<u16> = (0..clients.len())
        .map(|i| ratelab_store::redis_conn::slot(format!("{prefix}{i}:{name}{i}").as_bytes()))
        .collect();
    let mut states: Vec<Option<PolicyState>> = vec![None; clients.len()];
    let mut t = EPOCH_NS as u64;
    let mut last = Instant::now();
    let (mut denied, mut refunded) = (0, 0);
    for j in 0..60u64 {
        t += ahead(&mut last, (j * 3_331_000) % 50_000_000);
        let items: Vec<_> = clients.iter().zip(&keys).map(|(c, k)| (c, k, 1)).collect();
        let got = step(&items, t, way).await.unwrap();
        let parts: Vec<Part<'_, Policy>> = policies
            .iter()
            .zip(&states)
            .map(|(p, s)| Part {
                algorithm: p,
                state: *s,
                cost: 1,
            })
            .collect();
        let want = decide_all(&parts, Nanos(t)).unwrap();
        assert_eq!(got.allowed, want.allowed, "request {j}");
        let decisions: Vec<_> = want.parts.iter().map(|(_, d)| *d).collect();
        assert_eq!(got.decisions, decisions, "request {j}");
        denied += u32::from(!want.allowed);
        // Denied, with a slot whose every limit admitted: that slot spent, and was given back.
        let admitted_in = |slot: u16| {
            want.parts
                .iter()
                .zip(&slots)
                .filter(|(_, s)| **s == slot)
                .all(|((effect, _), _)| matches!(effect, Effect::Unspent))
        };
        refunded += u32::from(!want.allowed && slots.iter().any(|s| admitted_in(*s)));
        for (s, (effect, _)) in states.iter_mut().zip(&want.parts) {
            if let Effect::Spent(next) = effect {
                *s = Some(*next);
            }
        }
    }
    assert!(
        denied > 0 || !denials,
        "some requests were denied, by one limit or several"
    );
    assert!(
        refunded > 0 || !refunds,
        "some denied requests were given back in a slot that admitted them: {denied} denied"
    );
    refunded
}

/// Every family on a Redis Cluster as a store client: one request at limits of every family
/// whose keys lie in different slots is decided slot by slot and given back where another
/// slot denied it, and still decides as the core's all-or-nothing step, field for field.
#[test]
#[cfg_attr(
    ratelab_missing_redis_cluster,
    ignore = "redis-server or redis-cli is not installed (Debian: apt-get install redis-server)"
)]
fn on_a_cluster_a_request_across_slots_is_all_or_nothing_for_every_family() {
    let Some(cluster) = RedisCluster::start("every_family_across_slots") else {
        return;
    };
    let rt = runtime();
    let ms = |v: u64| Nanos::from_millis(v);
    // Limits a request meets together, the token bucket's the tightest now and then.
    let policies = [
        Policy::FixedWindow(FixedWindow::new(5, ms(700)).unwrap()),
        Policy::FirstHitWindow(FirstHitWindow::new(6, ms(500)).unwrap()),
        Policy::SlidingWindow(SlidingWindow::new(4, ms(600)).unwrap()),
        Policy::SteppedBucket(SteppedBucket::new(5, 2, ms(300)).unwrap()),
        Policy::TokenBucket(TokenBucket::per_second(3, 5).unwrap()),
    ];
    let options = RedisOptions {
        prefix: "unused:".into(),
        timeout: TIMEOUT,
    };
    let bucket = TokenBucket::per_second(1, 1).unwrap();
    let base = rt
        .block_on(RedisStore::connect_cluster(
            &cluster.seeds(),
            bucket,
            options,
        ))
        .unwrap();
    let clients = |policies: &[Policy], prefix: &str| clients_of(&base, policies, prefix);
    let slots: std::collections::BTreeSet<u16> = (0..policies.len())
        .map(|i| ratelab_store::redis_conn::slot(format!("p{i}:across{i}").as_bytes()))
        .collect();
    assert!(slots.len() > 1, "the keys lie in several slots: {slots:?}");
    rt.block_on(every_family_at_once(
        &clients(&policies, "p"),
        &policies,
        ("p", "across"),
        (true, true),
    ));
    // And on generated limits of mixed families, two to six at once.
    let mut runner = TestRunner::new(Config {
        cases: 8,
        failure_persistence: None,
        ..Config::default()
    });
    let case = AtomicU64::new(0);
    let given_back = AtomicU64::new(0);
    runner
        .run(&(limits(), limits()), |(a, b)| {
            let policies: Vec<Policy> = a.into_iter().chain(b).collect();
            let n = case.fetch_add(1, Ordering::Relaxed);
            let prefix = format!("g{n}.");
            let clients = clients(&policies, &prefix);
            let refunded = rt.block_on(every_family_at_once(
                &clients,
                &policies,
                (&prefix, "across"),
                (false, false),
            ));
            given_back.fetch_add(u64::from(refunded), Ordering::Relaxed);
            Ok(())
        })
        .unwrap();
    // The generated limits may be loose enough never to deny: how often they did is shown.
    eprintln!(
        "generated mixes: {} requests given back in a slot that admitted them",
        given_back.load(Ordering::Relaxed)
    );
}

/// A stored value the script did not write (a field too many or too few, a space too many, a
/// count above the limit, nanoseconds of a second or more) is refused: the call fails as
/// corrupt and writes nothing, at that key or at the other key of the same request.
#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn a_state_the_script_did_not_write_is_refused_and_nothing_is_written() {
    let Some(server) = RedisServer::start("a_state_the_script_did_not_write") else {
        return;
    };
    let rt = runtime();
    let mut conn = rt.block_on(Conn::open(&server.url(), TIMEOUT)).unwrap();
    let script = redis::Script::new(&LIMITS_SCRIPT);
    let ms = Nanos::from_millis;
    let fixed = Policy::FixedWindow(FixedWindow::new(5, ms(1_000)).unwrap());
    let first = Policy::FirstHitWindow(FirstHitWindow::new(5, ms(1_000)).unwrap());
    let sliding = Policy::SlidingWindow(SlidingWindow::new(5, ms(1_000)).unwrap());
    let stepped = Policy::SteppedBucket(SteppedBucket::new(5, 1, ms(100)).unwrap());
    let bucket = Policy::TokenBucket(TokenBucket::per_second(5, 1).unwrap());
    let other = ScriptLimit::new(bucket).unwrap();
    for (i, (policy, bad)) in [
        (fixed, "1764500000 6"),
        (fixed, "1764500000  1"),
        (fixed, "1764500000 1 1"),
        (first, "1764500000 0 6"),
        (first, "1764500000 1000000000 1"),
        (sliding, "1764500 6 0"),
        (sliding, "1764500 0 6"),
        (sliding, "1764500 1"),
        (stepped, "6 1764500000 0"),
        (stepped, "1 1764500000 1000000000"),
        (bucket, "1764500000"),
        (bucket, "12345678901234567 0"),
    ]
    .into_iter()
    .enumerate()
    {
        let (key, beside) = (format!("bad{i}"), format!("beside{i}"));
        let limit = ScriptLimit::new(policy).unwrap();
        let parts = [(key.as_str(), &limit, 1), (beside.as_str(), &other, 1)];
        let (kept, written): (String, Option<String>) = rt.block_on(async {
            let _: () = redis::cmd("SET")
                .arg(&key)
                .arg(bad)
                .query_async(&mut conn)
                .await
                .unwrap();
            let now = Some(Nanos(EPOCH_NS as u64));
            let got = redis_limits::decide(&mut conn, &script, &parts, now).await;
            assert_eq!(
                got,
                Err(LimitError::Store(StoreError::Corrupt)),
                "{policy:?} {bad:?}"
            );
            let kept = redis::cmd("GET")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap();
            let written = redis::cmd("GET")
                .arg(&beside)
                .query_async(&mut conn)
                .await
                .unwrap();
            (kept, written)
        });
        assert_eq!((kept.as_str(), written), (bad, None), "{policy:?}");
    }
}

/// `refund.lua` on states written by hand: each family gives back only what is outstanding
/// of the request's spend, from a state that still holds it, and leaves the rest in place.
#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn the_refund_script_gives_back_only_what_is_outstanding() {
    let Some(server) = RedisServer::start("the_refund_script_gives_back") else {
        return;
    };
    let rt = runtime();
    let mut conn = rt.block_on(Conn::open(&server.url(), TIMEOUT)).unwrap();
    let script = redis::Script::new(&ratelab_store::redis_slots::REFUND_SCRIPT);
    // ((family, [a, b, c], cost, written, stored before), now (s, ns), stored after, given back)
    type Case = (
        &'static str,
        [u64; 3],
        u64,
        &'static str,
        Option<&'static str>,
    );
    type After = Option<&'static str>;
    let cases: [(Case, (u64, u64), After, i64); 22] = [
        // Fixed window: back in the request's window, nothing once it moved on or was lost.
        (
            ("fw", [5, 1_000_000_000, 0], 2, "7 3", Some("7 4")),
            (7, 0),
            Some("7 2"),
            2,
        ),
        (
            ("fw", [5, 1_000_000_000, 0], 2, "7 3", Some("8 1")),
            (8, 0),
            Some("8 1"),
            0,
        ),
        (
            ("fw", [5, 1_000_000_000, 0], 2, "7 3", None),
            (7, 0),
            None,
            0,
        ),
        // First hit: a window the request opened goes when it is empty again.
        (
            ("fh", [5, 10, 0], 1, "100 5 1", Some("100 5 1")),
            (101, 0),
            None,
            1,
        ),
        (
            ("fh", [5, 10, 0], 1, "100 5 2", Some("100 5 3")),
            (101, 0),
            Some("100 5 2"),
            1,
        ),
        (
            ("fh", [5, 10, 0], 1, "100 5 2", Some("120 0 1")),
            (121, 0),
            Some("120 0 1"),
            0,
        ),
        // Sliding counter: in its window's count, then in the next window's previous count.
        (
            ("sw", [5, 1_000_000_000, 0], 2, "7 3 1", Some("7 4 1")),
            (7, 0),
            Some("7 2 1"),
            2,
        ),
        (
            ("sw", [5, 1_000_000_000, 0], 2, "7 3 1", Some("8 1 3")),
            (8, 0),
            Some("8 1 1"),
            2,
        ),
        (
            ("sw", [5, 1_000_000_000, 0], 2, "7 3 1", Some("9 1 0")),
            (9, 0),
            Some("9 1 0"),
            0,
        ),
        // Stepped bucket (5 tokens, 2 a second): back only from the state the request wrote;
        // nothing once another request decided on it, or its steps moved the anchor.
        (
            ("sb", [5, 2, 1_000_000_000], 2, "1 100 0", Some("1 100 0")),
            (100, 0),
            Some("3 100 0"),
            2,
        ),
        (
            ("sb", [5, 2, 1_000_000_000], 2, "1 100 0", Some("0 100 0")),
            (100, 0),
            Some("0 100 0"),
            0,
        ),
        (
            ("sb", [5, 2, 1_000_000_000], 2, "2 100 0", Some("4 101 0")),
            (101, 0),
            Some("4 101 0"),
            0,
        ),
        // Token bucket (capacity 5, 1 a second): the TAT moves back by what is still ahead
        // of now, and only from a state at least as late as the request's write.
        (
            ("tb", [5, 1, 1_000_000_000], 2, "103 0", Some("104 0")),
            (102, 500_000_000),
            Some("103 500000000"),
            500_000_000,
        ),
        (
            ("tb", [5, 1, 1_000_000_000], 2, "103 0", Some("104 0")),
            (100, 0),
            Some("102 0"),
            2_000_000_000,
        ),
        (
            ("tb", [5, 1, 1_000_000_000], 2, "103 0", Some("102 0")),
            (101, 0),
            Some("102 0"),
            0,
        ),
        // A bucket held at capacity: never given back past it.
        (
            ("sb", [5, 2, 1_000_000_000], 2, "4 100 0", Some("4 100 0")),
            (100, 0),
            Some("5 100 0"),
            1,
        ),
        // A request that spent nothing gets nothing back.
        (
            ("sb", [5, 2, 1_000_000_000], 0, "3 100 0", Some("3 100 0")),
            (100, 0),
            Some("3 100 0"),
            0,
        ),
        // A TAT earlier than the request's write within the same second: nothing.
        (
            (
                "tb",
                [5, 1, 1_000_000_000],
                2,
                "103 500000000",
                Some("103 0"),
            ),
            (100, 0),
            Some("103 0"),
            0,
        ),
        // A state no script wrote gives nothing back and stays as it is: a TAT's fraction
        // of a second out of range, a window's fields not a window's, a count not a number.
        (
            (
                "tb",
                [5, 1, 1_000_000_000],
                2,
                "103 0",
                Some("104 1000000000"),
            ),
            (100, 0),
            Some("104 1000000000"),
            0,
        ),
        (
            ("fw", [5, 1_000_000_000, 0], 2, "7 3", Some("not a state")),
            (7, 0),
            Some("not a state"),
            0,
        ),
        (
            ("sw", [5, 1_000_000_000, 0], 2, "7 3 1", Some("7 4")),
            (7, 0),
            Some("7 4"),
            0,
        ),
        (
            ("fh", [5, 10, 0], 1, "100 5 2", Some("100 5 x")),
            (101, 0),
            Some("100 5 x"),
            0,
        ),
    ];
    rt.block_on(async {
        for (i, ((family, params, cost, written, before), (sec, ns), after, back)) in
            cases.into_iter().enumerate()
        {
            let key = format!("refund:{i}");
            if let Some(b) = before {
                let _: () = redis::cmd("SET")
                    .arg(&key)
                    .arg(b)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
            }
            let mut call = script.prepare_invoke();
            call.key(&key).arg(sec).arg(ns).arg(family).arg(&params[..]);
            call.arg(cost).arg(written);
            let got: Vec<i64> = call.invoke_async(&mut conn).await.unwrap();
            let now: Option<String> = redis::cmd("GET")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap();
            assert_eq!(
                (got, now.as_deref()),
                (vec![back], after),
                "case {i}: {family} wrote {written:?}, held {before:?}"
            );
        }
    });
}

/// After Redis has been down a while and restarts empty, a window's first call is decided
/// (as a token bucket's, `redis::after_a_restart_the_first_call_is_decided`): behind the
/// server's breaker, one failed probe is another cooldown of fail-open answers.
#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn after_a_restart_a_windows_first_call_is_decided() {
    let Some(mut server) = RedisServer::start("after_a_restart_a_windows_first_call") else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let options = RedisOptions {
            prefix: "unused:".into(),
            timeout: Duration::from_millis(50),
        };
        let bucket = TokenBucket::per_second(1, 1).unwrap();
        let base = RedisStore::connect(&server.url(), bucket, options)
            .await
            .unwrap();
        let window =
            Policy::SlidingWindow(SlidingWindow::new(5, Nanos::from_millis(1_000)).unwrap());
        let client = RedisPolicy::new(&base, window, "restart:").unwrap();
        let key = Key::new("k").unwrap();
        client.apply(&key, None, 1).await.expect("decided");
        server.kill();
        assert!(
            client.apply(&key, None, 1).await.is_err(),
            "killed: no decision"
        );
        // Down long enough for a connection's reconnect attempts to give up.
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        server.restart();
        tokio::time::sleep(Duration::from_millis(150)).await;
        let d = client.apply(&key, None, 1).await;
        assert!(d.is_ok(), "the first call after the restart: {d:?}");
    });
}
