//! Linearizability of a token-bucket limiter, per key.
//!
//! A limiter is linearizable if the answers its clients saw are explained by *some* order of
//! the requests, one at a time, that respects real time (a request answered before another
//! was sent comes first), under the sequential specification below. This catches what the
//! envelope cannot: a request denied that the bucket had room for (a phantom denial), a wrong
//! `remaining` or `retry_after`, a token spent twice when each admission still fits under
//! B + R·Δt.
//!
//! **The specification** is written here, from the policy's definition, and does not call
//! `ratelab-core`: a bucket of B tokens gaining `amount` tokens every `period` is one number,
//! the instant it is full again (its theoretical arrival time, TAT), on a time scale where a
//! token is `period` units and a nanosecond `amount` units, so every step is exact integer
//! arithmetic. A request of cost c at time t, with deficit d = max(TAT − t, 0):
//! admitted iff d + c·period ≤ B·period, and then TAT becomes max(TAT, t) + c·period and
//! `remaining` is ⌊(B·period − d − c·period) / period⌋; denied otherwise, with
//! `retry_after` = ⌈(d + c·period − B·period) / amount⌉ ns and TAT unchanged.
//!
//! **Operations** ([`Op`]) carry their call and return times, the limiter's own decision time
//! for an answered request (the store's clock, as the recorded `decided_at`), what the
//! client saw, and optionally the store's order stamp. Two modes, chosen per key:
//!
//! - *Store-stamped*: when every answered operation carries a stamp, the order is the
//!   store's, and the check is one replay in stamp order; an operation the store stamped but
//!   whose answer was lost is replayed too, and one it never stamped is skipped.
//! - *Black-box*: otherwise, a Wing–Gong search in the style of Lowe and Porcupine over the
//!   orders real time allows, memoised on the set linearized so far: a point is skipped
//!   when one with the same set, a range of states holding its own and an earlier last
//!   decision time was visited; and a denial that every state of the range gives, changing
//!   none, is linearized at once ([`Search`]).
//!   An operation without an answer (a timeout, a lost reply, a failure the gateway answered
//!   for) stays open to the end of the history and may take effect after its call, or never
//!   (Knossos' `:info`). Before each answered operation the search may let one open
//!   operation take effect, at some moment between the previous decision and that one (the
//!   state becomes the range of TATs those moments give); open operations of one cost
//!   already sent by then are interchangeable, so one of each cost is tried. The search has a
//!   budget of states; past it the verdict is [`Verdict::Unknown`], never a guess.

use std::collections::{BTreeMap, HashMap};

use ratelab_core::Nanos;

/// The token bucket the checker holds the answers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    /// B, tokens.
    pub capacity: u64,
    /// Tokens gained every `period`.
    pub amount: u64,
    /// The refill period.
    pub period: Nanos,
}

/// What the client saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Admitted at the limiter's time `at`, with `remaining` tokens left if reported.
    Allowed {
        /// Decision time (the store's clock).
        at: Nanos,
        /// Tokens left, if the limiter reported them.
        remaining: Option<u64>,
    },
    /// Denied at `at`, told to wait `retry_after` if reported.
    Denied {
        /// Decision time (the store's clock).
        at: Nanos,
        /// The wait the client was told, if reported.
        retry_after: Option<Nanos>,
    },
    /// No decision reached the client: it may have taken effect, or not.
    Unknown,
}

/// One request on one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Op {
    /// The request's id (for reports).
    pub id: u64,
    /// When it was sent.
    pub call: Nanos,
    /// When its answer arrived; `None` if none did.
    pub ret: Option<Nanos>,
    /// Its cost.
    pub cost: u64,
    /// What the client saw.
    pub seen: Seen,
    /// The store's order of application, if the store recorded it (`None`: not applied, or
    /// not recorded).
    pub stamp: Option<u64>,
    /// How precisely its decision time and wait are known.
    pub precision: Precision,
}

/// How precisely an answer's decision time and `retry_after` are known.
///
/// The simulator records the store's own decision time and the exact wait
/// ([`Precision::EXACT`]). A probe of a limiter seen only from outside knows neither: the
/// decision fell somewhere between the send and the answer (widened by the limiter's clock
/// resolution), and a `Retry-After` field is whole seconds rounded up. The checker then
/// holds the answer to every decision time and every wait those allow: a violation it
/// reports holds for all of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Precision {
    /// The decision fell in `[at, at + decided_within]`.
    pub decided_within: Nanos,
    /// The reported `retry_after` is the true wait rounded up to a multiple of this (1 ns:
    /// exact).
    pub retry_after_unit: Nanos,
}

impl Precision {
    /// A recorded decision time and an exact wait.
    pub const EXACT: Precision = Precision {
        decided_within: Nanos(0),
        retry_after_unit: Nanos(1),
    };
}

/// What the bucket held before the first operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Initial {
    /// Full: a key nobody used (every history the simulator records, a probe's fresh keys).
    Full,
    /// Anything from empty to full: a key others may have used before the history began.
    Unknown,
}

/// The verdict on one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Some order explains every answer.
    Linearizable,
    /// No order does.
    Violation(Violation),
    /// The search ran out of budget after this much work.
    Unknown {
        /// States made, each weighed by its size (one, plus the operations it holds
        /// linearized out of order).
        explored: u64,
    },
}

/// Why no order explains the answers: the request the longest explained prefix could not be
/// extended by, and what the specification gave for it there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The request.
    pub id: u64,
    /// What the client saw, and what the specification gave in the furthest state reached.
    pub detail: String,
    /// How many requests were explained before it.
    pub explained: usize,
    /// Whether it is a *phantom denial*: a denial the specification admits from every state
    /// the furthest order reached gives there, at every moment it may have been decided.
    pub phantom_denial: bool,
}

/// An answer the specification cannot give from a range of states.
struct Unexplained {
    detail: String,
    phantom_denial: bool,
}

/// The bucket's possible states: every TAT from `lo` to `hi` (scaled units, ns × `amount`).
///
/// An answered request pins the TAT to a range (its `remaining` or `retry_after` to one
/// period's or one nanosecond's worth); an unanswered one that took effect at an unknown
/// moment widens it. Every step maps a range onto a range — `max(TAT, t) + c·period` is
/// monotone and continuous — so one range holds exactly the states reachable along one
/// order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Tats {
    lo: i128,
    hi: i128,
}

impl Tats {
    const EMPTY_BUCKET_AT_ZERO: Tats = Tats { lo: 0, hi: 0 };
    /// Any state: far enough either way that no step overflows.
    const ANY: Tats = Tats {
        lo: i128::MIN / 4,
        hi: i128::MAX / 4,
    };

    /// The states before the first operation, for a history whose earlier decisions were all
    /// made by `first`: a bucket is at most empty then, so its TAT is at most
    /// `first` + B·period.
    fn initial(initial: Initial, spec: &Spec, first: Nanos) -> Tats {
        match initial {
            Initial::Full => Tats::EMPTY_BUCKET_AT_ZERO,
            Initial::Unknown => {
                let k = spec.scaled(first, 0);
                Tats {
                    lo: Tats::ANY.lo,
                    hi: k.now + k.full,
                }
            }
        }
    }

    fn clamp(self, lo: i128, hi: i128) -> Option<Tats> {
        let t = Tats {
            lo: self.lo.max(lo),
            hi: self.hi.min(hi),
        };
        (t.lo <= t.hi).then_some(t)
    }
}

/// The specification's own numbers for one request, in scaled units.
struct Scaled {
    now: i128,
    full: i128,
    need: i128,
    period: i128,
    amount: i128,
}

impl Spec {
    /// A spec for a bucket of `capacity` tokens gaining `per_second` tokens a second.
    pub fn per_second(capacity: u64, per_second: u64) -> Spec {
        Spec {
            capacity,
            amount: per_second,
            period: Nanos(1_000_000_000),
        }
    }

    fn scaled(&self, at: Nanos, cost: u64) -> Scaled {
        let period = i128::from(self.period.as_u64()).max(1);
        let amount = i128::from(self.amount).max(1);
        Scaled {
            now: i128::from(at.as_u64()) * amount,
            full: i128::from(self.capacity) * period,
            need: i128::from(cost) * period,
            period,
            amount,
        }
    }

    /// The range of states after `op`, as the client saw it, from `tats`; or what the spec
    /// says instead. The decision fell at some moment from `at` to `at + decided_within`:
    /// every bound below is the union over those moments (for one moment, exact).
    fn explain(&self, tats: Tats, op: &Op) -> Result<Tats, Unexplained> {
        let within = |at: Nanos| {
            Nanos(
                at.as_u64()
                    .saturating_add(op.precision.decided_within.as_u64()),
            )
        };
        match op.seen {
            Seen::Allowed { at, remaining } => {
                let (a, b) = (self.scaled(at, op.cost), self.scaled(within(at), op.cost));
                // Admitted: deficit + need ≤ full, so TAT ≤ now + full − need (and a deficit
                // is never negative: no state admits more than the bucket holds).
                let mut hi = b.now + b.full - b.need;
                let mut lo = i128::MIN;
                let mut possible = a.need <= a.full;
                if let Some(r) = remaining {
                    // ⌊(full − deficit − need) / period⌋ = r.
                    let r = i128::from(r);
                    possible &= a.full - a.need - r * a.period >= 0;
                    hi = hi.min(b.now + b.full - b.need - r * b.period);
                    let above = a.full - a.need - (r + 1) * a.period;
                    if above >= 0 {
                        lo = a.now + above + 1;
                    }
                }
                match tats.clamp(lo, hi).filter(|_| possible) {
                    Some(t) => Ok(Tats {
                        lo: t.lo.max(a.now) + a.need,
                        hi: t.hi.max(b.now) + b.need,
                    }),
                    None => Err(Unexplained {
                        detail: format!(
                            "admitted{} at {at}; {}",
                            remaining.map_or(String::new(), |r| format!(" with remaining {r}")),
                            self.says(tats, at, op.cost)
                        ),
                        phantom_denial: false,
                    }),
                }
            }
            Seen::Denied { at, retry_after } => {
                let (a, b) = (self.scaled(at, op.cost), self.scaled(within(at), op.cost));
                // Denied: deficit + need > full (any state denies a cost beyond the capacity).
                let beyond = a.need > a.full;
                let mut lo = if beyond {
                    i128::MIN
                } else {
                    a.now + a.full - a.need + 1
                };
                let mut hi = i128::MAX;
                let mut possible = true;
                if let Some(w) = retry_after {
                    // ⌈(deficit + need − full) / amount⌉ = the true wait, at least 1 ns on a
                    // denial, which the reported `w` rounds up to a multiple of the unit: a
                    // wait from w − unit + 1 to w.
                    let w = i128::from(w.as_u64());
                    let unit = i128::from(op.precision.retry_after_unit.as_u64().max(1));
                    let least = (w - unit + 1).max(1);
                    possible = least <= w;
                    lo = lo.max(a.now + (least - 1) * a.amount + a.full - a.need + 1);
                    hi = b.now + w * b.amount + b.full - b.need;
                }
                tats.clamp(lo, hi)
                    .filter(|_| possible)
                    .ok_or_else(|| Unexplained {
                        detail: format!(
                            "denied{} at {at}; {}",
                            retry_after.map_or(String::new(), |w| format!(" with retry after {w}")),
                            self.says(tats, at, op.cost)
                        ),
                        // Admitted at the earliest moment from the fullest state and the emptiest.
                        phantom_denial: !beyond && tats.hi <= a.now + a.full - a.need,
                    })
            }
            Seen::Unknown => Ok(tats),
        }
    }

    /// What the spec answers from the least and the most full state of `tats`.
    fn says(&self, tats: Tats, at: Nanos, cost: u64) -> String {
        let k = self.scaled(at, cost);
        let one = |tat: i128| {
            let deficit = (tat - k.now).max(0);
            if deficit + k.need <= k.full {
                format!("admits it, {} left", (k.full - deficit - k.need) / k.period)
            } else {
                let w = (deficit + k.need - k.full + k.amount - 1) / k.amount;
                format!(
                    "denies it, retry after {}",
                    Nanos(u64::try_from(w).unwrap_or(u64::MAX))
                )
            }
        };
        let (a, b) = (one(tats.hi), one(tats.lo));
        if a == b {
            format!("the spec {a}")
        } else {
            format!("the spec {a} to {b}")
        }
    }

    /// The states after an unanswered request of `cost` took effect (was admitted) at some
    /// moment from `from` to `to`; `None` if it could not have been admitted then.
    fn apply_unknown(&self, tats: Tats, from: Nanos, to: Nanos, cost: u64) -> Option<Tats> {
        let (a, b) = (self.scaled(from, cost), self.scaled(to.max(from), cost));
        // Admitted at τ needs TAT ≤ τ + full − need: the latest τ admits the most.
        let t = tats.clamp(i128::MIN, b.now + b.full - b.need)?;
        Some(Tats {
            lo: t.lo.max(a.now) + a.need,
            hi: t.hi.max(b.now) + b.need,
        })
    }
}

/// The default budget of search work per key: states made, each weighed by its size.
pub const DEFAULT_BUDGET: u64 = 2_000_000;

/// Checks one key's operations (any order) against `spec`, exploring at most `budget`
/// search states.
pub fn check_key(spec: &Spec, ops: &[Op], budget: u64) -> Verdict {
    check_key_from(spec, ops, budget, Initial::Full)
}

/// [`check_key`] from a bucket that held `initial` before the first operation.
pub fn check_key_from(spec: &Spec, ops: &[Op], budget: u64, initial: Initial) -> Verdict {
    // What came before the history was decided no later than the first answer arrived (or,
    // for the simulator's exact times, the first call).
    let first = ops
        .iter()
        .map(|o| {
            Nanos(
                o.call
                    .as_u64()
                    .saturating_add(o.precision.decided_within.as_u64()),
            )
        })
        .min()
        .unwrap_or(Nanos::ZERO);
    let answered_stamped = ops
        .iter()
        .filter(|o| o.seen != Seen::Unknown)
        .all(|o| o.stamp.is_some());
    if answered_stamped && ops.iter().any(|o| o.stamp.is_some()) {
        replay_stamped(spec, ops, Tats::initial(initial, spec, first))
    } else {
        Search::new(spec, ops, budget).run(Tats::initial(initial, spec, first))
    }
}

/// Store-stamped mode: one replay in the store's order.
fn replay_stamped(spec: &Spec, ops: &[Op], initial: Tats) -> Verdict {
    let (order, next_decided) = store_order(ops);
    let decided = |o: &Op| o.decided();
    let mut tats = initial;
    let mut last_at = Nanos::ZERO;
    for (i, op) in order.iter().enumerate() {
        match decided(op) {
            None => {
                // Applied, its answer lost: decided after the last stamped decision and
                // before the next; it took a token if there was one then.
                let from = last_at.max(op.call);
                let to = next_decided[i];
                if let Some(t) = spec.apply_unknown(tats, from, to, op.cost) {
                    // Admitted or not, depending on the moment: both stay possible.
                    tats = Tats {
                        lo: tats.lo.min(t.lo),
                        hi: tats.hi.max(t.hi),
                    };
                }
            }
            Some(at) => {
                match spec.explain(tats, op) {
                    Ok(t) => tats = t,
                    Err(e) => {
                        return Verdict::Violation(Violation {
                            id: op.id,
                            detail: format!("in store order: {}", e.detail),
                            explained: i,
                            phantom_denial: e.phantom_denial,
                        });
                    }
                }
                last_at = last_at.max(at);
            }
        }
    }
    Verdict::Linearizable
}

/// Charges the search's budget for a state about to be made from `s`; whether the budget
/// allows it. Every state made counts, not only those expanded, each by its size: a wide
/// history (thousands of overlapping operations, as behind a paused gateway) makes thousands
/// of children per state, each holding the operations linearized out of order, and the stack
/// holding them must stay bounded too.
fn charge(explored: &mut u64, budget: u64, s: &State) -> bool {
    *explored += 1 + (s.beyond.len() + s.used.len()) as u64;
    *explored <= budget
}

/// Black-box mode: the Wing–Gong search, depth first, on an explicit stack.
///
/// One reduction keeps histories of many overlapping denials small (a probe's 64 clients on
/// one key, most of them turned away): an answered operation that every state of the range
/// explains without narrowing it — a denial the bucket gives from all of them — is
/// linearized at once, as the only child. A denial never moves a bucket's TAT, so any order
/// that places it later explains the same answers with it placed here (it is within the
/// real-time horizon, so no pending operation had to come first), provided the moments open
/// operations may take effect at stay as they were (no open operation, or the last decision
/// time unchanged).
struct Search<'a> {
    spec: &'a Spec,
    /// Answered operations, by call time.
    answered: Vec<&'a Op>,
    /// Unanswered ones, by call time.
    open: Vec<&'a Op>,
    /// A fixed random word per operation (answered, then open): a set's hash is the XOR of
    /// its members' words.
    words: Vec<u64>,
    /// The points visited, by the hash of their set: each one's states and last decision
    /// time (see [`Search::subsumed`]).
    seen: HashMap<u64, Vec<(Tats, Nanos)>>,
    explored: u64,
    budget: u64,
    /// The furthest any branch got, and the first operation it could not explain there.
    furthest: Option<(usize, u64, Unexplained)>,
}

/// A point of the search: which operations are linearized, and the bucket after them.
#[derive(Clone)]
struct State {
    /// Every answered operation before this index is linearized...
    prefix: usize,
    /// ... and these after it (sorted).
    beyond: Vec<usize>,
    /// The unanswered operations that took effect (sorted).
    used: Vec<usize>,
    hash: u64,
    tats: Tats,
    last_at: Nanos,
}

/// The real-time horizon of a search point: the next operation can be any pending one sent
/// no later than the first return among the pending answered ones (`answered` by call time,
/// pending from `prefix` on as `pending` says). Operations return after their call, so the
/// scan stops once calls pass the running minimum.
pub(crate) fn horizon(answered: &[&Op], prefix: usize, pending: impl Fn(usize) -> bool) -> Nanos {
    let mut horizon = Nanos(u64::MAX);
    for (i, op) in answered.iter().enumerate().skip(prefix) {
        if op.call > horizon {
            break;
        }
        if pending(i) {
            horizon = horizon.min(op.ret.unwrap_or(Nanos(u64::MAX)));
        }
    }
    horizon
}

/// Whether `op`, explained from a point with its state unchanged, may be linearized there
/// at once as the point's only child (both searches' reduction): it is a denial, and the
/// moments open operations may take effect at stay as they were — there are none open, or
/// the last decision time (`last_at`) does not move past `at`.
pub(crate) fn linearized_at_once(op: &Op, none_open: bool, at: Nanos, last_at: Nanos) -> bool {
    matches!(op.seen, Seen::Denied { .. }) && (none_open || at <= last_at)
}

/// The operations the store stamped, in its order, each with the next answered decision
/// time after it (one backward pass; far in the future after the last).
pub(crate) fn store_order(ops: &[Op]) -> (Vec<&Op>, Vec<Nanos>) {
    let mut order: Vec<&Op> = ops.iter().filter(|o| o.stamp.is_some()).collect();
    order.sort_by_key(|o| o.stamp);
    let mut next_decided = vec![Nanos(u64::MAX / 2); order.len()];
    let mut next = Nanos(u64::MAX / 2);
    for (i, op) in order.iter().enumerate().rev() {
        next_decided[i] = next;
        if let Some(at) = op.decided() {
            next = at;
        }
    }
    (order, next_decided)
}

/// Fixed pseudo-random words (SplitMix64), one per operation: a set's hash is the XOR of its
/// members' words, the same on every run (the family search's too).
pub(crate) fn words(n: usize) -> Vec<u64> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|_| {
            // SplitMix64: fixed words, so the search is the same on every run.
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        })
        .collect()
}

impl<'a> Search<'a> {
    fn new(spec: &'a Spec, ops: &'a [Op], budget: u64) -> Search<'a> {
        let by_call = |v: &mut Vec<&Op>| v.sort_by_key(|o| (o.call, o.id));
        let mut answered: Vec<&Op> = ops.iter().filter(|o| o.seen != Seen::Unknown).collect();
        let mut open: Vec<&Op> = ops.iter().filter(|o| o.seen == Seen::Unknown).collect();
        by_call(&mut answered);
        by_call(&mut open);
        let words = words(answered.len() + open.len());
        Search {
            spec,
            answered,
            open,
            words,
            seen: HashMap::new(),
            explored: 0,
            budget,
            furthest: None,
        }
    }

    fn run(mut self, initial: Tats) -> Verdict {
        let mut stack = vec![State {
            prefix: 0,
            beyond: Vec::new(),
            used: Vec::new(),
            hash: 0,
            tats: initial,
            last_at: Nanos::ZERO,
        }];
        while let Some(s) = stack.pop() {
            if s.prefix == self.answered.len() {
                return Verdict::Linearizable;
            }
            if self.subsumed(&s) {
                continue;
            }
            self.explored += 1;
            let children = self.children(&s);
            if self.explored > self.budget {
                return Verdict::Unknown {
                    explored: self.explored,
                };
            }
            // Depth first, earliest call first.
            stack.extend(children.into_iter().rev());
        }
        let (explained, id, e) = self.furthest.unwrap_or((
            0,
            0,
            Unexplained {
                detail: "no order explains the answers".into(),
                phantom_denial: false,
            },
        ));
        Verdict::Violation(Violation {
            id,
            detail: e.detail,
            explained,
            phantom_denial: e.phantom_denial,
        })
    }

    /// Whether a point with the same operations linearized, a range of states holding
    /// `s`'s and a last decision time no later was visited (and `s` is recorded if not).
    /// Every step maps a wider range onto a wider one and an earlier last decision leaves
    /// open operations more moments, so whatever `s` can explain such a point could: it
    /// has been explored, or is being explored above `s`, and `s` adds nothing.
    fn subsumed(&mut self, s: &State) -> bool {
        let visited = self.seen.entry(s.hash).or_default();
        let covers =
            |(t, at): &(Tats, Nanos)| t.lo <= s.tats.lo && s.tats.hi <= t.hi && *at <= s.last_at;
        if visited.iter().any(covers) {
            return true;
        }
        visited.retain(|(t, at)| !(s.tats.lo <= t.lo && t.hi <= s.tats.hi && s.last_at <= *at));
        visited.push((s.tats, s.last_at));
        false
    }

    /// Every state one operation further on (fewer when the budget runs out).
    fn children(&mut self, s: &State) -> Vec<State> {
        let pending = |i: usize| i >= s.prefix && s.beyond.binary_search(&i).is_err();
        let horizon = horizon(&self.answered, s.prefix, pending);
        let mut out = Vec::new();
        // The earliest decision time among the candidates: an unanswered operation put
        // before them takes effect before then.
        let mut next_at: Option<Nanos> = None;
        let explained = s.prefix + s.beyond.len();
        for i in s.prefix..self.answered.len() {
            let op = self.answered[i];
            if op.call > horizon {
                break;
            }
            if !pending(i) {
                continue;
            }
            let (Some(at), Some(latest)) = (op.decided(), op.decided_by()) else {
                continue;
            };
            // An open operation before it took effect no later than its latest moment.
            next_at = Some(next_at.map_or(latest, |n| n.min(latest)));
            match self.spec.explain(s.tats, op) {
                Ok(tats) => {
                    if !charge(&mut self.explored, self.budget, s) {
                        return out;
                    }
                    let mut c = s.clone();
                    c.beyond.insert(c.beyond.partition_point(|&b| b < i), i);
                    while c.beyond.first() == Some(&c.prefix) {
                        c.beyond.remove(0);
                        c.prefix += 1;
                    }
                    c.hash ^= self.words[i];
                    c.tats = tats;
                    c.last_at = s.last_at.max(at);
                    if tats == s.tats && linearized_at_once(op, self.open.is_empty(), at, s.last_at)
                    {
                        // A denial every state here gives, changing none: see `Search`.
                        return vec![c];
                    }
                    out.push(c);
                }
                Err(e) => {
                    if self.furthest.as_ref().is_none_or(|f| explained > f.0) {
                        self.furthest = Some((explained, op.id, e));
                    }
                }
            }
        }
        // An unanswered operation may take effect before the next answered one, at some
        // moment between the last decision and the next candidate's. Unanswered operations
        // already sent by then and of the same cost are interchangeable (each stays open to
        // the end), so one of each cost is tried: the earliest sent.
        if let Some(at) = next_at {
            let from_last = s.last_at;
            let mut costs: Vec<u64> = Vec::new();
            for (j, op) in self.open.iter().enumerate() {
                if op.call > at || op.call > horizon {
                    break;
                }
                if s.used.binary_search(&j).is_ok() || costs.contains(&op.cost) {
                    continue;
                }
                costs.push(op.cost);
                let from = from_last.max(op.call).min(at);
                if let Some(tats) = self.spec.apply_unknown(s.tats, from, at, op.cost) {
                    if !charge(&mut self.explored, self.budget, s) {
                        return out;
                    }
                    let mut c = s.clone();
                    c.used.insert(c.used.partition_point(|&u| u < j), j);
                    c.hash ^= self.words[self.answered.len() + j];
                    c.tats = tats;
                    out.push(c);
                }
            }
        }
        out
    }
}

impl Op {
    /// When its decision was made, if an answer says.
    pub fn decided(&self) -> Option<Nanos> {
        match self.seen {
            Seen::Allowed { at, .. } | Seen::Denied { at, .. } => Some(at),
            Seen::Unknown => None,
        }
    }

    /// The latest moment its decision may have been made, if an answer says: its decision
    /// time plus the precision it is known with.
    pub fn decided_by(&self) -> Option<Nanos> {
        self.decided()
            .map(|at| at.saturating_add(self.precision.decided_within))
    }

    /// `r`'s per-key operation: its call and return times, what its answer said (an answer
    /// the gateway gave for a failure is [`Seen::Unknown`]), and the store's stamp when the
    /// recorder has one (a simulated store's atomic transition). Without stamps, as from a
    /// real store, the check is black-box.
    /// `None` when the request never reached the per-key layer, the store refused its new
    /// key, or the gateway's denial cache answered it (nothing was applied).
    pub fn per_key(r: &crate::history::RequestRecord) -> Option<Op> {
        use crate::history::Answer;
        let seen = match r.layers.per_key? {
            Answer::Allowed {
                decided_at,
                remaining,
            } => Seen::Allowed {
                at: decided_at,
                remaining: Some(remaining),
            },
            Answer::Denied {
                decided_at,
                retry_after,
            } => Seen::Denied {
                at: decided_at,
                retry_after: Some(retry_after),
            },
            // Nothing was applied: no room for the key, or the gateway's denial cache answered
            // without a store call (the report checks those against the store's denials).
            Answer::Full | Answer::Cached { .. } => return None,
            _ => Seen::Unknown,
        };
        Some(Op {
            id: r.id,
            call: r.sent_at,
            ret: if seen == Seen::Unknown {
                None
            } else {
                r.answer.as_ref().map(|(t, _)| *t)
            },
            cost: r.cost,
            seen,
            stamp: r.applied_seq,
            precision: Precision::EXACT,
        })
    }
}

/// Every key's verdict.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinearizabilityReport {
    /// Keys checked.
    pub keys: usize,
    /// Keys with a violation, with it.
    pub violations: BTreeMap<String, Violation>,
    /// Keys the budget ran out on.
    pub unknown: Vec<String>,
}

impl LinearizabilityReport {
    /// Whether every key was shown linearizable.
    pub fn linearizable(&self) -> bool {
        self.violations.is_empty() && self.unknown.is_empty()
    }
}

/// Checks every key of `by_key` (each key's operations) against `spec`.
pub fn check<'k>(
    spec: &Spec,
    by_key: impl IntoIterator<Item = (&'k str, Vec<Op>)>,
    budget: u64,
) -> LinearizabilityReport {
    let mut r = LinearizabilityReport::default();
    for (key, ops) in by_key {
        r.keys += 1;
        match check_key(spec, &ops, budget) {
            Verdict::Linearizable => {}
            Verdict::Violation(v) => {
                r.violations.insert(key.to_owned(), v);
            }
            Verdict::Unknown { .. } => r.unknown.push(key.to_owned()),
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratelab_core::{Algorithm, TokenBucket};

    const S: u64 = 1_000_000_000;

    fn ms(v: u64) -> Nanos {
        Nanos(v * 1_000_000)
    }

    /// An answered request decided at `at`, in flight from `call` to `ret`.
    fn allowed(id: u64, call: u64, at: u64, ret: u64, remaining: u64) -> Op {
        Op {
            id,
            call: ms(call),
            ret: Some(ms(ret)),
            cost: 1,
            seen: Seen::Allowed {
                at: ms(at),
                remaining: Some(remaining),
            },
            stamp: None,
            precision: Precision::EXACT,
        }
    }

    fn denied(id: u64, call: u64, at: u64, ret: u64, retry_after: Option<Nanos>) -> Op {
        Op {
            id,
            call: ms(call),
            ret: Some(ms(ret)),
            cost: 1,
            seen: Seen::Denied {
                at: ms(at),
                retry_after,
            },
            stamp: None,
            precision: Precision::EXACT,
        }
    }

    fn unanswered(id: u64, call: u64) -> Op {
        Op {
            id,
            call: ms(call),
            ret: None,
            cost: 1,
            seen: Seen::Unknown,
            stamp: None,
            precision: Precision::EXACT,
        }
    }

    fn verdict(spec: Spec, ops: &[Op]) -> Verdict {
        check_key(&spec, ops, DEFAULT_BUDGET)
    }

    /// A sequential history answered by `ratelab-core`'s bucket: the two implementations of
    /// the policy agree, on every answer field the checker reads.
    #[test]
    fn a_history_answered_by_the_core_bucket_is_linearizable_in_both_modes() {
        let bucket = TokenBucket::per_second(5, 3).unwrap();
        let spec = Spec::per_second(5, 3);
        let mut state = None;
        let mut ops = Vec::new();
        let mut t = 0u64;
        for i in 0..400u64 {
            t += (i * 7_919 % 23) * 17_000_000;
            let at = Nanos(t);
            let (next, d) = bucket.transition(state, at, 1 + i % 2).unwrap();
            state = Some(next);
            let seen = if d.allowed {
                Seen::Allowed {
                    at,
                    remaining: Some(d.remaining),
                }
            } else {
                Seen::Denied {
                    at,
                    retry_after: d.retry_after,
                }
            };
            ops.push(Op {
                id: i,
                call: at,
                ret: Some(at),
                cost: 1 + i % 2,
                seen,
                stamp: Some(i),
                precision: Precision::EXACT,
            });
        }
        assert!(ops.iter().any(|o| matches!(o.seen, Seen::Denied { .. })));
        assert_eq!(verdict(spec, &ops), Verdict::Linearizable, "stamped");
        for o in &mut ops {
            o.stamp = None;
        }
        assert_eq!(verdict(spec, &ops), Verdict::Linearizable, "black box");
    }

    #[test]
    fn overlapping_requests_are_put_in_the_order_their_answers_need() {
        // B = 2: the request sent second got the larger remaining, so it went first.
        let spec = Spec::per_second(2, 1);
        let ops = [allowed(1, 0, 5, 10, 0), allowed(2, 1, 4, 9, 1)];
        assert_eq!(verdict(spec, &ops), Verdict::Linearizable);
    }

    #[test]
    fn a_token_spent_twice_is_caught_though_the_envelope_holds() {
        // B = 5, a fresh bucket: two overlapping admissions each say 4 left. Two admissions
        // are well inside B + R·Δt, so the envelope passes; no order gives both answers.
        let spec = Spec::per_second(5, 1);
        let ops = [allowed(1, 0, 2, 4, 4), allowed(2, 1, 3, 5, 4)];
        let Verdict::Violation(v) = verdict(spec, &ops) else {
            panic!("not caught")
        };
        assert!(v.detail.contains("remaining 4"), "{v:?}");
    }

    #[test]
    fn a_phantom_denial_is_caught() {
        // B = 3 and one admission before it: the bucket had room.
        let spec = Spec::per_second(3, 1);
        let ops = [allowed(1, 0, 0, 1, 2), denied(2, 10, 10, 11, None)];
        let Verdict::Violation(v) = verdict(spec, &ops) else {
            panic!("not caught")
        };
        assert_eq!(v.id, 2);
        assert!(v.detail.contains("the spec admits it"), "{v:?}");
    }

    #[test]
    fn a_wrong_remaining_or_retry_after_is_caught() {
        let spec = Spec::per_second(2, 1);
        let wrong_remaining = [allowed(1, 0, 0, 1, 0)];
        assert!(matches!(
            verdict(spec, &wrong_remaining),
            Verdict::Violation(_)
        ));
        // Empty bucket at 2 ms: one token back after 1 s minus the 2 ms since the first
        // admission... the right wait is exact; one nanosecond off is a violation.
        let right = Nanos(S - 1_000_000);
        let ok = [
            allowed(1, 0, 1, 1, 1),
            allowed(2, 1, 1, 1, 0),
            denied(3, 2, 2, 2, Some(right)),
        ];
        assert_eq!(verdict(spec, &ok), Verdict::Linearizable);
        let off = [
            allowed(1, 0, 1, 1, 1),
            allowed(2, 1, 1, 1, 0),
            denied(3, 2, 2, 2, Some(Nanos(right.as_u64() + 1))),
        ];
        assert!(matches!(verdict(spec, &off), Verdict::Violation(_)));
    }

    #[test]
    fn real_time_order_is_respected() {
        // B = 1: the first admission returned before the second was sent, and both say 0
        // left within the same second: whichever went first, the second had no token.
        let spec = Spec::per_second(1, 1);
        let ops = [allowed(1, 0, 1, 2, 0), allowed(2, 3, 4, 5, 0)];
        assert!(matches!(verdict(spec, &ops), Verdict::Violation(_)));
    }

    #[test]
    fn an_unanswered_request_may_or_may_not_have_taken_effect() {
        let spec = Spec::per_second(1, 1);
        // It took the token: the later denial is explained.
        let took = [unanswered(1, 0), denied(2, 10, 10, 11, None)];
        assert_eq!(verdict(spec, &took), Verdict::Linearizable);
        // It did not: the later admission is explained.
        let not = [unanswered(1, 0), allowed(2, 10, 10, 11, 0)];
        assert_eq!(verdict(spec, &not), Verdict::Linearizable);
        // Without it the denial is a phantom.
        let alone = [denied(2, 10, 10, 11, None)];
        assert!(matches!(verdict(spec, &alone), Verdict::Violation(_)));
    }

    #[test]
    fn a_stamped_history_is_replayed_in_store_order() {
        let spec = Spec::per_second(1, 1);
        // Stamped in the order that explains them: the denial after the admission.
        let mut ops = [allowed(1, 0, 2, 3, 0), denied(2, 0, 1, 3, None)];
        ops[0].stamp = Some(1);
        ops[1].stamp = Some(2);
        assert_eq!(verdict(spec, &ops), Verdict::Linearizable);
        // The other way round, the store's own order contradicts the answers.
        ops[0].stamp = Some(2);
        ops[1].stamp = Some(1);
        let Verdict::Violation(v) = verdict(spec, &ops) else {
            panic!("not caught")
        };
        assert!(v.detail.starts_with("in store order"), "{v:?}");
    }

    #[test]
    fn an_exhausted_budget_is_unknown_not_a_verdict() {
        // Twenty overlapping admissions for nineteen tokens, none reporting what was left:
        // showing that no order works means trying every subset of them first.
        let spec = Spec::per_second(19, 1);
        let ops: Vec<Op> = (0..20)
            .map(|i| Op {
                seen: Seen::Allowed {
                    at: ms(5),
                    remaining: None,
                },
                ..allowed(i, 0, 5, 10, 0)
            })
            .collect();
        assert!(matches!(
            check_key(&spec, &ops, 1_000),
            Verdict::Unknown { .. }
        ));
        // Nineteen of them fit.
        assert_eq!(check_key(&spec, &ops[..19], 1_000), Verdict::Linearizable);
    }

    /// The same core-answered history seen from outside: each decision somewhere within a
    /// flight of 5 ms, a denial's wait in whole seconds. Still explained; and a token spent
    /// twice is still caught.
    #[test]
    fn blurred_times_and_rounded_waits_explain_a_correct_history_and_catch_a_wrong_one() {
        let bucket = TokenBucket::per_second(4, 3).unwrap();
        let spec = Spec::per_second(4, 3);
        let mut state = None;
        let mut ops = Vec::new();
        for i in 0..300u64 {
            let at = Nanos(3_000_000 + i * 45_000_000 + (i % 3) * 1_000_000);
            let (next, d) = bucket.transition(state, at, 1).unwrap();
            state = Some(next);
            let call = Nanos(at.as_u64() - 2_000_000);
            let precision = Precision {
                decided_within: Nanos(5_000_000),
                retry_after_unit: Nanos(S),
            };
            let seen = if d.allowed {
                Seen::Allowed {
                    at: call,
                    remaining: Some(d.remaining),
                }
            } else {
                let w = d.retry_after.unwrap().as_u64().div_ceil(S) * S;
                Seen::Denied {
                    at: call,
                    retry_after: Some(Nanos(w)),
                }
            };
            ops.push(Op {
                id: i,
                call,
                ret: Some(Nanos(call.as_u64() + 5_000_000)),
                cost: 1,
                seen,
                stamp: None,
                precision,
            });
        }
        assert!(ops.iter().any(|o| matches!(o.seen, Seen::Denied { .. })));
        assert_eq!(verdict(spec, &ops), Verdict::Linearizable);
        // The fourth admission claims the third's remaining.
        let Seen::Allowed { at, .. } = ops[3].seen else {
            panic!("the fourth was admitted")
        };
        ops[3].seen = Seen::Allowed {
            at,
            remaining: Some(1),
        };
        assert!(matches!(verdict(spec, &ops), Verdict::Violation(_)));
    }

    #[test]
    fn an_unknown_start_explains_an_early_denial_a_full_one_does_not() {
        let spec = Spec::per_second(2, 1);
        let ops = [denied(1, 0, 0, 1, None), allowed(2, 2000, 2000, 2001, 1)];
        assert!(matches!(verdict(spec, &ops), Verdict::Violation(_)));
        assert_eq!(
            check_key_from(&spec, &ops, DEFAULT_BUDGET, Initial::Unknown),
            Verdict::Linearizable
        );
        // Unknown is at most empty, never more: B = 2 at 1/s never asks for an hour.
        let hour = [denied(1, 0, 0, 1, Some(Nanos(3600 * S)))];
        let v = check_key_from(&spec, &hour, DEFAULT_BUDGET, Initial::Unknown);
        assert!(matches!(v, Verdict::Violation(_)), "{v:?}");
    }

    #[test]
    fn answers_no_state_gives_are_caught_even_when_the_moment_is_uncertain() {
        let spec = Spec::per_second(2, 1);
        let blur = |mut o: Op| {
            o.precision.decided_within = Nanos(S);
            o.precision.retry_after_unit = Nanos(S);
            o
        };
        // More left than the bucket holds, after a long idle time.
        let too_many = [blur(allowed(1, 5000, 5000, 5001, 5))];
        assert!(matches!(verdict(spec, &too_many), Verdict::Violation(_)));
        // A denial told to wait nothing.
        let ops = [
            allowed(1, 0, 0, 0, 1),
            allowed(2, 0, 0, 0, 0),
            blur(denied(3, 1, 1, 2, Some(Nanos(0)))),
        ];
        assert!(matches!(verdict(spec, &ops), Verdict::Violation(_)));
        // A denial of a full bucket is a phantom; one of an empty bucket with a wrong wait
        // is a violation but not a phantom.
        let Verdict::Violation(v) = verdict(spec, &[denied(1, 0, 0, 1, None)]) else {
            panic!("not caught")
        };
        assert!(v.phantom_denial, "{v:?}");
        let wrong_wait = [
            allowed(1, 0, 0, 0, 1),
            allowed(2, 0, 0, 0, 0),
            denied(3, 1, 1, 1, Some(Nanos(7))),
        ];
        let Verdict::Violation(v) = verdict(spec, &wrong_wait) else {
            panic!("not caught")
        };
        assert!(!v.phantom_denial, "{v:?}");
    }
}
