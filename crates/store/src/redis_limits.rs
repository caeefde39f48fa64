//! Every limiter family on Redis: one call of [`LIMITS_SCRIPT`] per request over one limit's
//! key or several of any families (all or nothing, as one step), computing exactly what
//! `ratelab-core`'s transitions compute — decision, remaining, reset, retry-after and
//! full-after — on Redis `TIME` or on the caller's clock, by `EVALSHA`, loaded again after a
//! `NOSCRIPT` (a restarted or flushed Redis): on one server over plain TCP through the
//! store's lane (`decide_on_lane`), otherwise through redis-rs ([`decide`]). The script and
//! [`ScriptLimit`] live in [`crate::script`].

use crate::redis_conn::evalsha;
use crate::redis_lane::Arg;
use crate::redis_store::store_err;
use crate::script::read_reply;
pub use crate::script::{LIMITS_SCRIPT, ScriptLimit};
use crate::script_loads::ScriptLoads;
use crate::{AllApplied, LimitError, Sent, SentReply, StoreError};
use ratelab_core::{Algorithm, CostError, Nanos};

/// One request at every `(state key, limit, cost)` of `parts`, in one call of `script` (made
/// from [`LIMITS_SCRIPT`]) on `conn`: admitted and spent at every key, or at none. `now` is
/// the caller's clock; `None` decides on the store's. The keys must be distinct (and, on a
/// cluster, in one slot).
pub async fn decide(
    conn: &mut impl redis::aio::ConnectionLike,
    script: &redis::Script,
    parts: &[(&str, &ScriptLimit, u64)],
    now: Option<Nanos>,
) -> Result<AllApplied, LimitError> {
    decide_counted(conn, &ScriptLoads::default(), script, parts, now).await
}

/// [`decide`], its script loaded after a `NOSCRIPT` once per burst of the calls that share
/// `loads`.
pub(crate) async fn decide_counted(
    conn: &mut impl redis::aio::ConnectionLike,
    loads: &ScriptLoads,
    script: &redis::Script,
    parts: &[(&str, &ScriptLimit, u64)],
    now: Option<Nanos>,
) -> Result<AllApplied, LimitError> {
    let reply: Vec<i64> = invoke(conn, loads, script, parts, now, false).await?;
    // A reply this client cannot read comes after the script ran (and may have written): not
    // `Corrupt`, which promises nothing was written, but a store that misbehaved.
    read_reply(parts, &reply).map_err(|_| LimitError::Store(StoreError::Unavailable))
}

/// [`decide`], and the state the request wrote at each key (`""` where it wrote nothing): what
/// a caller that may have to give the request back passes to `refund.lua`.
pub async fn decide_keeping_states(
    conn: &mut impl redis::aio::ConnectionLike,
    script: &redis::Script,
    parts: &[(&str, &ScriptLimit, u64)],
    now: Option<Nanos>,
) -> Result<(AllApplied, Vec<String>), LimitError> {
    decide_keeping_states_counted(conn, &ScriptLoads::default(), script, parts, now).await
}

/// [`decide_keeping_states`], loading its script as [`decide_counted`] does.
pub(crate) async fn decide_keeping_states_counted(
    conn: &mut impl redis::aio::ConnectionLike,
    loads: &ScriptLoads,
    script: &redis::Script,
    parts: &[(&str, &ScriptLimit, u64)],
    now: Option<Nanos>,
) -> Result<(AllApplied, Vec<String>), LimitError> {
    let (reply, states): (Vec<i64>, Vec<String>) =
        invoke(conn, loads, script, parts, now, true).await?;
    let all = read_reply(parts, &reply).map_err(|_| LimitError::Store(StoreError::Unavailable))?;
    if states.len() != parts.len() {
        return Err(LimitError::Store(StoreError::Unavailable));
    }
    Ok((all, states))
}

/// Every cost within its limit, no key twice: what the script is not asked.
fn check(parts: &[(&str, &ScriptLimit, u64)]) -> Result<(), LimitError> {
    for (i, (key, limit, cost)) in parts.iter().enumerate() {
        let most = limit.policy().quota().limit;
        if *cost > most {
            return Err(LimitError::Cost(CostError {
                cost: *cost,
                limit: most,
            }));
        }
        if parts[..i].iter().any(|(k, _, _)| k == key) {
            return Err(LimitError::RepeatedKey);
        }
    }
    Ok(())
}

/// [`decide`] on `store`'s lane (one server over plain TCP, as the token bucket's calls
/// go): `EVALSHA sha` of the limits script, loaded again on the lane after a `NOSCRIPT`.
pub(crate) async fn decide_on_lane(
    store: &crate::redis_store::RedisStore,
    lane: &crate::redis_lane::Lane,
    sha: &str,
    parts: &[(&str, &ScriptLimit, u64)],
    now: Option<Nanos>,
) -> Result<AllApplied, LimitError> {
    use crate::redis_lane::Command;
    check(parts)?;
    let command = Command::new(limits_args(sha, parts, now, false).into_iter());
    let reply = store
        .on_lane(lane, &command, sha, &LIMITS_SCRIPT)
        .await
        .map_err(LimitError::Store)?;
    read_reply(parts, &reply).map_err(|_| LimitError::Store(StoreError::Unavailable))
}

/// [`decide_on_lane`] sent on `lane` now ([`crate::StoreClient::send`],
/// [`crate::StoreClient::send_all`]); its reply is read by [`read_sent`].
pub(crate) fn send_on_lane(
    lane: &crate::redis_lane::Lane,
    sha: &str,
    parts: &[(&str, &ScriptLimit, u64)],
    now: Option<Nanos>,
) -> Result<Sent, LimitError> {
    use crate::redis_lane::Command;
    check(parts)?;
    let command = Command::new(limits_args(sha, parts, now, false).into_iter());
    lane.call(&command)
        .map(Sent::on_lane)
        .map_err(|_| LimitError::Store(StoreError::Unavailable))
}

/// The reply to a call [`send_on_lane`] sent over `parts` (their keys and costs are not
/// read), read as [`decide_on_lane`] reads it; `None` on `NOSCRIPT` (the caller calls again
/// through `decide_on_lane`, which loads the script).
pub(crate) fn read_sent(
    parts: &[(&str, &ScriptLimit, u64)],
    reply: SentReply,
) -> Option<Result<AllApplied, LimitError>> {
    let unreadable = |_| LimitError::Store(StoreError::Unavailable);
    Some(match reply.ints()? {
        Ok(r) => read_reply(parts, &r).map_err(unreadable),
        Err(e) => Err(LimitError::Store(e)),
    })
}

/// The limits script's `EVALSHA` over `parts`, as the lane and redis-rs send it alike: its
/// SHA, the keys, the caller's clock (or none), each limit's family, parameters and cost, and
/// `state` when the written states are asked for.
fn limits_args<'a>(
    sha: &'a str,
    parts: &[(&'a str, &ScriptLimit, u64)],
    now: Option<Nanos>,
    states: bool,
) -> Vec<Arg<'a>> {
    let (sec, nsec) = match now {
        Some(t) => (
            Arg::Int(t.as_u64() / 1_000_000_000),
            Arg::Int(t.as_u64() % 1_000_000_000),
        ),
        None => (Arg::Bytes(b""), Arg::Bytes(b"")),
    };
    let mut args = Vec::with_capacity(6 + 6 * parts.len());
    args.extend([
        Arg::Bytes(b"EVALSHA"),
        Arg::Bytes(sha.as_bytes()),
        Arg::Int(parts.len() as u64),
    ]);
    args.extend(parts.iter().map(|(key, _, _)| Arg::Bytes(key.as_bytes())));
    args.extend([sec, nsec]);
    for (_, limit, cost) in parts {
        let (family, params) = limit.script_args();
        args.push(Arg::Bytes(family.as_bytes()));
        args.extend(params.map(Arg::Int));
        args.push(Arg::Int(*cost));
    }
    if states {
        args.push(Arg::Bytes(b"state"));
    }
    args
}

/// The script's call over `parts`, asking for the written states when `states`: `EVALSHA`,
/// the script loaded after a `NOSCRIPT` ([`evalsha`]).
async fn invoke<T: redis::FromRedisValue>(
    conn: &mut impl redis::aio::ConnectionLike,
    loads: &ScriptLoads,
    script: &redis::Script,
    parts: &[(&str, &ScriptLimit, u64)],
    now: Option<Nanos>,
    states: bool,
) -> Result<T, LimitError> {
    check(parts)?;
    let mut cmd = redis::Cmd::new();
    for a in limits_args(script.get_hash(), parts, now, states) {
        cmd.arg(a);
    }
    evalsha(conn, loads, script, &cmd)
        .await
        .map_err(|e| LimitError::Store(store_err(&e)))
}
