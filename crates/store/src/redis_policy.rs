//! A limit of any family on Redis, as a [`StoreClient`] over [`Policy`]: a token bucket is a
//! [`RedisStore`] (its own script, the lean connection, a cluster's refunds); every other
//! family, and any request whose limits mix families, is one call of
//! [`LIMITS_SCRIPT`](crate::redis_limits::LIMITS_SCRIPT) over every key, all or nothing.
//!
//! Both scripts store a token bucket the same way, so a limit keeps its buckets whichever
//! script decided them. On a Redis Cluster a request's keys must share a slot unless every
//! limit it meets is a token bucket (whose refunds make cross-slot requests all or nothing):
//! the call is refused otherwise, before anything is spent.
//!
//! The naive path (`get`, the transition in the caller, `set`) reads and writes the state as
//! the script does ([`encode`], [`decode`]), refusing what the script refuses.

use crate::client::{AllApplied, AllFuture, AllItem, Applied, Read, StoreClient};
use crate::redis_conn::slot;
use crate::redis_limits::{self, LIMITS_SCRIPT, ScriptLimit};
use crate::redis_store::{RedisSetupError, RedisStore};
use crate::{Key, LimitError, StoreError};
use ratelab_core::first_hit::FirstHitWindowState;
use ratelab_core::stepped::SteppedBucketState;
use ratelab_core::window::{FixedWindowState, SlidingWindowState};
use ratelab_core::{Algorithm, Nanos, Policy, PolicyState};
use std::sync::{Arc, LazyLock};

static SCRIPT: LazyLock<Arc<redis::Script>> =
    LazyLock::new(|| Arc::new(redis::Script::new(&LIMITS_SCRIPT)));

/// A limit of any family on Redis.
#[derive(Clone, Debug)]
pub struct RedisPolicy {
    policy: Policy,
    limit: ScriptLimit,
    /// The limit's store: its key prefix, connection and options (a token bucket's own).
    store: RedisStore,
}

impl RedisPolicy {
    /// A limit running `policy` on the keys under `prefix`, over `base`'s connection.
    pub fn new(
        base: &RedisStore,
        policy: Policy,
        prefix: &str,
    ) -> Result<RedisPolicy, RedisSetupError> {
        let limit = ScriptLimit::new(policy).map_err(RedisSetupError::PolicyTooLarge)?;
        let bucket = match policy {
            Policy::TokenBucket(b) => b,
            _ => *base.bucket(),
        };
        Ok(RedisPolicy {
            policy,
            limit,
            store: base.sibling(bucket, prefix)?,
        })
    }

    fn is_bucket(&self) -> bool {
        matches!(self.policy, Policy::TokenBucket(_))
    }

    /// One call of the limits script over every item's key.
    async fn apply_script(
        items: &[AllItem<'_, RedisPolicy>],
        now: Option<Nanos>,
    ) -> Result<AllApplied, LimitError> {
        let Some((first, _, _)) = items.first() else {
            return Err(LimitError::Store(StoreError::Corrupt));
        };
        let keys: Vec<String> = items.iter().map(|(c, k, _)| c.store.key(k)).collect();
        if first.store.is_cluster()
            && keys
                .iter()
                .any(|k| slot(k.as_bytes()) != slot(keys[0].as_bytes()))
        {
            return Err(LimitError::Store(StoreError::Unavailable));
        }
        let parts: Vec<(&str, &ScriptLimit, u64)> = keys
            .iter()
            .zip(items)
            .map(|(k, (c, _, cost))| (k.as_str(), &c.limit, *cost))
            .collect();
        let mut conn = first.store.conn().clone();
        let call = redis_limits::decide(&mut conn, &SCRIPT, &parts, now);
        let all = tokio::time::timeout(first.store.timeout(), call)
            .await
            .unwrap_or(Err(LimitError::Store(StoreError::Timeout)))?;
        if all.allowed {
            first.store.wait_for_replica(&keys[0]).await?;
        }
        Ok(all)
    }
}

impl StoreClient for RedisPolicy {
    type Algorithm = Policy;

    fn algorithm(&self) -> &Policy {
        &self.policy
    }

    fn apply_all<'a>(items: &'a [AllItem<'a, Self>], now: Option<Nanos>) -> Option<AllFuture<'a>> {
        let (first, _, _) = items.first()?;
        if !items
            .iter()
            .all(|(c, _, _)| c.store.same_server(&first.store))
        {
            return None;
        }
        Some(Box::pin(async move {
            for (i, (c, k, _)) in items.iter().enumerate() {
                if items[..i]
                    .iter()
                    .any(|(d, l, _)| d.store.key(l) == c.store.key(k))
                {
                    return Err(LimitError::RepeatedKey);
                }
            }
            if items.iter().all(|(c, _, _)| c.is_bucket()) {
                let buckets: Vec<AllItem<'_, RedisStore>> = items
                    .iter()
                    .map(|(c, k, cost)| (&c.store, *k, *cost))
                    .collect();
                return RedisStore::apply_many(&buckets, now).await;
            }
            RedisPolicy::apply_script(items, now).await
        }))
    }

    async fn get(&self, key: &Key) -> Result<Read<PolicyState>, StoreError> {
        let (text, store_time) = self.store.get_text(key).await?;
        let state = text.map(|t| decode(&self.policy, &t)).transpose()?;
        Ok(Read { state, store_time })
    }

    async fn set(&self, key: &Key, state: PolicyState, ttl: Nanos) -> Result<(), StoreError> {
        let text = encode(&self.policy, &state).ok_or(StoreError::Corrupt)?;
        self.store.set_text(key, text, ttl).await
    }

    async fn apply(&self, key: &Key, now: Option<Nanos>, cost: u64) -> Result<Applied, LimitError> {
        let items = [(self, key, cost)];
        let all = match Self::apply_all(&items, now) {
            Some(f) => f.await?,
            None => return Err(LimitError::Store(StoreError::Unavailable)),
        };
        Ok(Applied {
            decision: all.decisions[0],
            store_time: all.store_time,
        })
    }
}

/// `state` as the scripts store it; `None` when it is not `policy`'s.
pub fn encode(policy: &Policy, state: &PolicyState) -> Option<String> {
    let instant = |t: Nanos| (t.as_u64() / 1_000_000_000, t.as_u64() % 1_000_000_000);
    // One arm per algorithm, no wildcard: a new one does not compile until it is stored.
    Some(match policy {
        Policy::TokenBucket(b) => {
            let PolicyState::TokenBucket(s) = state else {
                return None;
            };
            let u = 1_000_000_000 * u128::from(b.refill_amount());
            format!("{} {}", s.tat_scaled / u, s.tat_scaled % u)
        }
        Policy::FixedWindow(_) => {
            let PolicyState::FixedWindow(s) = state else {
                return None;
            };
            format!("{} {}", s.window, s.count)
        }
        Policy::FirstHitWindow(_) => {
            let PolicyState::FirstHitWindow(s) = state else {
                return None;
            };
            let (sec, ns) = instant(s.start);
            format!("{sec} {ns} {}", s.count)
        }
        Policy::SlidingWindow(_) => {
            let PolicyState::SlidingWindow(s) = state else {
                return None;
            };
            format!("{} {} {}", s.window, s.current, s.previous)
        }
        Policy::SteppedBucket(_) => {
            let PolicyState::SteppedBucket(s) = state else {
                return None;
            };
            let (sec, ns) = instant(s.anchor);
            format!("{} {sec} {ns}", s.tokens)
        }
    })
}

/// A stored state as `policy`'s, by the scripts' own rule: as many decimal fields as the
/// algorithm stores, one space apart, each of at most 16 digits (a token bucket's first of
/// at most 15), nanoseconds below 10⁹, no count above the limit. Anything else is
/// [`StoreError::Corrupt`]: a state that cannot be read is never taken as empty.
pub fn decode(policy: &Policy, text: &str) -> Result<PolicyState, StoreError> {
    let fields: Vec<u64> = text
        .split(' ')
        .map(|v| {
            (!v.is_empty() && v.len() <= 16 && v.bytes().all(|b| b.is_ascii_digit()))
                .then(|| v.parse().ok())
                .flatten()
                .ok_or(StoreError::Corrupt)
        })
        .collect::<Result<_, _>>()?;
    let instant = |sec: u64, ns: u64| {
        (ns < 1_000_000_000)
            .then(|| sec.checked_mul(1_000_000_000)?.checked_add(ns))
            .flatten()
            .map(Nanos)
            .ok_or(StoreError::Corrupt)
    };
    let limit = policy.quota().limit;
    let within = |n: u64| {
        if n <= limit {
            Ok(n)
        } else {
            Err(StoreError::Corrupt)
        }
    };
    let state = match (policy, fields.as_slice()) {
        (Policy::TokenBucket(b), &[hi, lo]) => {
            let u = 1_000_000_000 * u128::from(b.refill_amount());
            if hi >= 1_000_000_000_000_000 || u128::from(lo) >= u {
                return Err(StoreError::Corrupt);
            }
            PolicyState::TokenBucket(ratelab_core::TokenBucketState {
                tat_scaled: u128::from(hi) * u + u128::from(lo),
            })
        }
        (Policy::FixedWindow(_), &[window, count]) => PolicyState::FixedWindow(FixedWindowState {
            window,
            count: within(count)?,
        }),
        (Policy::FirstHitWindow(_), &[sec, ns, count]) => {
            PolicyState::FirstHitWindow(FirstHitWindowState {
                start: instant(sec, ns)?,
                count: within(count)?,
            })
        }
        (Policy::SlidingWindow(_), &[window, current, previous]) => {
            PolicyState::SlidingWindow(SlidingWindowState {
                window,
                current: within(current)?,
                previous: within(previous)?,
            })
        }
        (Policy::SteppedBucket(_), &[tokens, sec, ns]) => {
            PolicyState::SteppedBucket(SteppedBucketState {
                tokens: within(tokens)?,
                anchor: instant(sec, ns)?,
            })
        }
        _ => return Err(StoreError::Corrupt),
    };
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratelab_core::{FixedWindow, SlidingWindow, SteppedBucket, TokenBucket};

    #[test]
    fn a_state_reads_back_as_written_and_anything_else_is_corrupt() {
        let ms = Nanos::from_millis;
        let window = Policy::SlidingWindow(SlidingWindow::new(5, ms(1_000)).unwrap());
        let state = PolicyState::SlidingWindow(SlidingWindowState {
            window: 1_764_500,
            current: 3,
            previous: 5,
        });
        let text = encode(&window, &state).unwrap();
        assert_eq!(decode(&window, &text), Ok(state));
        let fixed = Policy::FixedWindow(FixedWindow::new(5, ms(1_000)).unwrap());
        assert_eq!(encode(&fixed, &state), None, "another algorithm's state");
        let stepped = Policy::SteppedBucket(SteppedBucket::new(4, 1, ms(100)).unwrap());
        let bucket = Policy::TokenBucket(TokenBucket::per_second(5, 2).unwrap());
        for (policy, bad) in [
            (&window, "1 2"),
            (&window, "1  2 3"),
            (&window, " 1 2 3"),
            (&window, "1 6 2"),
            (&fixed, "1 6"),
            (&fixed, "1 -1"),
            (&stepped, "5 1764500000 0"),
            (&stepped, "1 1764500000 1000000000"),
            (&bucket, "1234567890123456 0"),
            (&bucket, "1 2000000000"),
        ] {
            assert_eq!(decode(policy, bad), Err(StoreError::Corrupt), "{bad:?}");
        }
    }
}
