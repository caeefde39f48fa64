//! The Redis store: the token bucket's two access paths on a real `redis-server`.
//!
//! - naive: `GET` (pipelined with `TIME`, one round trip), the transition in the caller, then
//!   `SET … PX ttl`: two round trips and the lost-update window between them;
//! - atomic: one Lua script (`token_bucket.lua`, loaded once and run by `EVALSHA`, reloaded on
//!   `NOSCRIPT`) that performs refill-and-take in one round trip, on Redis `TIME` by default or
//!   on the caller's `now` (to reproduce the client-clock-skew pitfall).
//!
//! The script computes exactly what `ratelab_core::TokenBucket` computes — the conformance
//! tests compare every decision field — provided every intermediate stays below 2^53, which
//! [`RedisStore::connect`] checks: `10⁹ · refill_amount + 2 · capacity · refill_period_ns`
//! must be below 2^53 (for a per-second rate: R + 2B < 9 · 10⁶).
//!
//! The singleton job's lease and fencing token are Lua scripts too (`lease.lua`, `fence.lua`):
//! [`RedisStore`] implements [`crate::LeaseClient`], and
//! [`RedisStore::fenced_set`] is a protected resource that refuses stale tokens: below the
//! highest it has written, or below the lease's last grant. A lease's keys and its resources
//! share a hash tag (`{lease:NAME}`), so the scripts also run on Redis Cluster. A token is the
//! later of one more than the last one and the server's clock in µs, so a server that lost the
//! last token (a restart with persistence off, a promoted replica that missed the last grant)
//! still grants a larger one; `with_wait` also makes each grant wait for a replica.
//!
//! Keys are namespaced (`prefix` + key) and bounded ([`MAX_PREFIX_LEN`] + [`MAX_KEY_LEN`](crate::MAX_KEY_LEN)).
//! Every call has a timeout (a call sent ahead, [`StoreClient::send`], has its caller's); the
//! connection manager reconnects after the server comes back.
//! On one server over plain TCP the atomic path's script call, the one command per request,
//! takes a lean pipelined connection of its own ([`crate::redis_lane`]), and loads the script
//! on it again after a `NOSCRIPT`; everything else (the naive path, leases, `WAIT`, and every
//! call on a cluster) goes through redis-rs.
//!
//! **On Redis Cluster** ([`RedisStore::connect_cluster`], or a `redis+cluster://` URL) every
//! decision over one bucket is
//! one script on the primary of the bucket's slot. A request at several limits whose keys
//! share a slot is one script, as on one server. Keys in different slots (a per-IP and a
//! per-key bucket, say) cannot be one script: the request is decided slot by slot and given
//! back where it was admitted if another slot denied it (`crate::redis_slots`, where
//! `refund.lua` moves each bucket's TAT back by what is still outstanding of the spend). The lease, its
//! token counter and the fenced resources share one hash tag, so their scripts run whole.

use crate::redis_conn::{Conn, evalsha, slot};
use crate::redis_lane::{Arg, Command, Encoded, Lane, Reply, Target};
use crate::script::{non_negative, remaining_within};
use crate::script_loads::{Next, ScriptLoads};
use crate::{
    AllApplied, AllFuture, AllItem, Applied, FenceVerdict, Key, LeaseClient, LimitError, Read,
    Sent, SentReply, StoreClient, StoreError,
};
use core::future::Future;
use ratelab_core::{Decision, Nanos, TokenBucket, TokenBucketState};
use std::sync::Arc;
use std::time::Duration;

/// Longest key prefix, in bytes.
pub use crate::key::MAX_PREFIX_LEN;

/// The Lua script of the atomic path.
pub const SCRIPT: &str = crate::script::TOKEN_BUCKET_SCRIPT;
/// The Lua script of leases.
pub const LEASE_SCRIPT: &str = include_str!("lease.lua");
/// The Lua script of fenced writes.
pub const FENCE_SCRIPT: &str = include_str!("fence.lua");

/// Settings of a [`RedisStore`].
#[derive(Clone, Debug)]
pub struct RedisOptions {
    /// Prefix of every key (default `ratelab:tb:`).
    pub prefix: String,
    /// Per-call timeout (default 50 ms).
    pub timeout: Duration,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            prefix: "ratelab:tb:".into(),
            timeout: Duration::from_millis(50),
        }
    }
}

/// A token-bucket store on Redis.
#[derive(Clone)]
pub struct RedisStore {
    conn: Conn,
    /// The lean connection the script calls take, on one server over plain TCP without
    /// waiting for replicas ([`crate::redis_lane`]); everything else, and every call on a
    /// cluster or with [`RedisStore::with_wait`], goes through `conn`.
    lane: Option<Arc<Lane>>,
    bucket: TokenBucket,
    options: Arc<RedisOptions>,
    script: Arc<redis::Script>,
    /// The script call's parts that are the same on every call, for `script` and `bucket`.
    parts: Arc<ScriptParts>,
    lease: Arc<redis::Script>,
    fence: Arc<redis::Script>,
    /// After each decision, wait for this many replicas, for at most this many ms.
    wait: Option<(u32, u64)>,
    /// Waits that ended with fewer replicas than asked for (shared by siblings).
    waits_short: Arc<std::sync::atomic::AtomicU64>,
    /// Whether every script call is bounded by its caller (a gateway's deadline), so the
    /// lane's calls need no timer of their own ([`RedisStore::bounded_by_caller`]).
    caller_bounds: bool,
    /// The scripts loaded through `conn` after a `NOSCRIPT` (shared by siblings): one load
    /// per burst ([`crate::script_loads`]; the lane counts its own).
    loads: Arc<ScriptLoads>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("bucket", &self.bucket)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// Why a store could not be set up.
#[derive(Debug)]
pub enum RedisSetupError {
    /// The policy is too large for exact arithmetic in the script.
    PolicyTooLarge(String),
    /// The prefix is too long.
    Prefix(String),
    /// The server could not be reached.
    Connect(String),
}

impl std::fmt::Display for RedisSetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RedisSetupError::PolicyTooLarge(m) | RedisSetupError::Prefix(m) => f.write_str(m),
            RedisSetupError::Connect(m) => write!(f, "cannot connect to Redis: {m}"),
        }
    }
}

impl std::error::Error for RedisSetupError {}

fn units(bucket: &TokenBucket) -> u128 {
    1_000_000_000 * u128::from(bucket.refill_amount())
}

/// Checks that `bucket` stays exact in the script.
pub fn check_exact(bucket: &TokenBucket) -> Result<(), RedisSetupError> {
    crate::script::bucket_exact(bucket).map_err(RedisSetupError::PolicyTooLarge)
}

/// A store for `bucket` under `prefix` is possible: the bucket within the script's exact
/// range, the prefix within its bound.
fn check_setup(bucket: &TokenBucket, prefix: &str) -> Result<(), RedisSetupError> {
    check_exact(bucket)?;
    if prefix.len() > MAX_PREFIX_LEN {
        return Err(RedisSetupError::Prefix(format!(
            "key prefix is {} bytes: expected at most {MAX_PREFIX_LEN}",
            prefix.len()
        )));
    }
    Ok(())
}

/// Whether a store on `url` takes the lane for its script calls: one server over plain TCP,
/// and not waiting for replicas (`waits`: [`RedisStore::with_wait`]).
pub fn uses_lane(url: &str, waits: bool) -> bool {
    !waits
        && crate::redis_conn::cluster_seeds(url).is_none()
        && Target::of(url, Duration::ZERO).is_some()
}

/// The lane's stall checks' spacing: twenty call timeouts, and at least a second (a silent
/// connection is remade after two to three of them).
fn stall_bound(timeout: Duration) -> Duration {
    timeout.saturating_mul(20).max(Duration::from_secs(1))
}

pub(crate) fn store_err(e: &redis::RedisError) -> StoreError {
    if e.is_timeout() {
        StoreError::Timeout
    } else {
        StoreError::of_reply_code(e.code())
    }
}

impl RedisStore {
    /// Connects to `url` for `bucket`: one server (`redis://127.0.0.1:6379/`) or a cluster
    /// (`redis+cluster://127.0.0.1:7000,127.0.0.1:7001`).
    pub async fn connect(
        url: &str,
        bucket: TokenBucket,
        options: RedisOptions,
    ) -> Result<RedisStore, RedisSetupError> {
        check_setup(&bucket, &options.prefix)?;
        let conn = Conn::open(url, options.timeout)
            .await
            .map_err(RedisSetupError::Connect)?;
        let lane = match &conn {
            Conn::Single(_) => Target::of(url, options.timeout.max(Duration::from_millis(200)))
                .map(|t| Arc::new(Lane::new(t, stall_bound(options.timeout)))),
            Conn::Cluster(_) => None,
        };
        Ok(RedisStore {
            lane,
            ..RedisStore::over(conn, bucket, options)
        })
    }

    /// Connects to the Redis Cluster that `seeds` (`redis://127.0.0.1:7000/`, …) belong to,
    /// for `bucket`. The slot map is read from the first seed that answers and refreshed on
    /// `MOVED`.
    pub async fn connect_cluster(
        seeds: &[String],
        bucket: TokenBucket,
        options: RedisOptions,
    ) -> Result<RedisStore, RedisSetupError> {
        check_setup(&bucket, &options.prefix)?;
        let conn = Conn::open_cluster(seeds, options.timeout)
            .await
            .map_err(RedisSetupError::Connect)?;
        Ok(RedisStore::over(conn, bucket, options))
    }

    fn over(conn: Conn, bucket: TokenBucket, options: RedisOptions) -> RedisStore {
        let script = redis::Script::new(SCRIPT);
        RedisStore {
            conn,
            lane: None,
            parts: Arc::new(ScriptParts::new(&script, &bucket)),
            bucket,
            options: Arc::new(options),
            script: Arc::new(script),
            lease: Arc::new(redis::Script::new(LEASE_SCRIPT)),
            fence: Arc::new(redis::Script::new(FENCE_SCRIPT)),
            wait: None,
            caller_bounds: false,
            waits_short: Arc::default(),
            loads: Arc::default(),
        }
    }

    /// The same store, answering each atomic decision only once `replicas` replicas hold its
    /// write (Redis `WAIT` on the keys' primary after the script), or after `timeout`: a
    /// failover then loses no acknowledged decision unless the wait timed out, at the cost of
    /// a round trip and a replication round trip per decision. Lease grants wait the same way,
    /// so a promoted replica cannot grant a fencing token again. The call's own timeout must
    /// exceed `timeout`. Its siblings inherit it. The script and its `WAIT` then share the
    /// general connection (`WAIT` counts the writes of its own connection), not the lane.
    pub fn with_wait(mut self, replicas: u32, timeout: Duration) -> RedisStore {
        self.wait = Some((replicas, timeout.as_millis().clamp(1, 60_000) as u64));
        self.lane = None;
        self
    }

    /// The same store for a caller that bounds every decision it asks for in time (the
    /// gateway's pipeline puts each store call under the request's deadline): the script
    /// calls on the lane then set no timer of their own, one registration and one
    /// cancellation in the runtime's timer wheel fewer per call. A call the caller gives up
    /// on is dropped; its reply, when it comes, is discarded. Its siblings inherit it. Calls
    /// through redis-rs keep their own timeout.
    pub fn bounded_by_caller(mut self) -> RedisStore {
        self.caller_bounds = true;
        self
    }

    /// How many waits of [`RedisStore::with_wait`] (by this store and its siblings) ended
    /// with fewer replicas than asked for: their writes' survival of a failover is in doubt.
    pub fn waits_short(&self) -> u64 {
        self.waits_short.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Counts a wait's answer: `acked` replicas of the `asked`.
    fn waited(&self, asked: u32, acked: i64) {
        if acked < i64::from(asked) {
            self.waits_short
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Whether this store is on a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.conn.is_cluster()
    }

    /// Another limit's store on the same connection: its own bucket and key prefix. Siblings
    /// are one store, so a request at several of them is decided in one script call
    /// ([`StoreClient::apply_all`]).
    pub fn sibling(
        &self,
        bucket: TokenBucket,
        prefix: &str,
    ) -> Result<RedisStore, RedisSetupError> {
        check_setup(&bucket, prefix)?;
        Ok(RedisStore {
            parts: Arc::new(ScriptParts::new(&self.script, &bucket)),
            bucket,
            options: Arc::new(RedisOptions {
                prefix: prefix.into(),
                timeout: self.options.timeout,
            }),
            ..self.clone()
        })
    }

    pub(crate) fn key(&self, key: &Key) -> String {
        format!("{}{}", self.options.prefix, key.as_str())
    }

    /// Whether this store's `key` and `other`'s `other_key` are the same Redis key (as
    /// [`RedisStore::key`] spells them), neither spelled out.
    pub(crate) fn same_key(&self, key: &Key, other: &RedisStore, other_key: &Key) -> bool {
        let mine = self.options.prefix.bytes().chain(key.as_str().bytes());
        mine.eq(other
            .options
            .prefix
            .bytes()
            .chain(other_key.as_str().bytes()))
    }

    /// Its bucket.
    pub(crate) fn bucket(&self) -> &TokenBucket {
        &self.bucket
    }

    /// Its connection.
    pub(crate) fn conn(&self) -> &Conn {
        &self.conn
    }

    /// Its per-call timeout.
    pub(crate) fn timeout(&self) -> Duration {
        self.options.timeout
    }

    /// Whether `other` shares this store's connection (siblings do).
    pub(crate) fn same_server(&self, other: &RedisStore) -> bool {
        Arc::ptr_eq(&self.script, &other.script)
    }

    /// Whether an admission waits for a replica ([`RedisStore::with_wait`]).
    pub(crate) fn waits(&self) -> bool {
        self.wait.is_some()
    }

    /// After an admission that wrote `key`: waits for a replica to hold it, when this store
    /// waits ([`RedisStore::with_wait`]).
    pub(crate) async fn wait_for_replica(&self, key: &str) -> Result<(), StoreError> {
        if let Some((replicas, ms)) = self.wait {
            // Answered once `replicas` replicas hold the write, or after `ms` either way (the
            // decision stands; only its durability across a failover is in doubt then).
            let mut conn = self.conn.clone();
            let acked = self.timed(conn.wait(key, replicas, ms)).await?;
            self.waited(replicas, acked);
        }
        Ok(())
    }

    /// The text stored under `key` (none when absent or expired), and the store's clock
    /// when it was read: one round trip.
    pub(crate) async fn get_text(&self, key: &Key) -> Result<(Option<String>, Nanos), StoreError> {
        let k = self.key(key);
        let mut conn = self.conn.clone();
        let mut pipe = redis::pipe();
        pipe.cmd("GET").arg(&k).cmd("TIME");
        let (value, (sec, usec)): (Option<String>, (u64, u64)) =
            self.timed(pipe.query_async(&mut conn)).await?;
        Ok((value, time_ns(sec, usec)))
    }

    /// Stores `text` under `key` for `ttl` (at least 1 ms).
    pub(crate) async fn set_text(
        &self,
        key: &Key,
        text: String,
        ttl: Nanos,
    ) -> Result<(), StoreError> {
        let k = self.key(key);
        let mut conn = self.conn.clone();
        let ms = ttl.as_u64().div_ceil(1_000_000).max(1);
        let mut set = redis::cmd("SET");
        set.arg(&k).arg(text).arg("PX").arg(ms);
        self.timed(set.query_async::<()>(&mut conn)).await
    }

    async fn timed<T>(
        &self,
        f: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.options.timeout, f).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(store_err(&e)),
            Err(_) => Err(StoreError::Timeout),
        }
    }

    /// The scripts loaded through the general connection after a `NOSCRIPT`.
    pub(crate) fn script_loads(&self) -> &ScriptLoads {
        &self.loads
    }

    /// The lean connection this store's script calls take, if it has one.
    pub(crate) fn lane(&self) -> Option<&Lane> {
        self.lane.as_deref()
    }

    /// Runs `command`, an `EVALSHA` of `script` (its text; `sha` its SHA, held for as long as
    /// the store runs), on the lane within the call's timeout; on `NOSCRIPT` (a restarted or
    /// flushed server) the script is loaded on the lane and `command` runs once more. The
    /// calls of one burst of `NOSCRIPT`s load it once between them ([`crate::script_loads`],
    /// which tells scripts apart by `sha`).
    pub(crate) async fn on_lane(
        &self,
        lane: &Lane,
        command: &Command,
        sha: &str,
        script: &str,
    ) -> Result<Vec<i64>, StoreError> {
        let call = async {
            let once = async || {
                lane.call(command)
                    .map_err(|_| StoreError::Unavailable)?
                    .await
                    .map_err(|_| StoreError::Unavailable)
            };
            let missing = |r: &Reply| r.error_code() == Some("NOSCRIPT");
            let mut reload = lane.script_loads().start(sha);
            let mut reply = once().await?;
            while missing(&reply) {
                match reload.after_missing().await {
                    Next::Reply => break,
                    Next::Resend => reply = once().await?,
                    Next::Load(turn) => {
                        // Loaded over the lane itself, which has just shown it is connected:
                        // the general connection may not have noticed a restart yet, and
                        // would hold limiting back until it reconnects.
                        let load = Command::new(
                            [
                                Arg::Bytes(b"SCRIPT"),
                                Arg::Bytes(b"LOAD"),
                                Arg::Bytes(script.as_bytes()),
                            ]
                            .into_iter(),
                        );
                        let loaded = lane
                            .call(&load)
                            .map_err(|_| StoreError::Unavailable)?
                            .await
                            .map_err(|_| StoreError::Unavailable)?;
                        if let Some(code) = loaded.error_code() {
                            return Err(StoreError::of_reply_code(Some(code)));
                        }
                        turn.loaded();
                        reply = once().await?;
                    }
                }
            }
            match reply {
                Reply::Ints(v) => Ok(v),
                other => Err(StoreError::of_reply_code(other.error_code())),
            }
        };
        if self.caller_bounds {
            return call.await;
        }
        tokio::time::timeout(self.options.timeout, call)
            .await
            .unwrap_or(Err(StoreError::Timeout))
    }

    /// Encodes a core state as the script's "hi lo".
    pub fn encode(&self, s: &TokenBucketState) -> String {
        let u = units(&self.bucket);
        format!("{} {}", s.tat_scaled / u, s.tat_scaled % u)
    }

    /// Decodes the script's "hi lo" into a core state, by the script's own rule: two decimal
    /// integers, `hi` of at most 15 digits and `lo` of at most 16, `lo` below the policy's
    /// unit. Anything else is [`StoreError::Corrupt`]: a bucket that cannot be read is never
    /// taken as empty.
    pub fn decode(&self, text: &str) -> Result<TokenBucketState, StoreError> {
        let u = units(&self.bucket);
        let digits = |v: &str, most: usize| -> Option<u128> {
            (!v.is_empty() && v.len() <= most && v.bytes().all(|b| b.is_ascii_digit()))
                .then(|| v.parse().ok())
                .flatten()
        };
        let (hi, lo) = text.split_once(' ').ok_or(StoreError::Corrupt)?;
        let (hi, lo) = digits(hi, 15)
            .zip(digits(lo, 16))
            .ok_or(StoreError::Corrupt)?;
        let tat_scaled = hi
            .checked_mul(u)
            .and_then(|v| v.checked_add(lo))
            .filter(|_| lo < u)
            .ok_or(StoreError::Corrupt)?;
        Ok(TokenBucketState { tat_scaled })
    }

    /// The key of lease `name` plus `suffix`, under one hash tag. Names are bounded like bucket
    /// keys ([`Key`]); a bad one is refused, as `Unavailable`, before any round trip.
    fn lease_key(&self, name: &str, suffix: &str) -> Result<String, StoreError> {
        let key =
            Key::new(&format!("{{lease:{name}}}{suffix}")).map_err(|_| StoreError::Unavailable)?;
        Ok(format!("{}{}", self.options.prefix, key.as_str()))
    }

    async fn lease_op(&self, name: &str, args: &[&str]) -> Result<u64, StoreError> {
        let mut conn = self.conn.clone();
        let mut inv = self.lease.key(self.lease_key(name, "")?);
        inv.key(self.lease_key(name, ":token")?);
        for a in args {
            inv.arg(*a);
        }
        let got: u64 = self.timed(inv.invoke_async(&mut conn)).await?;
        // A grant is answered once a replica holds the token counter (with `with_wait`): a
        // replica promoted after it cannot grant the same token again.
        if let (Some((replicas, ms)), true) =
            (self.wait, args.first() == Some(&"acquire") && got > 0)
        {
            let key = self.lease_key(name, ":token")?;
            let acked = self.timed(conn.wait(&key, replicas, ms)).await?;
            self.waited(replicas, acked);
        }
        Ok(got)
    }

    /// Writes `value` to `resource`, guarded by lease `lease`, if `token` is at least the
    /// highest token the resource has written and the lease has granted; one round trip,
    /// checked and written atomically.
    pub async fn fenced_set(
        &self,
        lease: &str,
        resource: &str,
        token: u64,
        value: &str,
    ) -> Result<FenceVerdict, StoreError> {
        let mut conn = self.conn.clone();
        let mut inv = self
            .fence
            .key(self.lease_key(lease, &format!(":fenced:{resource}"))?);
        inv.key(self.lease_key(lease, ":token")?);
        inv.arg(token).arg(value);
        let (written, highest): (u64, u64) = self.timed(inv.invoke_async(&mut conn)).await?;
        Ok(if written == 1 {
            FenceVerdict::Accepted
        } else {
            FenceVerdict::Stale { highest }
        })
    }

    /// The token and value last written to `resource` under lease `lease`, if any.
    pub async fn fenced_get(
        &self,
        lease: &str,
        resource: &str,
    ) -> Result<Option<(u64, String)>, StoreError> {
        let key = self.lease_key(lease, &format!(":fenced:{resource}"))?;
        let mut conn = self.conn.clone();
        let (token, value): (Option<u64>, Option<String>) = self
            .timed(
                redis::cmd("HMGET")
                    .arg(&key)
                    .arg("token")
                    .arg("value")
                    .query_async(&mut conn),
            )
            .await?;
        Ok(token.zip(value))
    }

    /// Deletes every key under the prefix (for tests and benchmarks). On a cluster, `KEYS`
    /// asks every primary and each key is deleted on its own slot's primary.
    pub async fn clear(&self) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        let pattern = format!("{}*", self.options.prefix);
        let keys: Vec<String> = self
            .timed(redis::cmd("KEYS").arg(&pattern).query_async(&mut conn))
            .await?;
        if self.is_cluster() {
            for k in &keys {
                let _: () = self
                    .timed(redis::cmd("DEL").arg(k).query_async(&mut conn))
                    .await?;
            }
        } else if !keys.is_empty() {
            let _: () = self
                .timed(redis::cmd("DEL").arg(&keys).query_async(&mut conn))
                .await?;
        }
        Ok(())
    }
}

fn time_ns(sec: u64, usec: u64) -> Nanos {
    Nanos(
        sec.saturating_mul(1_000_000_000)
            .saturating_add(usec.saturating_mul(1_000)),
    )
}

impl LeaseClient for RedisStore {
    fn acquire(
        &self,
        name: &str,
        owner: &str,
        ttl: Nanos,
    ) -> impl Future<Output = Result<Option<u64>, StoreError>> + Send {
        let ms = ttl_ms(ttl);
        async move {
            let token = self.lease_op(name, &["acquire", owner, &ms]).await?;
            Ok((token > 0).then_some(token))
        }
    }

    fn renew(
        &self,
        name: &str,
        owner: &str,
        token: u64,
        ttl: Nanos,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        let (token, ms) = (token.to_string(), ttl_ms(ttl));
        async move { Ok(self.lease_op(name, &["renew", owner, &token, &ms]).await? == 1) }
    }

    fn release(
        &self,
        name: &str,
        owner: &str,
        token: u64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        let token = token.to_string();
        async move { Ok(self.lease_op(name, &["release", owner, &token]).await? == 1) }
    }
}

/// A lease length in whole ms for `PX`, rounded up: the store must not expire a lease before
/// its holder gives it up, and the holder counts from before it sent the request.
fn ttl_ms(ttl: Nanos) -> String {
    ttl.as_u64().div_ceil(1_000_000).max(1).to_string()
}

/// A script's time arguments: `now` in seconds and nanoseconds, or empty for the script to
/// read `TIME`.
fn time_args(now: Option<Nanos>) -> [Arg<'static>; 2] {
    match now {
        Some(n) => [
            Arg::Int(n.as_u64() / 1_000_000_000),
            Arg::Int(n.as_u64() % 1_000_000_000),
        ],
        None => [Arg::Bytes(b""), Arg::Bytes(b"")],
    }
}

/// The parts of the bucket script's call that are the same on every call: `EVALSHA` and the
/// script's SHA; a limit's capacity, refill amount and period (ns). Encoded once, when the
/// store is made, and sent with one copy each.
#[derive(Debug)]
struct ScriptParts {
    head: Encoded,
    params: Encoded,
}

impl ScriptParts {
    fn new(script: &redis::Script, bucket: &TokenBucket) -> ScriptParts {
        ScriptParts {
            head: Encoded::new([
                Arg::Bytes(b"EVALSHA"),
                Arg::Bytes(script.get_hash().as_bytes()),
            ]),
            params: Encoded::new([
                Arg::Int(bucket.capacity()),
                Arg::Int(bucket.refill_amount()),
                Arg::Int(bucket.refill_period().as_u64()),
            ]),
        }
    }
}

/// The bucket script's call over `items`, passed to `f`: `EVALSHA sha N key…`, then per item
/// its capacity, refill amount and period (ns) and the request's cost, the first item's
/// followed by the time (`now` in s and ns, or two empty strings for the server's `TIME`),
/// and `tat` to ask for each key's TAT after the request. Gathered on the stack for up to
/// three items (a request's limits), in a vector past that.
fn with_script_args<R>(
    items: &[AllItem<'_, RedisStore>],
    now: Option<Nanos>,
    tat: bool,
    f: impl FnOnce(&[Arg<'_>]) -> R,
) -> R {
    let Some((first, _, _)) = items.first() else {
        return f(&[]);
    };
    let count = 2 + items.len() + 2 * items.len() + 2 + usize::from(tat);
    let mut stack = [Arg::Int(0); 16];
    let mut heap = Vec::new();
    let args: &mut [Arg<'_>] = if count <= stack.len() {
        &mut stack[..count]
    } else {
        heap.resize(count, Arg::Int(0));
        &mut heap
    };
    let mut at = 0;
    let mut put = |arg| {
        args[at] = arg;
        at += 1;
    };
    put(Arg::Encoded(&first.parts.head));
    put(Arg::Int(items.len() as u64));
    for (c, k, _) in items {
        put(Arg::Joined(
            c.options.prefix.as_bytes(),
            k.as_str().as_bytes(),
        ));
    }
    for (i, (c, _, cost)) in items.iter().enumerate() {
        put(Arg::Encoded(&c.parts.params));
        put(Arg::Int(*cost));
        if i == 0 {
            time_args(now).into_iter().for_each(&mut put);
        }
    }
    if tat {
        put(Arg::Bytes(b"tat"));
    }
    f(args)
}

/// One key's four fields of the script's reply, and its time until full.
fn reply_decision(
    bucket: &TokenBucket,
    f: &[i64],
    full: i64,
) -> Result<(i64, Decision), StoreError> {
    let [flag, remaining, reset, retry] = *f else {
        return Err(StoreError::Corrupt);
    };
    if !(0..=2).contains(&flag) {
        return Err(StoreError::Corrupt);
    }
    let remaining = remaining_within(remaining, bucket.capacity())?;
    // Only a denying key's wait is read (the others send -1), and it is never negative.
    let retry_after = if flag == 0 {
        Some(Nanos(non_negative(retry)?))
    } else {
        None
    };
    Ok((
        flag,
        Decision {
            allowed: flag != 0,
            limit: bucket.capacity(),
            remaining,
            reset_after: Nanos(non_negative(reset)?),
            retry_after,
            full_after: Nanos(non_negative(full)?),
        },
    ))
}

impl RedisStore {
    /// One script call over every item's key: all or nothing.
    pub(crate) async fn apply_many(
        items: &[AllItem<'_, RedisStore>],
        now: Option<Nanos>,
    ) -> Result<AllApplied, LimitError> {
        let Some((first, _, _)) = items.first() else {
            return Err(LimitError::Store(StoreError::Corrupt));
        };
        for (i, (c, k, _)) in items.iter().enumerate() {
            if items[..i].iter().any(|(d, l, _)| d.same_key(l, c, k)) {
                return Err(LimitError::RepeatedKey);
            }
        }
        for (c, _, cost) in items {
            c.admissible(*cost)?;
        }
        if first.is_cluster() {
            let slots: Vec<u16> = items
                .iter()
                .map(|(c, k, _)| slot(c.key(k).as_bytes()))
                .collect();
            if slots.iter().any(|s| *s != slots[0]) {
                return Box::pin(crate::redis_slots::apply_by_slot(items, &slots, now)).await;
            }
        }
        RedisStore::apply_one_script(items, now).await
    }

    /// Every item in one script call (their keys in one slot, on a cluster).
    async fn apply_one_script(
        items: &[AllItem<'_, RedisStore>],
        now: Option<Nanos>,
    ) -> Result<AllApplied, LimitError> {
        RedisStore::apply_script(items, now, false)
            .await
            .map(|(all, _)| all)
    }

    /// [`RedisStore::apply_one_script`], and with `tat` each key's TAT after the request
    /// ("hi lo" as integers) for a refund.
    async fn apply_script(
        items: &[AllItem<'_, RedisStore>],
        now: Option<Nanos>,
        tat: bool,
    ) -> Result<(AllApplied, Vec<(i64, i64)>), LimitError> {
        let r = RedisStore::call_script(items, now, tat).await?;
        let fields = 5 * items.len() + 2;
        let tats = r[fields..].chunks(2).map(|p| (p[0], p[1])).collect();
        Ok((RedisStore::all_applied(items, &r)?, tats))
    }

    /// The reply `r` to a call over `items` (its length checked), read: each key's decision,
    /// and whether every key admitted the request.
    fn all_applied(items: &[AllItem<'_, RedisStore>], r: &[i64]) -> Result<AllApplied, LimitError> {
        let mut decisions = Vec::with_capacity(items.len());
        let mut allowed = true;
        for (i, (c, _, _)) in items.iter().enumerate() {
            let (flag, d) = key_decision(r, items.len(), i, &c.bucket)?;
            allowed &= flag == 1;
            decisions.push(d);
        }
        Ok(AllApplied {
            allowed,
            decisions,
            store_time: reply_time(r)?,
        })
    }

    /// [`RedisStore::apply_many`] sent on the first item's lane now, its reply read by
    /// [`RedisStore::read_many`] ([`StoreClient::send_all`]); `None` without a lane, when an
    /// admission waits for a replica, or for items of several servers.
    pub(crate) fn send_many(
        items: &[AllItem<'_, RedisStore>],
        now: Option<Nanos>,
    ) -> Option<Result<Sent, LimitError>> {
        let (first, _, _) = items.first()?;
        let lane = first.lane.as_deref().filter(|_| !first.waits())?;
        if !items.iter().all(|(c, _, _)| c.same_server(first)) {
            return None;
        }
        // Refused as `apply_many` refuses: a key given twice first, then a cost.
        for (i, (c, k, _)) in items.iter().enumerate() {
            if items[..i].iter().any(|(d, l, _)| d.same_key(l, c, k)) {
                return Some(Err(LimitError::RepeatedKey));
            }
        }
        for (c, _, cost) in items {
            if let Err(e) = c.admissible(*cost) {
                return Some(Err(e));
            }
        }
        let command =
            with_script_args(items, now, false, |args| Command::new(args.iter().copied()));
        Some(
            lane.call(&command)
                .map(Sent::on_lane)
                .map_err(|_| LimitError::Store(StoreError::Unavailable)),
        )
    }

    /// The reply to the call [`RedisStore::send_many`] sent over `items`, read as
    /// [`RedisStore::apply_many`] reads it; `None` on `NOSCRIPT` (the caller calls again
    /// through `apply_many`, which loads the script).
    pub(crate) fn read_many(
        items: &[AllItem<'_, RedisStore>],
        reply: SentReply,
    ) -> Option<Result<AllApplied, LimitError>> {
        Some(match reply.ints()? {
            Ok(r) if r.len() == 5 * items.len() + 2 => RedisStore::all_applied(items, &r),
            Ok(_) => Err(LimitError::Store(StoreError::Unavailable)),
            Err(e) => Err(LimitError::Store(e)),
        })
    }

    /// `Err` for a cost this bucket can never admit: the caller's error, the script not called.
    fn admissible(&self, cost: u64) -> Result<(), LimitError> {
        let limit = self.bucket.capacity();
        if cost > limit {
            return Err(LimitError::Cost(ratelab_core::CostError { cost, limit }));
        }
        Ok(())
    }

    /// One request at one key, this store's: [`RedisStore::apply_many`] of one item (no key
    /// to repeat, one slot), read without the lists a request at several keys needs.
    pub(crate) async fn apply_one(
        &self,
        key: &Key,
        now: Option<Nanos>,
        cost: u64,
    ) -> Result<Applied, LimitError> {
        self.admissible(cost)?;
        let r = RedisStore::call_script(&[(self, key, cost)], now, false).await?;
        self.one_applied(&r)
    }

    /// The reply `r` to one key's call (its length checked), read.
    fn one_applied(&self, r: &[i64]) -> Result<Applied, LimitError> {
        Ok(Applied {
            decision: key_decision(r, 1, 0, &self.bucket)?.1,
            store_time: reply_time(r)?,
        })
    }

    /// [`RedisStore::apply_one`] sent on the lane now, its reply read by
    /// [`RedisStore::read_one`] ([`StoreClient::send`]); `None` without a lane, or when an
    /// admission waits for a replica (a second call).
    pub(crate) fn send_one(
        &self,
        key: &Key,
        now: Option<Nanos>,
        cost: u64,
    ) -> Option<Result<Sent, LimitError>> {
        let lane = self.lane.as_deref().filter(|_| !self.waits())?;
        if let Err(e) = self.admissible(cost) {
            return Some(Err(e));
        }
        let command = with_script_args(&[(self, key, cost)], now, false, |args| {
            Command::new(args.iter().copied())
        });
        Some(
            lane.call(&command)
                .map(Sent::on_lane)
                .map_err(|_| LimitError::Store(StoreError::Unavailable)),
        )
    }

    /// The reply to a call [`RedisStore::send_one`] sent, read as [`RedisStore::apply_one`]
    /// reads it; `None` on `NOSCRIPT` (the caller calls again through `apply_one`, which
    /// loads the script).
    pub(crate) fn read_one(&self, reply: SentReply) -> Option<Result<Applied, LimitError>> {
        Some(match reply.ints()? {
            Ok(r) if r.len() == 7 => self.one_applied(&r),
            Ok(_) => Err(LimitError::Store(StoreError::Unavailable)),
            Err(e) => Err(LimitError::Store(e)),
        })
    }

    /// The script's call over `items` (and with `tat` their TATs after it): its reply, of the
    /// length the call asks for. The calls through redis-rs and the wait for a replica are
    /// boxed: a future is as large as its largest branch, and the lane's, which a server runs
    /// per request and moves up its callers, is the smallest.
    async fn call_script(
        items: &[AllItem<'_, RedisStore>],
        now: Option<Nanos>,
        tat: bool,
    ) -> Result<Vec<i64>, LimitError> {
        let Some((first, _, _)) = items.first() else {
            return Err(LimitError::Store(StoreError::Corrupt));
        };
        let r: Vec<i64> = match &first.lane {
            Some(lane) => {
                let command =
                    with_script_args(items, now, tat, |args| Command::new(args.iter().copied()));
                let sha = first.script.get_hash();
                first.on_lane(lane, &command, sha, SCRIPT).await?
            }
            None => {
                let cmd = with_script_args(items, now, tat, |args| {
                    let mut cmd = redis::Cmd::new();
                    args.iter().for_each(|a| {
                        cmd.arg(*a);
                    });
                    cmd
                });
                let mut conn = first.conn.clone();
                Box::pin(first.timed(evalsha(&mut conn, &first.loads, &first.script, &cmd))).await?
            }
        };
        // A denial wrote nothing: only an admission waits for its replica (the key is
        // spelled out only then).
        if r.first() == Some(&1) && first.waits() {
            Box::pin(first.wait_for_replica(&first.key(items[0].1))).await?;
        }
        if r.len() != 5 * items.len() + 2 + if tat { 2 * items.len() } else { 0 } {
            return Err(LimitError::Store(StoreError::Unavailable));
        }
        Ok(r)
    }
}

/// Key `i`'s flag and decision in the reply `r` to a call over `n` keys (its length checked).
/// A reply this client cannot read comes after the script ran (and may have written): it is
/// not `Corrupt`, which promises nothing was written, but a store that misbehaved.
fn key_decision(
    r: &[i64],
    n: usize,
    i: usize,
    bucket: &TokenBucket,
) -> Result<(i64, Decision), LimitError> {
    let at = if i == 0 { 0 } else { 4 * i + 2 };
    reply_decision(bucket, &r[at..at + 4], r[4 * n + 2 + i])
        .map_err(|_| LimitError::Store(StoreError::Unavailable))
}

/// The script's clock in a reply (its length checked), in whole nanoseconds: the caller's as
/// it sent it, or the store's `TIME` (microseconds, times 1 000).
fn reply_time(r: &[i64]) -> Result<Nanos, LimitError> {
    non_negative(r[4])
        .ok()
        .and_then(|s| s.checked_mul(1_000_000_000))
        .zip(non_negative(r[5]).ok())
        .and_then(|(s, n)| s.checked_add(n))
        .map(Nanos)
        .ok_or(LimitError::Store(StoreError::Unavailable))
}

impl crate::redis_slots::SlotClient for RedisStore {
    fn policy(&self) -> ratelab_core::Policy {
        ratelab_core::Policy::TokenBucket(self.bucket)
    }

    fn refund_args(&self) -> (&'static str, [u64; 3]) {
        let b = &self.bucket;
        let period = b.refill_period().as_u64();
        ("tb", [b.capacity(), b.refill_amount(), period])
    }

    fn state_key(&self, key: &Key) -> String {
        self.key(key)
    }

    fn connection(&self) -> &Conn {
        &self.conn
    }

    fn script_loads(&self) -> &ScriptLoads {
        &self.loads
    }

    fn call_timeout(&self) -> Duration {
        self.options.timeout
    }

    async fn decide_slot<'a>(
        items: &'a [AllItem<'a, Self>],
        now: Option<Nanos>,
    ) -> Result<(AllApplied, Vec<String>), LimitError> {
        let (all, tats) = RedisStore::apply_script(items, now, true).await?;
        let written = tats
            .iter()
            .map(|(hi, lo)| {
                if all.allowed {
                    format!("{hi} {lo}")
                } else {
                    String::new()
                }
            })
            .collect();
        Ok((all, written))
    }
}

impl StoreClient for RedisStore {
    type Algorithm = TokenBucket;

    fn algorithm(&self) -> &TokenBucket {
        &self.bucket
    }

    fn apply_all<'a>(items: &'a [AllItem<'a, Self>], now: Option<Nanos>) -> Option<AllFuture<'a>> {
        let (first, _, _) = items.first()?;
        if !items
            .iter()
            .all(|(c, _, _)| Arc::ptr_eq(&c.script, &first.script))
        {
            return None;
        }
        Some(Box::pin(RedisStore::apply_many(items, now)))
    }

    async fn get(&self, key: &Key) -> Result<Read<TokenBucketState>, StoreError> {
        let (value, store_time) = self.get_text(key).await?;
        Ok(Read {
            state: value.as_deref().map(|v| self.decode(v)).transpose()?,
            store_time,
        })
    }

    fn set(
        &self,
        key: &Key,
        state: TokenBucketState,
        ttl: Nanos,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let v = self.encode(&state);
        self.set_text(key, v, ttl)
    }

    fn send(&self, key: &Key, now: Option<Nanos>, cost: u64) -> Option<Result<Sent, LimitError>> {
        self.send_one(key, now, cost)
    }

    fn read_sent(&self, reply: SentReply) -> Option<Result<Applied, LimitError>> {
        self.read_one(reply)
    }

    fn send_all(
        items: &[AllItem<'_, Self>],
        now: Option<Nanos>,
    ) -> Option<Result<Sent, LimitError>> {
        RedisStore::send_many(items, now)
    }

    fn read_sent_all(
        items: &[AllItem<'_, Self>],
        reply: SentReply,
    ) -> Option<Result<AllApplied, LimitError>> {
        RedisStore::read_many(items, reply)
    }

    async fn apply(&self, key: &Key, now: Option<Nanos>, cost: u64) -> Result<Applied, LimitError> {
        self.apply_one(key, now, cost).await
    }
}

#[cfg(test)]
mod tests {
    use super::reply_decision;
    use ratelab_core::{Nanos, TokenBucket};

    /// A key's four fields are read as the limits script's are: a flag of 0, 1 or 2, no more
    /// left than the capacity, and a wait read only on a denial, where it is never negative.
    #[test]
    fn a_key_s_fields_outside_the_script_s_are_refused() {
        let b = TokenBucket::per_second(5, 1).unwrap();
        let denied = reply_decision(&b, &[0, 0, 7, 9], 11).unwrap().1;
        assert_eq!(
            (denied.allowed, denied.retry_after, denied.full_after),
            (false, Some(Nanos(9)), Nanos(11))
        );
        let admitted = reply_decision(&b, &[1, 4, 0, -1], 3).unwrap().1;
        assert_eq!((admitted.allowed, admitted.retry_after), (true, None));
        assert!(
            reply_decision(&b, &[3, 4, 0, -1], 3).is_err(),
            "a flag past 2"
        );
        assert!(
            reply_decision(&b, &[-1, 4, 0, -1], 3).is_err(),
            "a negative flag"
        );
        assert!(
            reply_decision(&b, &[0, 0, 7, -1], 11).is_err(),
            "a denial without a wait"
        );
        assert!(reply_decision(&b, &[1, 4, 0], 3).is_err(), "three fields");
        assert!(
            reply_decision(&b, &[1, 5, 0, -1], 3).is_ok(),
            "a full bucket"
        );
        assert!(
            reply_decision(&b, &[1, 6, 0, -1], 3).is_err(),
            "more left than the capacity"
        );
    }
}
