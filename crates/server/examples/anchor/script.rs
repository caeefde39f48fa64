//! The anchors' one script call on Redis (`bare` over HTTP, `rls_load bare` over gRPC):
//! ratelab's bucket script, loaded once, run once per request on a pipelined connection of
//! its own (a [`Lane`], as `ratelab-server` runs it), with the arguments `redis-benchmark`
//! sends in the same benches, the unchanging ones encoded once ([`Encoded`], as
//! `ratelab-server` encodes a limit's). What a front and one script call cost together, with
//! no limiter in between.

use ratelab_store::redis_lane::{Arg, Command, Encoded, Lane, Reply, Target};
use std::time::Duration;

/// The bucket script on one Redis: a lane to it and the script's digest.
pub struct Script {
    lane: Lane,
    /// `EVALSHA` and the script's digest.
    head: Encoded,
    /// The bucket: B = a = 10^6 per 10^9 ns.
    params: Encoded,
    /// The server's `host:port` (the URL without its password).
    pub addr: String,
}

impl Script {
    /// Loads ratelab's bucket script into the Redis at `url` and opens a lane to it.
    pub async fn on_redis(url: &str) -> Result<Script, String> {
        let timeout = Duration::from_secs(5);
        let target = Target::of(url, timeout)
            .ok_or("the Redis URL: expected redis://host:port/ (plain TCP, one server)")?;
        let addr = target.addr.clone();
        let load = async {
            let mut conn = redis::Client::open(url)?
                .get_multiplexed_async_connection()
                .await?;
            redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(ratelab_store::redis_store::SCRIPT)
                .query_async::<String>(&mut conn)
                .await
        };
        let sha = tokio::time::timeout(timeout, load)
            .await
            .map_err(|_| format!("loading the script on {addr}: no answer in {timeout:?}"))?
            .map_err(|e| format!("loading the script on {addr}: {e}"))?;
        Ok(Script {
            lane: Lane::new(target, Duration::from_secs(1)),
            head: Encoded::new([Arg::Bytes(b"EVALSHA"), Arg::Bytes(sha.as_bytes())]),
            params: Encoded::new([
                Arg::Int(1_000_000),
                Arg::Int(1_000_000),
                Arg::Int(1_000_000_000),
            ]),
            addr,
        })
    }

    /// Runs the script once on `key` (under `bare:`); whether it replied as benched (an
    /// array of integers: not an error reply such as `NOSCRIPT`, nor no reply).
    pub async fn call(&self, key: &[u8]) -> bool {
        // redis-benchmark's arguments in the bench scripts: B = a = 10^6 per 10^9 ns, cost 1,
        // the store's clock.
        let args = [
            Arg::Encoded(&self.head),
            Arg::Int(1),
            Arg::Joined(b"bare:", key),
            Arg::Encoded(&self.params),
            Arg::Int(1),
            Arg::Bytes(b""),
            Arg::Bytes(b""),
        ];
        match self.lane.call(&Command::new(args.into_iter())) {
            Ok(rx) => matches!(rx.await, Ok(Reply::Ints(_))),
            Err(_) => false,
        }
    }
}
