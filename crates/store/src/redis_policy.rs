//! A limit of any family on Redis, as a [`StoreClient`] over [`Policy`]: a token bucket is a
//! [`RedisStore`] (its own script, a cluster's refunds); every other family, and any request
//! whose limits mix families, is one call of
//! [`LIMITS_SCRIPT`](crate::redis_limits::LIMITS_SCRIPT) over every key, all or nothing.
//! On one server over plain TCP both scripts take the store's lean connection
//! ([`crate::redis_lane`]), which loads a script again itself after a `NOSCRIPT` (a
//! restarted server: the first call after it is decided).
//!
//! Both scripts store a token bucket the same way, so a limit keeps its buckets whichever
//! script decided them. On a Redis Cluster a request whose keys lie in several slots is
//! decided slot by slot, and given back where it was admitted if another slot denied it
//! (`redis_slots`), whatever its families.
//!
//! The naive path (`get`, the transition in the caller, `set`) reads and writes the state as
//! the script does ([`encode`], [`decode`]), refusing what the script refuses.

use crate::client::{AllApplied, AllFuture, AllItem, Applied, Read, StoreClient};
use crate::redis_conn::{Conn, slot};
use crate::redis_limits::{self, LIMITS_SCRIPT, ScriptLimit};
use crate::redis_slots::{SlotClient, apply_by_slot};
pub use crate::redis_state::{decode, encode};
use crate::redis_store::{RedisSetupError, RedisStore};
use crate::script_loads::ScriptLoads;
use crate::{Key, LimitError, Sent, SentReply, StoreError};
use ratelab_core::{Nanos, Policy, PolicyState};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

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

    /// One call of the limits script over every item's key; on a cluster, one per slot.
    /// The per-slot path, the calls through redis-rs and the wait for a replica are boxed:
    /// the lane's call, which a server runs per request, stays the size of its own state.
    async fn apply_script(
        items: &[AllItem<'_, RedisPolicy>],
        now: Option<Nanos>,
    ) -> Result<AllApplied, LimitError> {
        let Some((first, _, _)) = items.first() else {
            return Err(LimitError::Store(StoreError::Corrupt));
        };
        let keys: Vec<String> = items.iter().map(|(c, k, _)| c.store.key(k)).collect();
        if first.store.is_cluster() {
            let slots: Vec<u16> = keys.iter().map(|k| slot(k.as_bytes())).collect();
            if slots.iter().any(|s| *s != slots[0]) {
                return Box::pin(apply_by_slot(items, &slots, now)).await;
            }
        }
        let parts = Self::parts(&keys, items);
        let all = match first.store.lane() {
            // The lane's call is bounded by the store's timeout (or its caller's) already.
            Some(lane) => {
                redis_limits::decide_on_lane(&first.store, lane, SCRIPT.get_hash(), &parts, now)
                    .await?
            }
            None => {
                let mut conn = first.store.conn().clone();
                let loads = first.store.script_loads();
                let call = redis_limits::decide_counted(&mut conn, loads, &SCRIPT, &parts, now);
                Box::pin(first.timed(call)).await?
            }
        };
        if all.allowed && first.store.waits() {
            Box::pin(first.store.wait_for_replica(&keys[0])).await?;
        }
        Ok(all)
    }

    /// The items as their token buckets' (every item a bucket: one call of its script).
    fn buckets<'a>(items: &[AllItem<'a, RedisPolicy>]) -> Vec<AllItem<'a, RedisStore>> {
        items
            .iter()
            .map(|(c, k, cost)| (&c.store, *k, *cost))
            .collect()
    }

    /// The script's parts: each item's state key (of `keys`, in order), limit and cost.
    fn parts<'k>(
        keys: &'k [String],
        items: &'k [AllItem<'_, RedisPolicy>],
    ) -> Vec<(&'k str, &'k ScriptLimit, u64)> {
        keys.iter()
            .zip(items)
            .map(|(k, (c, _, cost))| (k.as_str(), &c.limit, *cost))
            .collect()
    }

    /// `call` within the store's timeout.
    async fn timed<T>(
        &self,
        call: impl Future<Output = Result<T, LimitError>>,
    ) -> Result<T, LimitError> {
        tokio::time::timeout(self.store.timeout(), call)
            .await
            .unwrap_or(Err(LimitError::Store(StoreError::Timeout)))
    }
}

impl SlotClient for RedisPolicy {
    fn policy(&self) -> Policy {
        self.policy
    }

    fn refund_args(&self) -> (&'static str, [u64; 3]) {
        self.limit.script_args()
    }

    fn state_key(&self, key: &Key) -> String {
        self.store.key(key)
    }

    fn connection(&self) -> &Conn {
        self.store.conn()
    }

    fn script_loads(&self) -> &ScriptLoads {
        self.store.script_loads()
    }

    fn call_timeout(&self) -> Duration {
        self.store.timeout()
    }

    async fn decide_slot<'a>(
        items: &'a [AllItem<'a, Self>],
        now: Option<Nanos>,
    ) -> Result<(AllApplied, Vec<String>), LimitError> {
        let Some((first, _, _)) = items.first() else {
            return Err(LimitError::Store(StoreError::Corrupt));
        };
        let keys: Vec<String> = items.iter().map(|(c, k, _)| c.store.key(k)).collect();
        let parts = Self::parts(&keys, items);
        let mut conn = first.store.conn().clone();
        let loads = first.store.script_loads();
        let call =
            redis_limits::decide_keeping_states_counted(&mut conn, loads, &SCRIPT, &parts, now);
        let (all, written) = first.timed(call).await?;
        if all.allowed {
            first.store.wait_for_replica(&keys[0]).await?;
        }
        Ok((all, written))
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
                    .any(|(d, l, _)| d.store.same_key(l, &c.store, k))
                {
                    return Err(LimitError::RepeatedKey);
                }
            }
            if items.iter().all(|(c, _, _)| c.is_bucket()) {
                return RedisStore::apply_many(&Self::buckets(items), now).await;
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

    /// Sent on the store's lane (one server, no wait for a replica): a token bucket's call
    /// of its own script, any other family's of the limits script.
    fn send(&self, key: &Key, now: Option<Nanos>, cost: u64) -> Option<Result<Sent, LimitError>> {
        if self.is_bucket() {
            return self.store.send_one(key, now, cost);
        }
        let lane = self.store.lane().filter(|_| !self.store.waits())?;
        let state_key = self.store.key(key);
        let parts = [(state_key.as_str(), &self.limit, cost)];
        Some(redis_limits::send_on_lane(
            lane,
            SCRIPT.get_hash(),
            &parts,
            now,
        ))
    }

    fn read_sent(&self, reply: SentReply) -> Option<Result<Applied, LimitError>> {
        if self.is_bucket() {
            return self.store.read_one(reply);
        }
        let all = redis_limits::read_sent(&[("", &self.limit, 0)], reply)?;
        Some(all.map(|all| Applied {
            decision: all.decisions[0],
            store_time: all.store_time,
        }))
    }

    fn send_all(
        items: &[AllItem<'_, Self>],
        now: Option<Nanos>,
    ) -> Option<Result<Sent, LimitError>> {
        let (first, _, _) = items.first()?;
        let lane = first.store.lane().filter(|_| !first.store.waits())?;
        if !items
            .iter()
            .all(|(c, _, _)| c.store.same_server(&first.store))
        {
            return None;
        }
        // Chosen as `apply_all` chooses, and `read_sent_all` reads alike (`send_many`
        // refuses as `apply_all` does: a key given twice first, then a cost).
        if items.iter().all(|(c, _, _)| c.is_bucket()) {
            return RedisStore::send_many(&Self::buckets(items), now);
        }
        let keys: Vec<String> = items.iter().map(|(c, k, _)| c.store.key(k)).collect();
        if keys.iter().enumerate().any(|(i, k)| keys[..i].contains(k)) {
            return Some(Err(LimitError::RepeatedKey));
        }
        let parts = Self::parts(&keys, items);
        Some(redis_limits::send_on_lane(
            lane,
            SCRIPT.get_hash(),
            &parts,
            now,
        ))
    }

    fn read_sent_all(
        items: &[AllItem<'_, Self>],
        reply: SentReply,
    ) -> Option<Result<AllApplied, LimitError>> {
        if items.iter().all(|(c, _, _)| c.is_bucket()) {
            return RedisStore::read_many(&Self::buckets(items), reply);
        }
        let parts: Vec<(&str, &ScriptLimit, u64)> =
            items.iter().map(|(c, _, _)| ("", &c.limit, 0)).collect();
        redis_limits::read_sent(&parts, reply)
    }

    async fn apply(&self, key: &Key, now: Option<Nanos>, cost: u64) -> Result<Applied, LimitError> {
        // One key: no repeat, one server, one slot; decided without a boxed future.
        if self.is_bucket() {
            return self.store.apply_one(key, now, cost).await;
        }
        let all = RedisPolicy::apply_script(&[(self, key, cost)], now).await?;
        Ok(Applied {
            decision: all.decisions[0],
            store_time: all.store_time,
        })
    }
}
