//! The connection a [`crate::redis_store::RedisStore`] talks through: one server (a
//! reconnecting multiplexed connection), or a Redis Cluster (the `redis` crate's cluster
//! connection, which routes each command by its first key's hash slot, follows `MOVED` and
//! `ASK` redirections and refreshes its slot map after them). Scripts run by `EVALSHA` are
//! reloaded on `NOSCRIPT` by the node that lacks them, on either kind.
//!
//! A cluster is named by the URL `redis+cluster://HOST:PORT[,HOST:PORT…]` (its seed nodes),
//! so every command that takes a Redis URL takes a cluster too.

use crate::script_loads::{Next, ScriptLoads};
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

/// One server or a cluster.
#[derive(Clone)]
pub enum Conn {
    /// One `redis-server`.
    Single(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.is_cluster() {
            "Conn::Cluster"
        } else {
            "Conn::Single"
        })
    }
}

/// The scheme of a cluster URL.
pub const CLUSTER_SCHEME: &str = "redis+cluster://";

/// The seed node URLs of a cluster URL, or `None` for one server's URL.
pub fn cluster_seeds(url: &str) -> Option<Vec<String>> {
    let hosts = url.strip_prefix(CLUSTER_SCHEME)?;
    Some(
        hosts
            .trim_end_matches('/')
            .split(',')
            .filter(|h| !h.is_empty())
            .map(|h| format!("redis://{h}/"))
            .collect(),
    )
}

impl Conn {
    /// Connects to `url`: one server (`redis://…`), reconnecting after it comes back, or a
    /// cluster (`redis+cluster://…`); `timeout` bounds the connection and each reply.
    pub async fn open(url: &str, timeout: std::time::Duration) -> Result<Conn, String> {
        use std::time::Duration;
        match cluster_seeds(url) {
            Some(seeds) => Conn::open_cluster(&seeds, timeout).await,
            None => {
                let client = redis::Client::open(url).map_err(|e| e.to_string())?;
                let config = redis::aio::ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(timeout.max(Duration::from_millis(200))))
                    .set_response_timeout(Some(timeout))
                    .set_number_of_retries(1);
                ConnectionManager::new_with_config(client, config)
                    .await
                    .map(Conn::Single)
                    .map_err(|e| e.to_string())
            }
        }
    }

    /// Connects to the cluster that `seeds` belong to.
    pub async fn open_cluster(
        seeds: &[String],
        timeout: std::time::Duration,
    ) -> Result<Conn, String> {
        use std::time::Duration;
        if seeds.is_empty() {
            return Err("no cluster seed nodes given".into());
        }
        let client = redis::cluster::ClusterClient::builder(seeds.iter().map(String::as_str))
            .connection_timeout(timeout.max(Duration::from_millis(200)))
            .response_timeout(timeout)
            .retries(1)
            .build()
            .map_err(|e| e.to_string())?;
        tokio::time::timeout(
            timeout.max(Duration::from_secs(2)),
            client.get_async_connection(),
        )
        .await
        .map_err(|_| "the cluster did not answer in time".to_owned())?
        .map(Conn::Cluster)
        .map_err(|e| e.to_string())
    }

    /// Whether this is a cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self, Conn::Cluster(_))
    }
}

impl Conn {
    /// `WAIT replicas ms` on the node that holds `key` (its slot's primary, on a cluster):
    /// how many replicas acknowledged every write this connection sent that node before.
    pub async fn wait(&mut self, key: &str, replicas: u32, ms: u64) -> redis::RedisResult<i64> {
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(replicas).arg(ms);
        match self {
            Conn::Single(c) => cmd.query_async(c).await,
            Conn::Cluster(c) => {
                use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
                let to = Route::new(slot(key.as_bytes()), SlotAddr::Master);
                // Boxed: the routed command is a large future, and every caller's future
                // (each decision's, waiting or not) would otherwise make room for it.
                let v = Box::pin(c.route_command(
                    cmd,
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(to)),
                ))
                .await?;
                Ok(redis::from_redis_value(v)?)
            }
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// Runs `cmd`, an `EVALSHA` of `script`; a server without the script (`NOSCRIPT`: restarted,
/// flushed, or a cluster node that never ran it) gets it loaded, and `cmd` runs again. The
/// calls of one burst of `NOSCRIPT`s load it once between them, counted in `loads` (on a
/// cluster, redis-rs sends `SCRIPT LOAD` to every node, primaries and replicas, and fails it
/// unless each accepts), as on the lane ([`crate::script_loads`]).
pub(crate) async fn evalsha<T: redis::FromRedisValue>(
    conn: &mut impl redis::aio::ConnectionLike,
    loads: &ScriptLoads,
    script: &redis::Script,
    cmd: &redis::Cmd,
) -> redis::RedisResult<T> {
    let no_script = redis::ErrorKind::Server(redis::ServerErrorKind::NoScript);
    let missing = |r: &redis::RedisResult<T>| matches!(r, Err(e) if e.kind() == no_script);
    let mut reload = loads.start(script.get_hash());
    let mut reply = cmd.query_async(conn).await;
    while missing(&reply) {
        match reload.after_missing().await {
            Next::Reply => break,
            Next::Resend => reply = cmd.query_async(conn).await,
            Next::Load(turn) => {
                script.load_async(conn).await?;
                turn.loaded();
                reply = cmd.query_async(conn).await;
            }
        }
    }
    reply
}

/// The Redis Cluster hash slot of `key`: CRC16 (XMODEM) of its hash tag (the text between
/// the first `{` and the next `}`, when not empty) or of the whole key, modulo 16 384.
pub fn slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    crc16(tagged) % 16_384
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::slot;

    #[test]
    fn slots_are_redis_cluster_slots() {
        // CRC16-XMODEM's check value (0x31c3 for "123456789", below 16 384), and `CLUSTER
        // KEYSLOT` answers.
        assert_eq!(slot(b"123456789"), 0x31c3);
        assert_eq!(slot(b"foo"), 12_182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(slot(b"{user1000}.followers"), slot(b"{user1000}.following"));
        // An empty tag is no tag (the whole key); only the first `{…}` counts.
        assert_eq!(slot(b"foo{}{bar}"), 8363);
        assert_eq!(slot(b"foo{{bar}}zap"), 4015);
        assert_eq!(slot(b"{bar"), 4015);
    }
}
