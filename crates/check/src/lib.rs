//! # ratelab-check
//!
//! The record of a run and the checkers that judge it, apart from everything that produces
//! it: no runtime and no simulator (beyond `ratelab-core`, its one workspace dependency is
//! `ratelab-store`, for the failure reasons a layer reports). The madsim cluster, the
//! real-Redis ladder and the tests all record into a [`History`] and call the same checkers.
//!
//! A checker reads only the history and recomputes its verdict with its own specification:
//! it never calls the code it checks or reads that code's bookkeeping. Each reports numbers
//! (how much, where, which requests witness it), not only pass or fail, and each has unit
//! tests that feed it a known-bad history and require it to fail.
//!
//! | module | invariant |
//! |---|---|
//! | [`checker`] | (what a checker is, its figures, verdict and registry: no invariant of its own) |
//! | [`envelope`] | admitted cost in any interval Δt ≤ B + R·Δt, per key and per client address |
//! | [`window`] | the most admitted in any interval of one window length |
//! | [`answers`] | every request answered exactly once |
//! | [`liveness`] | after faults heal, a client within the rate is admitted |
//! | [`recovery`] | after faults heal, every request is decided (no fail-open, error or bypass: a breaker that never closes, a limiter that stopped deciding) |
//! | [`cached`] | every 429 from a gateway's denial cache is covered by a denial the store gave it |
//! | [`cleanup`] | the cleanup job deletes no live bucket; one leader at a time; its liveness |
//! | [`family`] | the answers are explained by a real-time order of requests under the limiter family's sequential specification (token bucket, and the leaky bucket as its exact alias; fixed window aligned or first-hit, sliding log, sliding-window counter): one search and one replay for every family |
//! | [`linearizable`] | what that check reads and says (operations, verdicts), and the token bucket's entry points |
//! | [`fail_reasons`] | every fail-open, error or store-full answer has the failure it names behind it (a timeout its deadline, an error a store error or a fault on its path, an open breaker the failures that open it, store-full the store's refusal) |
//! | [`arrivals`] | a Poisson sender's realised gaps are exponential (Kolmogorov–Smirnov) |
//! | [`probe`] | a limiter seen only from outside (a probe's history) against a claimed policy, by the checks in [`probe::CHECKS`]: decisions, envelope over spans, black-box linearizability, fields, Retry-After honesty |
//!
//! Beside the checkers, [`percentile`] is the one definition of a percentile (the nearest
//! rank) for every latency figure ratelab reports, and [`timeline`] draws a history as a
//! self-contained HTML page (a simulated run's and a probe's alike).
//!
//! [`checker`] is what a checker is for the simulator and the probe alike: one trait
//! ([`checker::Checker`]) that says when it applies, measures its own figures (carried by
//! name, never as a report's fields) and judges, and one [`checker::Registry`] type whose
//! loops (which apply, their figures, the bounds on them, failures, undecided keys) are
//! written once. The simulator's registry is `ratelab_sim::checkers::CHECKERS` (over a
//! simulated run: a checker there is one file and one line, usually calling a module from
//! here); the probe's is [`probe::CHECKS`] (over a black-box history: a file under `probe/`
//! and one line).
//!
//! A new checker is a module here with a function from history records to a report struct,
//! and unit tests with a history it must reject; the simulator's report and the real runs
//! call it.
#![warn(missing_docs)]

pub mod answers;
pub mod arrivals;
pub mod cached;
pub mod checker;
pub mod cleanup;
pub mod envelope;
pub mod fail_reasons;
pub mod family;
pub mod history;
pub mod linearizable;
pub mod liveness;
pub mod percentile;
pub mod probe;
pub mod recovery;
pub mod timeline;
pub mod window;

pub use envelope::{Admission, Envelope, EnvelopeReport, Witness};
pub use history::History;

#[cfg(test)]
pub(crate) mod testing {
    use crate::envelope::Admission;
    use crate::history::{Answer, Layers, RequestRecord};
    use ratelab_core::Nanos;
    use std::collections::BTreeMap;

    /// Admissions of cost 1 on key `k` at `times_ms`, ids in order.
    pub fn adm(times_ms: &[u64]) -> BTreeMap<&'static str, Vec<Admission>> {
        let v = times_ms
            .iter()
            .enumerate()
            .map(|(i, &t)| Admission {
                at: Nanos::from_millis(t),
                id: i as u64,
                cost: 1,
            })
            .collect();
        BTreeMap::from([("k", v)])
    }

    /// A request on key `k` sent at `id` seconds, answered then (or not).
    pub fn record(id: u64, answer: Option<Answer>, extra: u32) -> RequestRecord {
        RequestRecord {
            id,
            client: 0,
            group: 0,
            key: "k".into(),
            peer: "10.0.0.1".parse().unwrap(),
            gateway: 0,
            cost: 1,
            sent_at: Nanos::from_secs(id),
            answer: answer.map(|a| (Nanos::from_secs(id), a)),
            layers: Layers::default(),
            extra_answers: extra,
            read_at: None,
            written_at: None,
            store_calls: [0; 2],
            store_errored: [0; 2],
            store_full: [0; 2],
            applied_seq: None,
        }
    }
}
