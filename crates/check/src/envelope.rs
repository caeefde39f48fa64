//! The token-bucket envelope: for every key and every interval `[t1, t2]` between two
//! admissions, admitted cost ≤ B + R·(t2 − t1), compared exactly in integers.
//!
//! Reports the worst excess (in requests, rounded up), the window and request ids that
//! witness it, and the total excess over each key's whole run. Admissions are placed on the
//! **store's** timeline (`decided_at`), the one clock every gateway shares in truth, so a
//! gateway's skewed clock shows up as excess rather than hiding it. The same checker runs per
//! key ([`admissions`]) and per client address for the edge layer ([`edge_admissions`]).

use crate::history::{Answer, Fnv, RequestRecord};
use ratelab_core::{Nanos, Policy, TokenBucket};
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasherDefault;
use std::net::IpAddr;

/// The envelope's constants: admitted·`period` ≤ `burst`·`period` + `amount`·Δt (Δt in ns,
/// `period` in ns): capacity B = `burst`, rate R = `amount` / `period`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Envelope {
    /// B.
    pub burst: u64,
    /// Tokens per `period`.
    pub amount: u64,
    /// The refill period, ns.
    pub period: u64,
}

impl Envelope {
    /// The envelope a policy advertises: a token bucket's B and R; any other policy's quota,
    /// `limit` per `window` (the fixed window's boundary spike exceeds it by design).
    pub fn of(policy: &Policy) -> Envelope {
        match policy {
            Policy::TokenBucket(b) => Envelope::of_bucket(b),
            other => {
                let q = ratelab_core::Algorithm::quota(other);
                Envelope {
                    burst: q.limit,
                    amount: q.limit,
                    period: q.window.as_u64(),
                }
            }
        }
    }

    /// A token bucket's envelope.
    pub fn of_bucket(b: &TokenBucket) -> Envelope {
        Envelope {
            burst: b.capacity(),
            amount: b.refill_amount(),
            period: b.refill_period().as_u64(),
        }
    }
}

/// An admitted request, as the checkers see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Admission {
    /// Store time of the deciding operation.
    pub at: Nanos,
    /// Request id.
    pub id: u64,
    /// Cost.
    pub cost: u64,
}

/// The worst envelope violation found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Witness {
    /// The key.
    pub key: String,
    /// First admission in the window.
    pub from: Nanos,
    /// Last admission in the window.
    pub to: Nanos,
    /// Cost admitted in the window.
    pub admitted: u64,
    /// B + R·(to − from), rounded down.
    pub bound: u64,
    /// Ids of the admitted requests in the window (at most [`MAX_WITNESS_IDS`]).
    pub ids: Vec<u64>,
}

/// Most request ids a witness lists.
pub const MAX_WITNESS_IDS: usize = 32;

/// What the envelope checker found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnvelopeReport {
    /// Largest excess over the envelope in any interval, over all keys, in requests (rounded up).
    pub max_excess: u64,
    /// Sum over keys of the excess over B + R·T across the key's whole run.
    pub total_excess: u64,
    /// Where `max_excess` happened, if anywhere.
    pub witness: Option<Witness>,
}

/// Groups the requests the client saw admitted by key, each sorted by time then id.
pub fn admissions(requests: &[RequestRecord]) -> BTreeMap<&str, Vec<Admission>> {
    group(requests.iter().filter_map(|r| match r.answer {
        Some((_, Answer::Allowed { decided_at, .. })) => Some((r.key.as_str(), decided_at, r)),
        _ => None,
    }))
}

/// [`admissions`] and the fail-open answers beside them, at the time each was answered: the
/// users' traffic that went through, whether the limiter or the store's failure let it.
pub fn admissions_with_fail_open(requests: &[RequestRecord]) -> BTreeMap<&str, Vec<Admission>> {
    group(requests.iter().filter_map(|r| match r.answer {
        Some((_, Answer::Allowed { decided_at, .. })) => Some((r.key.as_str(), decided_at, r)),
        Some((at, Answer::FailedOpen(_))) => Some((r.key.as_str(), at, r)),
        _ => None,
    }))
}

/// The network an edge limit counts `ip` under, by the checker's own masking: an IPv4
/// address alone, an IPv6 address by its first `v6_prefix` bits.
pub fn network(ip: IpAddr, v6_prefix: u8) -> String {
    match ip.to_canonical() {
        IpAddr::V4(v4) => format!("{v4}"),
        IpAddr::V6(v6) => {
            let bits = u32::from(v6_prefix.clamp(1, 128));
            let masked = u128::from(v6) & (u128::MAX << (128 - bits));
            format!("{}/{bits}", std::net::Ipv6Addr::from(masked))
        }
    }
}

/// Groups the requests the **edge** layer admitted by client network, each sorted by time
/// then id: an IPv4 address alone, an IPv6 address by its first `v6_prefix` bits (the edge's
/// promise: one subscriber's /64 is one client). The masking is the checker's own. An edge
/// admission spends an edge token whatever the per-key layer decides next, so a request the
/// per-key layer then denied still counts here.
pub fn edge_admissions(
    requests: &[RequestRecord],
    v6_prefix: u8,
) -> BTreeMap<String, Vec<Admission>> {
    group(requests.iter().filter_map(|r| match r.layers.edge {
        Some(Answer::Allowed { decided_at, .. }) => {
            Some((network(r.peer, v6_prefix), decided_at, r))
        }
        _ => None,
    }))
}

fn group<'a, K: Ord + std::hash::Hash + Clone>(
    admitted: impl Iterator<Item = (K, Nanos, &'a RequestRecord)>,
) -> BTreeMap<K, Vec<Admission>> {
    // Each key found by hash while grouping (a history holds one entry per request), ordered
    // once at the end; the index is never iterated, so its hash needs no random seed.
    let mut index: HashMap<K, usize, BuildHasherDefault<Fnv>> = HashMap::default();
    let mut groups: Vec<(K, Vec<Admission>)> = Vec::new();
    for (k, at, r) in admitted {
        let i = *index.entry(k).or_insert_with_key(|k| {
            groups.push((k.clone(), Vec::new()));
            groups.len() - 1
        });
        groups[i].1.push(Admission {
            at,
            id: r.id,
            cost: r.cost,
        });
    }
    groups
        .into_iter()
        .map(|(k, mut v)| {
            v.sort_unstable();
            (k, v)
        })
        .collect()
}

impl Envelope {
    /// B + R·T for a span of `span` ns, rounded down: the most the envelope admits in it.
    pub fn over(&self, span: u64) -> u64 {
        let b = u128::from(self.burst) * u128::from(self.period)
            + u128::from(self.amount) * u128::from(span);
        u64::try_from(b / u128::from(self.period.max(1))).unwrap_or(u64::MAX)
    }
}

/// B + R·T summed over keys, T each key's span from first to last admission, rounded down:
/// what a correct limiter could have admitted for exactly those keys over those spans.
pub fn allowance<K>(by_key: &BTreeMap<K, Vec<Admission>>, env: Envelope) -> u64 {
    by_key
        .values()
        .map(|adm| env.over(adm.last().map_or(0, |l| l.at.as_u64() - adm[0].at.as_u64())))
        .sum()
}

/// Runs the envelope checker over `by_key` (from [`admissions`] or [`edge_admissions`]).
pub fn envelope<K: AsRef<str>>(
    by_key: &BTreeMap<K, Vec<Admission>>,
    env: Envelope,
) -> EnvelopeReport {
    scan(
        by_key
            .iter()
            .map(|(k, adm)| (k.as_ref(), adm.iter().map(|a| Span::at(a.at, a.id, a.cost)))),
        env,
    )
}

/// An admission whose decision time is known only to lie in `[from, to]`: a request seen
/// from outside the limiter, sent at `from` and answered at `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Span {
    /// The earliest the decision may have been.
    pub from: Nanos,
    /// The latest.
    pub to: Nanos,
    /// Request id.
    pub id: u64,
    /// Cost.
    pub cost: u64,
}

impl Span {
    fn at(at: Nanos, id: u64, cost: u64) -> Span {
        Span {
            from: at,
            to: at,
            id,
            cost,
        }
    }
}

/// The envelope over admissions known only by their spans (any order). A window of
/// admissions is held to B + R·Δt with Δt the widest their spans allow (the first one's
/// `from` to the latest `to` so far), so every excess reported is an excess whatever the
/// decision times were within the spans.
///
/// One slow admission would widen every window that starts before its answer, so each key is
/// scanned twice: with every span, and without the spans wider than twice the key's median
/// width. Leaving admissions out can only lower a count, so the larger excess of the two is
/// still a certain one.
pub fn envelope_spans<K: AsRef<str>>(
    by_key: &BTreeMap<K, Vec<Span>>,
    env: Envelope,
) -> EnvelopeReport {
    let sorted: BTreeMap<&str, Vec<Span>> = by_key
        .iter()
        .map(|(k, v)| {
            let mut v = v.clone();
            v.sort_unstable();
            (k.as_ref(), v)
        })
        .collect();
    let all = scan(sorted.iter().map(|(k, v)| (*k, v.iter().copied())), env);
    let narrow = scan(
        sorted.iter().map(|(k, v)| {
            let width = |s: &Span| s.to.as_u64().saturating_sub(s.from.as_u64());
            let mut widths: Vec<u64> = v.iter().map(width).collect();
            widths.sort_unstable();
            let cap = widths
                .get(widths.len() / 2)
                .map_or(0, |m| m.saturating_mul(2));
            (*k, v.iter().copied().filter(move |s| width(s) <= cap))
        }),
        env,
    );
    if narrow.max_excess > all.max_excess {
        EnvelopeReport {
            // The whole run's excess is the all-spans scan's: it counts every admission.
            total_excess: all.total_excess,
            ..narrow
        }
    } else {
        all
    }
}

/// The envelope scan over each key's admissions, in order of their earliest time.
fn scan<'k, I: Iterator<Item = Span>>(
    by_key: impl Iterator<Item = (&'k str, I)>,
    env: Envelope,
) -> EnvelopeReport {
    let (b, a, p) = (
        i128::from(env.burst),
        i128::from(env.amount),
        i128::from(env.period),
    );
    let bp = b * p;
    let mut report = EnvelopeReport::default();
    let mut worst_scaled = 0i128;
    for (key, adm) in by_key {
        let adm: Vec<Span> = adm.collect();
        // excess(i, j) = (S_j − a·end_j) + (a·from_i − S_{i−1}) − B·P, end_j the latest `to`
        // up to j, maximised over i ≤ j with a running maximum of the second term: O(n).
        let mut s_prev = 0i128; // S_{j-1}
        let mut best = i128::MIN; // max over i ≤ j of a·from_i − S_{i−1}
        let mut best_i = 0usize;
        let mut end = 0i128;
        for (j, x) in adm.iter().enumerate() {
            let from = i128::from(x.from.as_u64());
            end = end.max(i128::from(x.to.as_u64()));
            let cand = a * from - s_prev;
            if cand > best {
                best = cand;
                best_i = j;
            }
            let s_j = s_prev + i128::from(x.cost) * p;
            let excess = s_j - a * end + best - bp;
            if excess > worst_scaled {
                worst_scaled = excess;
                let window = &adm[best_i..=j];
                let first = adm[best_i].from;
                let admitted: u64 = window.iter().map(|w| w.cost).sum();
                let bound = (bp + a * (end - i128::from(first.as_u64()))) / p;
                report.witness = Some(Witness {
                    key: key.to_owned(),
                    from: first,
                    to: Nanos(u64::try_from(end).unwrap_or(u64::MAX)),
                    admitted,
                    bound: u64::try_from(bound).unwrap_or(u64::MAX),
                    ids: window.iter().take(MAX_WITNESS_IDS).map(|w| w.id).collect(),
                });
            }
            s_prev = s_j;
        }
        if let Some(first) = adm.first() {
            let span = end - i128::from(first.from.as_u64());
            let over = s_prev - bp - a * span;
            if over > 0 {
                report.total_excess += u64::try_from((over + p - 1) / p).unwrap_or(u64::MAX);
            }
        }
    }
    if worst_scaled > 0 {
        report.max_excess = u64::try_from((worst_scaled + p - 1) / p).unwrap_or(u64::MAX);
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Layers;
    use crate::testing::{adm, record};

    #[test]
    fn edge_admissions_group_by_network_and_count_what_the_edge_admitted() {
        let admitted = Answer::Allowed {
            decided_at: Nanos(5),
            remaining: 0,
        };
        let denied = Answer::Denied {
            decided_at: Nanos(5),
            retry_after: Nanos(1),
        };
        let req = |id: u64, peer: &str, edge: Answer, per_key: Option<Answer>| {
            let mut r = record(id, per_key.or(Some(edge)), 0);
            r.peer = peer.parse().unwrap();
            r.layers = Layers {
                edge: Some(edge),
                per_key,
            };
            r
        };
        let requests = [
            // Admitted at the edge, denied at the per-key layer: still an edge admission.
            req(0, "2001:db8:1:2::1", admitted, Some(denied)),
            req(1, "2001:db8:1:2:ffff::9", admitted, None),
            req(2, "2001:db8:1:3::1", admitted, None),
            req(3, "192.0.2.1", denied, None),
            req(4, "192.0.2.1", admitted, None),
        ];
        let by = edge_admissions(&requests, 64);
        let count = |k: &str| by.get(k).map_or(0, Vec::len);
        assert_eq!(count("2001:db8:1:2::/64"), 2, "{by:?}");
        assert_eq!(count("2001:db8:1:3::/64"), 1);
        assert_eq!(count("192.0.2.1"), 1);
        assert_eq!(by.len(), 3);
        assert_eq!(
            edge_admissions(&requests, 128).len(),
            4,
            "per address at /128"
        );
    }

    /// B = 2, R = 1/s.
    const ENV: Envelope = Envelope {
        burst: 2,
        amount: 1,
        period: 1_000_000_000,
    };

    #[test]
    fn envelope_passes_a_history_within_bounds() {
        let r = envelope(&adm(&[0, 0, 1000, 2000, 3000]), ENV);
        assert_eq!(r.max_excess, 0);
        assert_eq!(r.total_excess, 0);
        assert_eq!(r.witness, None);
    }

    #[test]
    fn envelope_catches_a_known_bad_history() {
        // Four at t = 0 with B = 2: two over. Then one at 500 ms: bound 2.5 over [0, 500].
        let r = envelope(&adm(&[0, 0, 0, 0, 500]), ENV);
        assert_eq!(
            r.max_excess, 3,
            "5 admitted against 2.5: 2.5 over, rounded up"
        );
        let w = r.witness.unwrap();
        assert_eq!(
            (w.admitted, w.bound, w.from, w.to),
            (5, 2, Nanos(0), Nanos::from_millis(500))
        );
        assert_eq!(w.ids, vec![0, 1, 2, 3, 4]);
        assert_eq!(r.total_excess, 3);
    }

    #[test]
    fn envelope_finds_excess_in_an_inner_window() {
        // Well spaced, then three at 10 s: B = 2 allows two at once plus what refilled.
        let r = envelope(&adm(&[0, 5000, 10_000, 10_000, 10_000]), ENV);
        assert_eq!(r.max_excess, 1);
        assert_eq!(r.witness.unwrap().from, Nanos::from_secs(10));
    }

    fn spans(v: &[(u64, u64)]) -> BTreeMap<&'static str, Vec<Span>> {
        let spans = v
            .iter()
            .enumerate()
            .map(|(i, &(from, to))| Span {
                from: Nanos::from_millis(from),
                to: Nanos::from_millis(to),
                id: i as u64,
                cost: 1,
            })
            .collect();
        BTreeMap::from([("k", spans)])
    }

    #[test]
    fn spans_are_held_to_the_widest_window_they_allow() {
        // Three admissions for B = 2 whose spans stretch over 1.5 s: decided at 0, 0 and
        // 1.5 s they fit (2 + 1.5), so no excess can be claimed.
        let r = envelope_spans(&spans(&[(0, 10), (0, 10), (5, 1500)]), ENV);
        assert_eq!(r.max_excess, 0, "{r:?}");
        // Four within 10 ms: over B + R·10 ms whatever the decision times.
        let r = envelope_spans(&spans(&[(0, 10), (0, 10), (1, 10), (2, 10)]), ENV);
        assert_eq!(r.max_excess, 2);
        let w = r.witness.unwrap();
        assert_eq!((w.from, w.to), (Nanos(0), Nanos::from_millis(10)));
        assert_eq!((w.admitted, w.bound), (4, 2));
        // One slow admission does not blind the windows it overlaps: four quick ones within
        // 10 ms are still over, beside one that took 5 s.
        let r = envelope_spans(
            &spans(&[(0, 5000), (0, 10), (0, 10), (1, 10), (2, 10)]),
            ENV,
        );
        assert_eq!(r.max_excess, 2, "{r:?}");
        // Zero-width spans are the point checker.
        let points = envelope_spans(&spans(&[(0, 0), (0, 0), (0, 0), (0, 0), (500, 500)]), ENV);
        assert_eq!(points, envelope(&adm(&[0, 0, 0, 0, 500]), ENV));
    }
}
