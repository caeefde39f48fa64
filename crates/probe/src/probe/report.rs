//! A probe's report: the figures as text for a terminal, and as JSON.

use super::{ProbeRun, policy};
use ratelab_check::history::{Answer, History, Layers, RequestRecord};
use ratelab_check::probe::{Conclusion, Outcome};
use ratelab_check::timeline::{self, Frame};
use ratelab_core::Nanos;
use serde_json::{Value, json};
use std::fmt::Write as _;

/// The report as text; `target` names what was probed.
pub fn text(run: &ProbeRun, target: &str) -> String {
    let v = &run.verdict;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "probe {target}, held to {}: {} requests in {:.1} s, checked in {:.3} s",
        policy::describe(&run.claim),
        v.figure("requests"),
        run.seconds,
        run.check_seconds
    );
    let mut steps = crate::table::numeric(["clients", "requests", "admitted", "seconds"], 0);
    for st in &run.steps {
        steps.add_row([
            st.clients.to_string(),
            st.requests.to_string(),
            st.admitted.to_string(),
            format!("{:.2}", st.seconds),
        ]);
    }
    let _ = writeln!(s, "{steps}");
    let _ = writeln!(
        s,
        "admitted {}, denied {}, without a decision {}",
        v.figure("admitted"),
        v.figure("denied"),
        v.figure("failed")
    );
    let instances = per_instance(run);
    if instances.len() > 1 {
        let each: Vec<String> = instances
            .iter()
            .map(|(i, c)| {
                format!(
                    "{i}: {} requests, {} admitted, {} denied, {} without a decision",
                    c.requests, c.admitted, c.denied, c.failed
                )
            })
            .collect();
        let _ = writeln!(s, "instances: {}", each.join("; "));
    }
    let e = v.envelope().cloned().unwrap_or_default();
    let _ = write!(
        s,
        "envelope: the claim allows {} over these keys and spans; max excess {}, total excess {}",
        v.figure("allowance"),
        e.max_excess,
        e.total_excess
    );
    if let Some(w) = e.witness.as_ref().filter(|_| e.max_excess > 0) {
        let _ = write!(
            s,
            " (key {:?}: {} admitted in [{}, {}] against {}; requests {:?})",
            w.key, w.admitted, w.from, w.to, w.bound, w.ids
        );
    }
    s.push('\n');
    match v.linearizable() {
        Some(l) => {
            let _ = writeln!(
                s,
                "linearizable: {} keys, {} violations, {} unknown (search budget spent)",
                l.keys,
                l.violations.len(),
                l.unknown.len()
            );
        }
        None => s.push_str("linearizable: not checked (the claim's answers depend on window boundaries a probe cannot see)\n"),
    }
    let _ = writeln!(s, "phantom denials: {}", v.phantom_denials().len());
    let spoken: Vec<String> = dialects(run)
        .iter()
        .map(|(d, n)| format!("{d} {n}"))
        .collect();
    let _ = writeln!(
        s,
        "fields: {} answers carried fields{}, {} contradictions",
        v.figure("fields_checked"),
        if spoken.is_empty() {
            String::new()
        } else {
            format!(" ({})", spoken.join(", "))
        },
        v.field_violations().len()
    );
    let r = v.retry_after();
    let _ = write!(
        s,
        "retry-after: {} probes, {} admitted after waiting exactly the time announced",
        r.probes, r.admitted
    );
    if !run.retry_skipped.is_empty() {
        let _ = write!(s, "; skipped: {}", run.retry_skipped.join("; "));
    }
    s.push('\n');
    let failures = v.failures();
    if failures.is_empty() && v.unknown() > 0 {
        let _ = writeln!(
            s,
            "UNKNOWN: no check failed, but the linearizability search ran out of its budget on {} keys; raise it with --budget",
            v.unknown()
        );
    } else if failures.is_empty() {
        s.push_str("PASS: every check held\n");
    } else {
        let _ = writeln!(s, "FAIL: {} failures", failures.len());
        for f in failures {
            let _ = writeln!(s, "  {f}");
        }
    }
    s
}

/// What one instance of the limiter answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InstanceCounts {
    /// Requests sent to it.
    pub requests: u64,
    /// Admitted.
    pub admitted: u64,
    /// Denied.
    pub denied: u64,
    /// Without a decision.
    pub failed: u64,
}

/// The requests each instance answered, by instance.
pub fn per_instance(run: &ProbeRun) -> std::collections::BTreeMap<u32, InstanceCounts> {
    let mut out = std::collections::BTreeMap::<u32, InstanceCounts>::new();
    for o in &run.history.observations {
        let c = out.entry(o.instance).or_default();
        c.requests += 1;
        match o.outcome {
            Outcome::Allowed => c.admitted += 1,
            Outcome::Denied => c.denied += 1,
            Outcome::Failed(_) => c.failed += 1,
        }
    }
    out
}

/// How many answers spoke each dialect of rate-limit fields.
pub fn dialects(run: &ProbeRun) -> std::collections::BTreeMap<&'static str, u64> {
    let mut out = std::collections::BTreeMap::new();
    for o in &run.history.observations {
        if let Some(d) = o.fields.dialect {
            *out.entry(d.name()).or_default() += 1;
        }
    }
    out
}

/// The report as JSON.
pub fn json(run: &ProbeRun, target: &str) -> Value {
    let v = &run.verdict;
    let e = v.envelope().cloned().unwrap_or_default();
    let witness = e.witness.as_ref().map(|w| {
        json!({"key": w.key, "from_ns": w.from.as_u64(), "to_ns": w.to.as_u64(),
               "admitted": w.admitted, "bound": w.bound, "ids": w.ids})
    });
    let lin = v.linearizable().map(|l| {
        json!({
            "keys": l.keys,
            "violations": l.violations.iter().map(|(k, x)| json!({"key": k, "id": x.id, "detail": x.detail, "explained": x.explained})).collect::<Vec<_>>(),
            "unknown": l.unknown,
        })
    });
    json!({
        "target": target,
        "policy": policy::describe(&run.claim),
        "seconds": run.seconds,
        "check_seconds": run.check_seconds,
        "steps": run.steps.iter().map(|s| json!({"clients": s.clients, "requests": s.requests, "admitted": s.admitted, "seconds": s.seconds})).collect::<Vec<_>>(),
        "requests": v.figure("requests"),
        "admitted": v.figure("admitted"),
        "denied": v.figure("denied"),
        "failed": v.figure("failed"),
        "instances": per_instance(run).iter().map(|(i, c)| json!({"instance": i, "requests": c.requests, "admitted": c.admitted, "denied": c.denied, "failed": c.failed})).collect::<Vec<_>>(),
        "envelope": {"allowance": v.figure("allowance"), "max_excess": e.max_excess, "total_excess": e.total_excess, "witness": witness},
        "linearizable": lin,
        "phantom_denials": v.phantom_denials().iter().map(|(k, id)| json!({"key": k, "id": id})).collect::<Vec<_>>(),
        "fields": {"checked": v.figure("fields_checked"), "dialects": dialects(run), "violations": v.field_violations().iter().map(|f| json!({"key": f.key, "ids": f.ids, "what": f.what})).collect::<Vec<_>>()},
        "retry_after": {"probes": v.retry_after().probes, "admitted": v.retry_after().admitted, "refused": v.retry_after().refused, "skipped": run.retry_skipped},
        "checks": v.checks(),
        "failures": v.failures(),
        "pass": v.conclusion() == Conclusion::Passed,
        "verdict": v.conclusion().name(),
    })
}

/// The probe's requests as a history the timeline draws: one row per client, each answer
/// placed at its arrival (a probe does not know when the limiter decided).
pub fn history(run: &ProbeRun) -> History {
    let mut h = History::new(false);
    let mut rows = std::collections::BTreeMap::new();
    for o in &run.history.observations {
        let next = rows.len() as u32;
        let row = *rows.entry(o.client).or_insert(next);
        let answer = match &o.outcome {
            Outcome::Allowed => Answer::Allowed {
                decided_at: o.answered,
                remaining: o.fields.remaining.unwrap_or(0),
            },
            Outcome::Denied => Answer::Denied {
                decided_at: o.answered,
                retry_after: o.fields.retry_after.unwrap_or(Nanos::ZERO),
            },
            Outcome::Failed(_) => Answer::Error(ratelab_check::history::ErrorKind::Unavailable),
        };
        h.requests.push(RequestRecord {
            id: o.id,
            client: o.client,
            group: 0,
            key: o.key.clone(),
            peer: std::net::IpAddr::from([127, 0, 0, 1]),
            gateway: row,
            cost: o.cost,
            sent_at: o.sent,
            answer: Some((o.answered, answer)),
            layers: Layers {
                edge: None,
                per_key: Some(answer),
            },
            extra_answers: 0,
            read_at: None,
            written_at: None,
            store_calls: [0; 2],
            store_errored: [0; 2],
            store_full: [0; 2],
            applied_seq: None,
        });
    }
    h
}

/// The key a probe's picture shows: the envelope's witness, else the first key no order
/// explained, else the busiest.
pub fn default_key(run: &ProbeRun) -> Option<String> {
    let v = &run.verdict;
    if let Some(w) = v
        .envelope()
        .and_then(|e| e.witness.as_ref().filter(|_| e.max_excess > 0))
    {
        return Some(w.key.clone());
    }
    if let Some(k) = v.linearizable().and_then(|l| l.violations.keys().next()) {
        return Some(k.clone());
    }
    let mut counts = std::collections::BTreeMap::<&str, u64>::new();
    for o in &run.history.observations {
        *counts.entry(&o.key).or_default() += 1;
    }
    counts
        .into_iter()
        .max_by_key(|&(k, n)| (n, std::cmp::Reverse(k)))
        .map(|(k, _)| k.to_owned())
}

/// The picture of `key`'s requests in a probe, outlining the request a checker names.
pub fn timeline_html(run: &ProbeRun, target: &str, key: &str) -> String {
    let h = history(run);
    let rows = h
        .requests
        .iter()
        .map(|r| r.gateway)
        .max()
        .map_or(1, |g| g as usize + 1);
    let v = &run.verdict;
    let violation = v
        .envelope()
        .filter(|e| e.max_excess > 0)
        .and_then(|e| e.witness.as_ref())
        .filter(|w| w.key == key)
        .map(|w| {
            (
                w.from.as_u64() as f64 / 1e6,
                w.to.as_u64() as f64 / 1e6,
                w.admitted,
                w.bound,
            )
        });
    let mark = v
        .linearizable()
        .and_then(|l| l.violations.get(key))
        .map(|x| x.id);
    let frame = Frame {
        title: format!("probe {target} — key {key}"),
        description: format!(
            "held to {}; bars from send to answer (a probe does not see when the limiter decided)",
            policy::describe(&run.claim)
        ),
        row_label: "client",
        rows,
        duration_ms: 0.0,
        faults: Vec::new(),
        violation,
        bound: run.claim.envelope(),
    };
    timeline::draw(&frame, &h, key, mark)
}
