//! Rules that span fields, checked once after parsing: one function per section of a scenario
//! file, in the order [`validate`] calls them (the first error found is the one reported).

use crate::checkers::Needs;
use crate::locate::PathSeg;
use crate::scenario::*;
use ratelab_core::Policy;
use ratelab_store::{Key, Path as StorePath, TimeSource};
use std::path::Path;

type Located<'a> = &'a dyn Fn(Vec<PathSeg>, String) -> ScenarioError;

fn key(k: &str) -> PathSeg {
    PathSeg::Key(k.into())
}

pub(crate) fn validate(
    spec: ScenarioSpec,
    file: &Path,
    name: String,
    located: Located<'_>,
) -> Result<Scenario, ScenarioError> {
    check_description(&spec, located)?;
    let policy = check_policy(&spec, located)?;
    check_gateway(&spec, located)?;
    check_network(&spec, located)?;
    let scheduled = check_clients(&spec, &policy, located)?;
    check_faults(&spec, located)?;
    check_cleanup_job(&spec, located)?;
    check_outages(&spec, located)?;
    check_store(&spec, &policy, located)?;
    check_expect(&spec, located)?;

    let path = match spec.store.path {
        PathName::Naive => StorePath::Naive,
        PathName::Atomic => StorePath::Atomic,
    };
    let time_source = match spec.store.time_source {
        TimeSourceName::Store => TimeSource::Store,
        TimeSourceName::Gateway => TimeSource::Caller,
    };
    Ok(Scenario {
        file: file.to_owned(),
        name,
        spec,
        policy,
        path,
        time_source,
        scheduled_requests: scheduled,
    })
}

/// The description: one line.
fn check_description(spec: &ScenarioSpec, located: Located<'_>) -> Result<(), ScenarioError> {
    if spec.description.trim().is_empty()
        || spec.description.len() > 300
        || spec.description.contains('\n')
    {
        return Err(located(
            vec![key("description")],
            "expected one non-empty line of at most 300 bytes".into(),
        ));
    }
    Ok(())
}

/// The policy: exactly its algorithm's fields, each in range.
fn check_policy(spec: &ScenarioSpec, located: Located<'_>) -> Result<Policy, ScenarioError> {
    spec.policy.build().map_err(|e| {
        let mut at = vec![key("policy")];
        at.extend(e.field.map(key));
        located(at, e.message)
    })
}

/// The gateway: its edge limit, its guard, its denial cache.
fn check_gateway(spec: &ScenarioSpec, located: Located<'_>) -> Result<(), ScenarioError> {
    if let Some(e) = spec.gateway.edge {
        ratelab_core::TokenBucket::per_second(e.capacity.get(), e.refill_per_sec.get())
            .map_err(|err| located(vec![key("gateway"), key("edge")], err.to_string()))?;
    }
    if let Some(g) = &spec.gateway.guard {
        ratelab_gateway::bloom::sizing(g.valid_keys.count.get(), g.false_positive_rate.get())
            .map_err(|err| located(vec![key("gateway"), key("guard")], err))?;
    }
    if spec.gateway.denial_cache.is_some() && spec.store.path == PathName::Naive {
        return Err(located(
            vec![key("gateway"), key("denial_cache")],
            "the denial cache needs the atomic store path (on the naive path a lost update \
             can move a bucket's state earlier, so a store denial holds for no time at all)"
                .into(),
        ));
    }
    Ok(())
}

/// The network: its latency range.
fn check_network(spec: &ScenarioSpec, located: Located<'_>) -> Result<(), ScenarioError> {
    let lat = spec.network.latency;
    if lat.min_us > lat.max_us {
        return Err(located(
            vec![key("network"), key("latency"), key("max_us")],
            format!(
                "max_us {} is below min_us {}",
                lat.max_us.get(),
                lat.min_us.get()
            ),
        ));
    }
    Ok(())
}

/// The client groups, each on its keys, in its time and on a gateway that exists; what they
/// schedule in all, within the bound.
fn check_clients(
    spec: &ScenarioSpec,
    policy: &Policy,
    located: Located<'_>,
) -> Result<u64, ScenarioError> {
    let (duration, gateways) = (spec.duration_ms.get(), spec.gateways.get());
    if spec.clients.is_empty() || spec.clients.len() > MAX_CLIENT_GROUPS {
        return Err(located(
            vec![key("clients")],
            format!(
                "expected 1 to {MAX_CLIENT_GROUPS} client groups, found {}",
                spec.clients.len()
            ),
        ));
    }
    let mut scheduled = 0u64;
    for (i, c) in spec.clients.iter().enumerate() {
        let at = |f: &str| vec![key("clients"), PathSeg::Index(i), key(f)];
        match (&c.key, &c.keys) {
            (Some(_), Some(_)) | (None, None) => {
                return Err(located(
                    vec![key("clients"), PathSeg::Index(i)],
                    "give exactly one of `key` or `keys`".into(),
                ));
            }
            (Some(k), None) => {
                Key::new(k).map_err(|e| located(at("key"), e.to_string()))?;
            }
            (None, Some(ks)) => {
                let longest = format!("{}:{}", ks.prefix, ks.count.get() - 1);
                Key::new(&longest).map_err(|e| located(at("keys"), e.to_string()))?;
            }
        }
        if c.retry_at_retry_after && c.self_throttle {
            return Err(located(
                at("retry_at_retry_after"),
                "a client that retries exactly at Retry-After cannot also pace itself from the \
                 RateLimit field (`self_throttle`), which may hold the retry past its time: \
                 choose one"
                    .into(),
            ));
        }
        let limit = ratelab_core::Algorithm::quota(policy).limit;
        if c.cost.get() > limit {
            return Err(located(
                at("cost"),
                format!(
                    "cost {} can never be admitted: the policy admits at most {limit} at once",
                    c.cost.get()
                ),
            ));
        }
        let start = c.start_ms.get();
        let stop = c.stop_ms.map_or(duration, Bounded::get);
        if stop > duration {
            return Err(located(
                at("stop_ms"),
                format!("{stop} is after the run's duration_ms {duration}"),
            ));
        }
        if start >= stop {
            return Err(located(
                at("start_ms"),
                format!("start_ms {start} is not before stop_ms {stop}"),
            ));
        }
        if let GatewayChoice::Fixed(g) = c.gateway
            && u64::from(g) >= gateways
        {
            return Err(located(
                at("gateway"),
                format!(
                    "gateway {g} does not exist: the cluster has gateways 0 to {}",
                    gateways - 1
                ),
            ));
        }
        let per_client = scheduled_by(c, i, (start, stop), located)?;
        scheduled = scheduled.saturating_add(per_client.saturating_mul(c.count.get()));
    }
    if scheduled > MAX_REQUESTS {
        return Err(located(
            vec![key("clients")],
            format!(
                "the workload schedules {scheduled} requests per seed: expected at most {MAX_REQUESTS}"
            ),
        ));
    }
    Ok(scheduled)
}

/// The requests one client of group `i` schedules from `start` to `stop`, its arrival's own
/// times checked.
fn scheduled_by(
    c: &ClientSpec,
    i: usize,
    (start, stop): (u64, u64),
    located: Located<'_>,
) -> Result<u64, ScenarioError> {
    Ok(match &c.arrival {
        ArrivalSpec::Constant(r) | ArrivalSpec::Poisson(r) => {
            r.rate_per_sec.get().saturating_mul(stop - start) / 1000
        }
        ArrivalSpec::Burst(b) => {
            let at_ms = b.at_ms.get();
            if at_ms < start || at_ms >= stop {
                return Err(located(
                    vec![
                        key("clients"),
                        PathSeg::Index(i),
                        key("arrival"),
                        key("at_ms"),
                    ],
                    format!(
                        "burst at {at_ms} ms is outside the group's sending time [{start}, {stop})"
                    ),
                ));
            }
            b.requests.get()
        }
        ArrivalSpec::BoundaryBursts(bb) => {
            let every = bb.every_ms.get();
            // Each half of a burst must fit between two boundaries: the first starts
            // `before_ms` ahead of a boundary, and the first boundary is `every_ms` in.
            for (field, v) in [("before_ms", bb.before_ms), ("after_ms", bb.after_ms)] {
                let v = v.get();
                if v > every {
                    return Err(located(
                        vec![
                            key("clients"),
                            PathSeg::Index(i),
                            key("arrival"),
                            key(field),
                        ],
                        format!("{field} {v} is longer than every_ms {every}"),
                    ));
                }
            }
            let boundaries = (stop - 1) / every - start / every;
            boundaries.saturating_mul(2 * bb.requests.get())
        }
        ArrivalSpec::Times(t) => {
            let times = &t.times_us;
            let (lo, hi) = (start.saturating_mul(1000), stop.saturating_mul(1000));
            if let Some((j, &t)) = times
                .iter()
                .enumerate()
                .find(|(_, t)| **t < lo || **t >= hi)
            {
                return Err(located(
                    vec![
                        key("clients"),
                        PathSeg::Index(i),
                        key("arrival"),
                        key("times_us"),
                        PathSeg::Index(j),
                    ],
                    format!("{t} µs is outside the group's sending time [{lo}, {hi}) µs"),
                ));
            }
            times.len() as u64
        }
    })
}

/// The faults: how many, and each by its kind's own checks.
fn check_faults(spec: &ScenarioSpec, located: Located<'_>) -> Result<(), ScenarioError> {
    let gateways = spec.gateways.get();
    if spec.faults.len() > MAX_FAULTS {
        return Err(located(
            vec![key("faults")],
            format!("expected at most {MAX_FAULTS} faults"),
        ));
    }
    let cx = crate::faults::Check {
        gateways,
        replica: spec.store.replica.is_some(),
    };
    for (i, f) in spec.faults.iter().enumerate() {
        if let Err((inner, message)) = f.as_kind().check(&cx) {
            let mut path = vec![key("faults"), PathSeg::Index(i)];
            path.extend(inner);
            return Err(located(path, message));
        }
    }
    Ok(())
}

/// The cleanup job: it renews its lease in time.
fn check_cleanup_job(spec: &ScenarioSpec, located: Located<'_>) -> Result<(), ScenarioError> {
    if let Some(job) = &spec.cleanup_job
        && job.period_ms.get() >= job.lease_ms.get()
    {
        return Err(located(
            vec![key("cleanup_job"), key("period_ms")],
            format!(
                "period_ms {} is not below lease_ms {}: the leader would lose its lease between \
                 renewals",
                job.period_ms.get(),
                job.lease_ms.get()
            ),
        ));
    }
    Ok(())
}

/// The store is down once at a time: a restart or a promotion while it is already up again
/// would start a second store.
fn check_outages(spec: &ScenarioSpec, located: Located<'_>) -> Result<(), ScenarioError> {
    let mut outages: Vec<(u64, u64, usize)> = spec
        .faults
        .iter()
        .enumerate()
        .filter(|(_, f)| f.outage().is_some())
        .filter_map(|(i, f)| f.window_ms().map(|(from, until)| (from, until, i)))
        .collect();
    outages.sort_unstable();
    if let Some(w) = outages.windows(2).find(|w| w[1].0 <= w[0].1) {
        let (first, second) = (&spec.faults[w[0].2], &spec.faults[w[1].2]);
        return Err(located(
            vec![key("faults"), PathSeg::Index(w[1].2), key("at_ms")],
            format!(
                "this {} begins at {} ms, while the store is still down from the {} at \
                 faults[{}] (until {} ms): expected store outages that do not overlap",
                second.kind().name(),
                w[1].0,
                first.kind().name(),
                w[0].2,
                w[0].1
            ),
        ));
    }
    Ok(())
}

/// The store: its replica's lag range; with the Redis scripts as its engine, every layer's
/// limit within the script's exact range and no planted bug of the core's transition.
fn check_store(
    spec: &ScenarioSpec,
    policy: &Policy,
    located: Located<'_>,
) -> Result<(), ScenarioError> {
    if let Some(r) = spec.store.replica
        && r.lag.min_us > r.lag.max_us
    {
        return Err(located(
            vec![key("store"), key("replica"), key("lag"), key("max_us")],
            "max_us is below min_us".into(),
        ));
    }
    if spec.store.engine == StoreEngine::RedisScripts {
        let engine = || vec![key("store"), key("engine")];
        let edge = spec.gateway.edge.and_then(|e| {
            ratelab_core::TokenBucket::per_second(e.capacity.get(), e.refill_per_sec.get())
                .ok()
                .map(Policy::TokenBucket)
        });
        for (what, p) in [("the policy", Some(*policy)), ("the edge limit", edge)] {
            let Some(p) = p else { continue };
            ratelab_store::script::ScriptLimit::new(p).map_err(|m| {
                located(
                    engine(),
                    format!("{what} is beyond the Redis script's range: {m}"),
                )
            })?;
        }
        if let Some(bug) = spec.planted_bug.filter(|b| b.in_script()) {
            let name = serde_json::to_string(&bug).unwrap_or_default();
            return Err(located(
                engine(),
                format!(
                    "planted bug {name} is in the core's transition, which redis_scripts \
                     replaces: plant it with the core engine"
                ),
            ));
        }
    }
    Ok(())
}

/// The expectations: bounds that apply to this scenario, keys that are keys, the explorer's
/// signature, the planted bug.
fn check_expect(spec: &ScenarioSpec, located: Located<'_>) -> Result<(), ScenarioError> {
    let e = &spec.expect;
    for (name, b) in &e.bounds {
        let Some(f) = crate::checkers::figure(name) else {
            continue;
        };
        if f.invariant && b.at_most.is_some() {
            return Err(located(
                vec![key("expect"), key(&format!("{name}_at_most"))],
                format!("{name} is held to 0 on every run: only a lower bound may be given"),
            ));
        }
        let missing = match f.needs {
            Needs::Edge if spec.gateway.edge.is_none() => "a `gateway.edge` limit",
            Needs::Job if spec.cleanup_job.is_none() => "a `cleanup_job`",
            Needs::FixedWindow if spec.policy.algorithm != AlgorithmName::FixedWindow => {
                "a `fixed_window` policy"
            }
            _ => continue,
        };
        let side = if b.at_most.is_some() {
            "at_most"
        } else {
            "at_least"
        };
        return Err(located(
            vec![key("expect"), key(&format!("{name}_{side}"))],
            format!("this bound needs {missing}"),
        ));
    }
    if e.keys.len() > MAX_EXPECTED_KEYS {
        return Err(located(
            vec![key("expect"), key("keys")],
            format!(
                "{} keys named: expected at most {MAX_EXPECTED_KEYS}",
                e.keys.len()
            ),
        ));
    }
    for k in e.keys.keys() {
        Key::new(k)
            .map_err(|err| located(vec![key("expect"), key("keys"), key(k)], err.to_string()))?;
    }
    if let Some(v) = &spec.expect.explorer {
        check_explorer_signature(v, located)?;
    }
    if let Some(bug) = spec.planted_bug {
        check_planted(spec, bug, located)?;
    }
    Ok(())
}

/// Refuses a planted bug the scenario's limiter has no place for.
fn check_planted(
    spec: &ScenarioSpec,
    bug: PlantedBug,
    located: Located<'_>,
) -> Result<(), ScenarioError> {
    use crate::planted::Needs;
    let atomic = spec.store.path == PathName::Atomic;
    let algorithm = spec.policy.algorithm;
    let fenced_job = spec.cleanup_job.is_some_and(|j| j.fencing);
    let (ok, needed) = match bug.needs() {
        Needs::Atomic => (atomic, "the atomic store path"),
        Needs::AtomicPolicy(alg) => (
            atomic && algorithm == alg,
            &*format!("the atomic store path and a {} policy", alg.name()),
        ),
        Needs::FencedJob => (fenced_job, "a `cleanup_job` with fencing"),
    };
    if ok {
        return Ok(());
    }
    let name = serde_json::to_string(&bug).unwrap_or_default();
    Err(located(
        vec![key("planted_bug")],
        format!("planted bug {name} needs {needed}"),
    ))
}

/// Refuses an `expect.explorer` that is neither `pass` nor a safety or liveness signature.
fn check_explorer_signature(v: &str, located: Located<'_>) -> Result<(), ScenarioError> {
    let ok = v == "pass"
        || v.split_once('/').is_some_and(|(class, checker)| {
            ["safety", "liveness"].contains(&class) && !checker.is_empty()
        });
    if !ok {
        return Err(located(
            vec![key("expect"), key("explorer")],
            format!(
                "{v:?}: expected \"pass\" or \"class/checker\" with class safety or liveness \
                 (a panic or a nondeterministic run is pinned by a scenario without it, \
                 which fails until the bug is fixed)"
            ),
        ));
    }
    Ok(())
}
