//! What a probe recorded and what it holds the limiter to: the observations, the claimed
//! policy and how the history is judged.

use crate::envelope::Envelope;
pub use crate::family::sliding_counter::Rounding;
use crate::linearizable::{Initial, Op, Spec, Verdict};
use ratelab_core::Nanos;

/// What the limiter answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Admitted.
    Allowed,
    /// Denied.
    Denied,
    /// No decision came back (a transport error, an unexpected status, an error reply): it
    /// may have taken effect, or not.
    Failed(String),
}

/// The rate-limit fields an answer carried, in the checker's units.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fields {
    /// Units left (`RateLimit` `r`, `X-RateLimit-Remaining`, or a script's reply).
    pub remaining: Option<u64>,
    /// The `RateLimit` field's `t`, in whole seconds: draft-10's time until more quota, or
    /// draft-11's effective window (or the older dialects' reset; for a reset given as an
    /// epoch, the least time it can mean). Under either draft a denial's `Retry-After` must
    /// not point before it.
    pub reset_secs: Option<u64>,
    /// The wait a denial announced.
    pub retry_after: Option<Nanos>,
    /// `retry_after` is the true wait rounded up to a multiple of this (1 s for a
    /// `Retry-After` field; 1 ns when exact).
    pub retry_after_unit: Nanos,
    /// The limit the answer announced (`RateLimit-Limit`, `X-RateLimit-Limit`).
    pub limit: Option<u64>,
    /// Which fields carried `remaining` and the reset.
    pub dialect: Option<Dialect>,
    /// A rate-limit field the answer carried that no client can read as its grammar says
    /// (`Retry-After: 0.5`, `X-RateLimit-Remaining: -1`): its name and value.
    pub malformed: Option<(String, String)>,
}

/// The fields an HTTP limiter speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Dialect {
    /// The IETF draft's structured `RateLimit` field (draft-08 on: `"name";r=…;t=…`).
    RateLimit,
    /// The draft's earlier `RateLimit-Limit`, `-Remaining` and `-Reset` (delta seconds).
    RateLimitTriple,
    /// `X-RateLimit-Limit`, `-Remaining` and `-Reset`, the reset in this unit.
    XRateLimit(ResetUnit),
}

/// What an `X-RateLimit-Reset` counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ResetUnit {
    /// Seconds from now.
    DeltaSeconds,
    /// Seconds since the Unix epoch.
    EpochSeconds,
    /// Milliseconds since the Unix epoch.
    EpochMillis,
}

impl Dialect {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Dialect::RateLimit => "RateLimit",
            Dialect::RateLimitTriple => "RateLimit-Limit/-Remaining/-Reset",
            Dialect::XRateLimit(ResetUnit::DeltaSeconds) => "X-RateLimit-* (reset: delta seconds)",
            Dialect::XRateLimit(ResetUnit::EpochSeconds) => "X-RateLimit-* (reset: epoch seconds)",
            Dialect::XRateLimit(ResetUnit::EpochMillis) => "X-RateLimit-* (reset: epoch ms)",
        }
    }
}

impl Fields {
    /// The fields an HTTP limiter sends for `d` when it renders it as ratelab's draft-10
    /// headers do: `remaining`, the `RateLimit` field's `t` and `Retry-After`, in whole
    /// seconds rounded up. For histories made from decisions (tests, benchmarks), never for
    /// judging.
    pub fn rendered(d: &ratelab_core::Decision) -> Fields {
        let secs = |w: Nanos| w.as_u64().div_ceil(1_000_000_000);
        Fields {
            remaining: Some(d.remaining),
            reset_secs: Some(secs(d.reset_after)),
            retry_after: d.retry_after.map(|w| Nanos::from_secs(secs(w))),
            retry_after_unit: Nanos::from_secs(1),
            limit: None,
            dialect: Some(Dialect::RateLimit),
            malformed: None,
        }
    }
}

impl Outcome {
    /// Admitted or denied.
    pub fn of(allowed: bool) -> Outcome {
        if allowed {
            Outcome::Allowed
        } else {
            Outcome::Denied
        }
    }
}

/// One request a probe sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    /// Sequential id, in send order.
    pub id: u64,
    /// The key it was sent for.
    pub key: String,
    /// The probe client that sent it.
    pub client: u32,
    /// The instance of the limiter it went to (0 when there is one).
    pub instance: u32,
    /// Its cost.
    pub cost: u64,
    /// When it was sent, on the probe's clock (from the probe's start).
    pub sent: Nanos,
    /// When its answer arrived.
    pub answered: Nanos,
    /// The answer.
    pub outcome: Outcome,
    /// The fields it carried.
    pub fields: Fields,
}

/// A Retry-After honesty probe: after denial `denied`, its client waited exactly the
/// announced time and sent `follow_up` on the same quiet key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryProbe {
    /// The denial's id.
    pub denied: u64,
    /// The follow-up's id.
    pub follow_up: u64,
}

/// Everything a probe recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProbeHistory {
    /// Every request, by id.
    pub observations: Vec<Observation>,
    /// The honesty probes.
    pub retry_probes: Vec<RetryProbe>,
}

/// The policy a probe holds the limiter to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// A token bucket: `capacity` B, `amount` tokens every `period`.
    TokenBucket {
        /// B.
        capacity: u64,
        /// Tokens per period.
        amount: u64,
        /// The refill period.
        period: Nanos,
    },
    /// At most `limit` per `window`, counted as `kind` counts.
    Window {
        /// Which window family.
        kind: WindowKind,
        /// L.
        limit: u64,
        /// W.
        window: Nanos,
    },
    /// Exactly one of `ratelab-core`'s algorithms, held to its family's specification
    /// ([`crate::family::Specified`]) with its clock's zero unknown; any window bound to the
    /// bound its quota of L per W gives a window algorithm, 2L + L·Δt/W. (A token bucket is
    /// [`Claim::TokenBucket`]: [`Claim::of_policy`] says so.)
    Policy(ratelab_core::Policy),
}

/// How a window claim counts (each a family of [`crate::family`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowKind {
    /// Fixed windows aligned to the limiter's clock, at a phase the probe cannot see.
    Fixed,
    /// Fixed windows opened by each key's first request.
    FirstHit,
    /// A log of admissions: at most L in any window of length W.
    SlidingLog,
    /// The sliding-window counter's weighted estimate.
    SlidingCounter {
        /// What is done with the weighted count's fraction.
        rounding: Rounding,
        /// Windows opened by each key's first request (HAProxy's stick-table rates), not
        /// aligned to the clock.
        first_hit: bool,
    },
}

impl Claim {
    /// The envelope the claim promises: a bucket's B + R·Δt; a sliding log's L + L·Δt/W
    /// (an interval of Δt is covered by ⌈Δt/W⌉ windows); for the other windows, any
    /// interval of Δt meets at most ⌈Δt/W⌉ + 1 windows of L each (the sliding counter's
    /// aligned windows never hold more than L either), so 2L + L·Δt/W.
    pub fn envelope(&self) -> Envelope {
        match *self {
            Claim::TokenBucket {
                capacity,
                amount,
                period,
            } => Envelope {
                burst: capacity,
                amount,
                period: period.as_u64().max(1),
            },
            Claim::Window {
                kind,
                limit,
                window,
            } => Envelope {
                burst: if kind == WindowKind::SlidingLog {
                    limit
                } else {
                    limit.saturating_mul(2)
                },
                amount: limit,
                period: window.as_u64().max(1),
            },
            Claim::Policy(p) => {
                let q = ratelab_core::Algorithm::quota(&p);
                Envelope {
                    burst: q.limit.saturating_mul(2),
                    amount: q.limit,
                    period: q.window.as_u64().max(1),
                }
            }
        }
    }

    /// The claim that `policy` is the limiter's policy: a token bucket's as
    /// [`Claim::TokenBucket`], any other algorithm's as [`Claim::Policy`].
    pub fn of_policy(policy: ratelab_core::Policy) -> Claim {
        match policy {
            ratelab_core::Policy::TokenBucket(b) => {
                // In lowest terms, as the probe writes a rate.
                let (amount, period) = (b.refill_amount(), b.refill_period().as_u64());
                let g = gcd(amount, period);
                Claim::TokenBucket {
                    capacity: b.capacity(),
                    amount: amount / g,
                    period: Nanos(period / g),
                }
            }
            other => Claim::Policy(other),
        }
    }

    /// The token bucket's sequential specification, for a bucket claim.
    pub fn spec(&self) -> Option<Spec> {
        match *self {
            Claim::TokenBucket {
                capacity,
                amount,
                period,
            } => Some(Spec {
                capacity,
                amount,
                period,
            }),
            Claim::Window { .. } | Claim::Policy(_) => None,
        }
    }

    /// The most a key admits at once: B, or L.
    pub fn burst(&self) -> u64 {
        match *self {
            Claim::TokenBucket { capacity, .. } => capacity,
            Claim::Window { limit, .. } => limit,
            Claim::Policy(p) => ratelab_core::Algorithm::quota(&p).limit,
        }
    }

    /// Whether the claim has a sequential specification to start from `initial`: a bucket
    /// from any state, a window family from a key nobody used.
    pub fn has_spec(&self, initial: Initial) -> bool {
        self.spec().is_some() || initial == Initial::Full
    }

    /// Holds one key's operations to the claim's sequential specification, from `initial`:
    /// a bucket from any state; a window family from a key nobody used (`None` for a window
    /// key in an unknown state, which no family here starts from).
    pub fn check_key(
        &self,
        ops: &[Op],
        budget: u64,
        initial: Initial,
        origin: Option<Nanos>,
    ) -> Option<Verdict> {
        if let Some(spec) = self.spec() {
            return Some(crate::linearizable::check_key_from(
                &spec, ops, budget, initial,
            ));
        }
        if !self.has_spec(initial) {
            return None;
        }
        Some(self.with_family(origin, CheckKey { ops, budget }))
    }

    /// Runs `work` with the family the claim names, its windows starting where a clock whose
    /// zero is at `origin` reads a multiple of them (`None`: at a phase unknown).
    pub fn with_family<W: crate::family::WithFamily>(
        &self,
        origin: Option<Nanos>,
        work: W,
    ) -> W::Out {
        use crate::family::{first_hit, fixed_window, sliding_counter, sliding_log};
        let phase = |window| fixed_window::Grid::phase_of(origin, window);
        match *self {
            Claim::TokenBucket { .. } => {
                let spec = self.spec().expect("a bucket claim has its specification");
                work.with(&spec)
            }
            Claim::Policy(p) => crate::family::with_family(&p, origin, work),
            Claim::Window {
                kind,
                limit,
                window,
            } => match kind {
                WindowKind::Fixed => work.with(&fixed_window::FixedWindow {
                    limit,
                    window,
                    phase: phase(window),
                }),
                WindowKind::FirstHit => work.with(&first_hit::FirstHitWindow { limit, window }),
                WindowKind::SlidingLog => work.with(&sliding_log::SlidingLog { limit, window }),
                WindowKind::SlidingCounter {
                    rounding,
                    first_hit,
                } => work.with(&sliding_counter::SlidingCounter {
                    limit,
                    window,
                    phase: if first_hit { None } else { phase(window) },
                    rounding,
                    first_hit,
                }),
            },
        }
    }

    /// The most of one key's requests, sent at `times` (in order, each of cost 1), the claim
    /// admits from a key nobody used: its family deciding each at its time, from each state
    /// a fresh key may start in (a fixed window's phases), the best of those.
    pub fn most_admitted(&self, times: &[Nanos]) -> u64 {
        self.admitted(times).1
    }

    /// The fewest and the most of one key's requests, sent at `times` (in order, each of
    /// cost 1), the claim admits from a key nobody used: its family deciding each at its
    /// time, over every state a fresh key may start in (a fixed window's phases).
    pub fn admitted(&self, times: &[Nanos]) -> (u64, u64) {
        let runs = self.with_family(None, Admitted { times });
        let admitted = runs
            .iter()
            .map(|run| run.iter().filter(|said| said.0).count() as u64);
        (
            admitted.clone().min().unwrap_or(0),
            admitted.max().unwrap_or(0),
        )
    }

    /// The most room the claim reports left after each of one key's requests, sent at
    /// `times` (in order, each of cost 1), from a key nobody used: over every state a fresh
    /// key may start in, the largest `remaining` its family gives after that request.
    pub fn most_left(&self, times: &[Nanos]) -> Vec<u64> {
        let runs = self.with_family(None, Admitted { times });
        (0..times.len())
            .map(|i| runs.iter().map(|run| run[i].1).max().unwrap_or(0))
            .collect()
    }
}

/// One key's requests decided by the claim's family from each state a fresh key may start
/// in: per state, each request's (admitted, remaining after it).
struct Admitted<'a> {
    times: &'a [Nanos],
}

impl crate::family::WithFamily for Admitted<'_> {
    type Out = Vec<Vec<(bool, u64)>>;

    fn with<F: crate::family::Family>(self, family: &F) -> Vec<Vec<(bool, u64)>> {
        let ops: Vec<Op> = self
            .times
            .iter()
            .enumerate()
            .map(|(id, &at)| Op {
                id: id as u64,
                call: at,
                ret: Some(at),
                cost: 1,
                seen: crate::linearizable::Seen::Allowed {
                    at,
                    remaining: None,
                },
                stamp: None,
                precision: crate::linearizable::Precision::EXACT,
            })
            .collect();
        family
            .fresh(&ops)
            .into_iter()
            .map(|mut state| {
                ops.iter()
                    .map(|op| {
                        let (said, next) = family.decide(&state, op.call, 1);
                        state = next;
                        (said.allowed, said.remaining)
                    })
                    .collect()
            })
            .collect()
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// [`crate::family::check_key`] as work for whichever family a policy names.
struct CheckKey<'a> {
    ops: &'a [Op],
    budget: u64,
}

impl crate::family::WithFamily for CheckKey<'_> {
    type Out = Verdict;

    fn with<F: crate::family::Family>(self, family: &F) -> Verdict {
        crate::family::check_key(family, self.ops, self.budget)
    }
}

/// How a probe's history is judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Judging {
    /// The claimed policy.
    pub claim: Claim,
    /// How far the limiter's clock may lag the moment it decided (its resolution: 1 ms for
    /// a millisecond clock).
    pub clock_resolution: Nanos,
    /// What each key held before the probe: full for keys the probe made up.
    pub initial: Initial,
    /// The linearizability search's budget per key.
    pub budget: u64,
    /// Whether the claim is the limiter's exact policy, so its answers can be held to the
    /// sequential specification; `false` for a bound only (a rate known to be at most R).
    pub exact: bool,
    /// Where the limiter's windows start on the probe's timeline, if the probe knows: an
    /// instant at which its clock reads a multiple of the window (windows aligned to the
    /// Unix time, read by the probe too). `None`: unknown, every phase is tried.
    pub origin: Option<Nanos>,
}
