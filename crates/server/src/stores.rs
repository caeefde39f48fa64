//! Where a server's limits keep their buckets: the embedded in-memory store or Redis (one
//! server or a Cluster), each limit in a key space of its own on one shared store, so one
//! request's limits are decided in one all-or-nothing step.

use crate::limits::FileLimit;
use crate::rls::config::Domain;
use ratelab_core::{Nanos, Policy, TokenBucket};
use ratelab_gateway::Env as _;
use ratelab_gateway::http::TokioEnv;
use ratelab_store::redis_policy::RedisPolicy;
use ratelab_store::redis_store::{RedisOptions, RedisStore};
use ratelab_store::{MemoryStore, SharedClient, StoreClient};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

type Clock = fn() -> Nanos;
/// An in-memory limit's client: its key space in the store every limit shares.
pub type Local = SharedClient<Policy, Clock>;

fn wall_clock() -> Nanos {
    TokioEnv.now()
}

/// Where a server's limits keep their buckets: each limit gets a client of its own.
pub trait Stores: Clone + Send + Sync + 'static {
    /// A limit's store client.
    type Client: StoreClient + Clone + Send + Sync + 'static;
    /// A client for a limit running `policy` on the keys under `prefix`.
    fn client(
        &self,
        prefix: &str,
        policy: Policy,
    ) -> impl Future<Output = Result<Self::Client, String>> + Send;
    /// Whether `client` runs exactly `policy` (so a reloaded limit can keep its buckets).
    fn runs(client: &Self::Client, policy: &Policy) -> bool;

    /// When admissions wait for a replica: how many waits so far came back with none (the
    /// admission stands, but a failover may lose it). `None` when nothing waits.
    fn waits_short(&self) -> Option<u64> {
        None
    }

    /// Checks that this store can run every limit and every domain's limit of a limits file
    /// (`file`, `text`), with errors located in the file. The default accepts everything.
    fn check(
        &self,
        file: &str,
        text: &str,
        limits: &[FileLimit],
        domains: &[Domain],
    ) -> Result<(), String> {
        let _ = (file, text, limits, domains);
        Ok(())
    }
}

/// The embedded in-memory store, shared by every limit (each in its own key space), so one
/// request's limits are decided in one all-or-nothing step.
#[derive(Clone, Debug)]
pub struct Memory {
    store: Arc<MemoryStore<Policy>>,
}

impl Memory {
    /// A new, empty store.
    pub fn new() -> Memory {
        // The store's own policy is never used: every limit's client brings its own.
        let unused = Policy::TokenBucket(TokenBucket::per_second(1, 1).expect("a valid bucket"));
        Memory {
            store: Arc::new(MemoryStore::new(unused)),
        }
    }
}

impl Default for Memory {
    fn default() -> Self {
        Memory::new()
    }
}

impl Stores for Memory {
    type Client = Local;

    async fn client(&self, prefix: &str, policy: Policy) -> Result<Local, String> {
        SharedClient::new(self.store.clone(), policy, prefix, wall_clock as Clock)
            .map_err(|e| format!("key prefix {prefix:?}: {e}"))
    }

    fn runs(client: &Local, policy: &Policy) -> bool {
        client.algorithm() == policy
    }
}

/// Redis: one connection shared by every limit (each under its own key prefix), so one
/// request's limits are decided in one script call.
#[derive(Clone, Debug)]
pub struct Redis {
    conn: RedisStore,
    /// Whether admissions wait for a replica.
    waits: bool,
}

impl Redis {
    /// Connects to `url` (one server, or a cluster's `redis+cluster://` URL), with `timeout`
    /// for each call.
    pub async fn connect(url: &str, timeout: Duration) -> Result<Redis, String> {
        let (bucket, options) = Redis::setup(timeout)?;
        // Every decision goes through the gateway's pipeline, under the request's deadline.
        let conn = RedisStore::connect(url, bucket, options)
            .await
            .map_err(|e| e.to_string())?
            .bounded_by_caller();
        Ok(Redis { conn, waits: false })
    }

    /// Connects to the Redis Cluster of `seeds`, with `timeout` for each call. A request's
    /// limits whose keys are in different slots are decided slot by slot, refunded where
    /// admitted when any slot denies (`ratelab_store::redis_slots`).
    pub async fn connect_cluster(seeds: &[String], timeout: Duration) -> Result<Redis, String> {
        let (bucket, options) = Redis::setup(timeout)?;
        let conn = RedisStore::connect_cluster(seeds, bucket, options)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Redis { conn, waits: false })
    }

    /// The same store, answering each admission only once a replica holds its write, or
    /// after `wait` ([`RedisStore::with_wait`]).
    pub fn with_wait(self, wait: Option<Duration>) -> Redis {
        match wait {
            Some(w) => Redis {
                conn: self.conn.with_wait(1, w),
                waits: true,
            },
            None => self,
        }
    }

    /// The shared connection's own bucket (never used: every limit's sibling brings its own)
    /// and options.
    fn setup(timeout: Duration) -> Result<(TokenBucket, RedisOptions), String> {
        let options = RedisOptions {
            prefix: "ratelab:".into(),
            timeout,
        };
        Ok((
            TokenBucket::per_second(1, 1).map_err(|e| e.to_string())?,
            options,
        ))
    }
}

impl Stores for Redis {
    type Client = RedisPolicy;

    async fn client(&self, prefix: &str, policy: Policy) -> Result<RedisPolicy, String> {
        crate::policy::redis_can_run(&policy)?;
        RedisPolicy::new(&self.conn, policy, prefix).map_err(|e| e.to_string())
    }

    fn runs(client: &RedisPolicy, policy: &Policy) -> bool {
        client.algorithm() == policy
    }

    fn waits_short(&self) -> Option<u64> {
        self.waits.then(|| self.conn.waits_short())
    }

    fn check(
        &self,
        file: &str,
        text: &str,
        limits: &[FileLimit],
        domains: &[Domain],
    ) -> Result<(), String> {
        crate::limits::check_redis(file, text, limits)?;
        crate::rls::config::check_redis(domains)
            .map_err(|(path, msg)| crate::limits::located(file, text, &path, msg).to_string())
    }
}
