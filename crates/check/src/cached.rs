//! The denial-cache checker: every 429 a gateway answered from its local denial cache,
//! without a store call, must be covered by a denial the store itself gave that gateway.
//!
//! The specification, from the token bucket's definition and not from the cache's code: a
//! bucket's theoretical arrival time (TAT) never moves earlier — time passing leaves it, and
//! every admission pushes it later — so a store denial of cost c on a bucket, decided at store
//! time d with wait r, means the store denies every request of cost ≥ c on that bucket at
//! every store time before d + r. A cached answer at time t (the simulation's clock, which is
//! the simulated store's) is justified by such a denial answered to the same gateway before
//! t, with t < d + r, and the wait the client was told ends by d + r. Anything else is a
//! cache that denied what the store might have admitted.
//!
//! It holds the cache to what the store said, not the store to its specification: a store
//! that itself forgets a bucket (the naive path's lost update, a cleanup that deletes a live
//! bucket) is the envelope and linearizability checkers' to catch.

use crate::history::{Answer, Layer, RequestRecord};
use ratelab_core::Nanos;

/// A store denial: when it was answered, until when it holds, and the cost it was for.
type Covered = (Nanos, Nanos, u64);

/// Cache-answered requests that no earlier store denial justifies. The specification: TAT
/// never moves earlier, so a store denial on key k decided at store time d with wait r means
/// the store denies k (at that cost or more) at every store time before d + r; a cached
/// answer at time t (the store's clock is the simulation's) is justified by such a denial,
/// answered to the same gateway before t, with t < d + r.
pub fn unjustified(requests: &[RequestRecord]) -> u64 {
    use std::collections::BTreeMap;
    // A layer's bucket: the key at the per-key layer, the client's network at the edge (as
    // the gateways count it: an IPv6 address by its /64).
    let bucket = |r: &RequestRecord, l: Layer| match l {
        Layer::PerKey => r.key.clone(),
        Layer::Edge => crate::envelope::network(r.peer, 64),
    };
    // Per (gateway, layer, bucket): the store's denials, as (answered at, until, cost).
    let mut denials: BTreeMap<(u32, Layer, String), Vec<Covered>> = BTreeMap::new();
    for r in requests {
        for l in Layer::ALL {
            if let (
                Some((answered, _)),
                Some(Answer::Denied {
                    decided_at,
                    retry_after,
                }),
            ) = (&r.answer, r.layers.get(l))
            {
                denials
                    .entry((r.gateway, l, bucket(r, l)))
                    .or_default()
                    .push((*answered, decided_at.saturating_add(retry_after), r.cost));
            }
        }
    }
    let mut unjustified = 0;
    for r in requests {
        for l in Layer::ALL {
            let (Some((t, _)), Some(Answer::Cached { retry_after })) = (&r.answer, r.layers.get(l))
            else {
                continue;
            };
            // Covered, and the wait the client was told ends within the store's.
            let justified = denials
                .get(&(r.gateway, l, bucket(r, l)))
                .is_some_and(|ds| {
                    ds.iter().any(|&(answered, until, cost)| {
                        answered <= *t
                            && *t < until
                            && cost <= r.cost
                            && t.saturating_add(retry_after) <= until
                    })
                });
            unjustified += u64::from(!justified);
        }
    }
    unjustified
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::record;

    #[test]
    fn a_cached_answer_past_the_stores_wait_is_caught() {
        let denied = Answer::Denied {
            decided_at: Nanos::from_secs(0),
            retry_after: Nanos::from_millis(2_500),
        };
        let cached = Answer::Cached {
            retry_after: Nanos::from_millis(1_000),
        };
        let mut h = vec![record(0, Some(denied), 0), record(1, Some(cached), 0)];
        h[0].layers.per_key = Some(denied);
        h[1].layers.per_key = Some(cached);
        assert_eq!(unjustified(&h), 0, "at 1 s, within the store's 2.5 s");
        // A wait told past the store's.
        h[1].layers.per_key = Some(Answer::Cached {
            retry_after: Nanos::from_millis(1_600),
        });
        assert_eq!(unjustified(&h), 1);
        h[1].layers.per_key = Some(cached);
        let mut late = record(3, Some(cached), 0);
        late.layers.per_key = Some(cached);
        h.push(late);
        assert_eq!(unjustified(&h), 1, "at 3 s, past it");
        // A bigger request's denial does not cover a smaller one.
        h.truncate(2);
        h[0].cost = 2;
        assert_eq!(unjustified(&h), 1);
        // Nor does another gateway's.
        h[0].cost = 1;
        h[1].gateway = 1;
        assert_eq!(unjustified(&h), 1);
    }
}
