//! A limiter in Redis as a probe target: a user's Lua script, or the script-free
//! read-then-write client most teams start from.
//!
//! **A script** is called with `EVALSHA` (loaded on first use, reloaded after a `NOSCRIPT`)
//! over several connections, with its `KEYS` and `ARGV` built from templates:
//!
//! ```text
//! --keys 'rl:{key}' --args '{capacity},{amount},{period_ns},{cost},,' --reply allowed=0,remaining=1,retry_after_ns=3
//! ```
//!
//! Placeholders: `{key}`, `{cost}`, `{id}` (the request's id); the claimed policy's
//! `{capacity}` (`{limit}` for a window), `{amount}`, `{period_ns}`, `{period_ms}`,
//! `{period_s}`, `{rate}` (per second), `{window_ms}`, `{window_s}`; the probe's wall clock
//! `{now_s}`, `{now_ms}`, `{now_us}`. The reply's fields are found by index into its array
//! (a plain integer reply is index 0): `allowed` (non-zero: admitted), and optionally
//! `remaining` and `retry_after_ns|us|ms|s`.
//!
//! **`get-set`** is ratelab's own naive path over the user's Redis: `GET` the bucket and
//! `TIME`, decide in the client, `SET` it back — two round trips, and the lost update
//! between them that the probe must find.

use super::Target;
use ratelab_check::probe::{Claim, Fields, Outcome};
use ratelab_core::{Nanos, TokenBucket};
use ratelab_store::redis_conn::Conn;
use ratelab_store::redis_store::{RedisOptions, RedisStore};
use ratelab_store::{Key, Path, TimeSource, decide_remote};
use std::sync::Arc;
use std::time::Duration;

/// Where the reply's fields are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyMap {
    /// Index of the allowed flag.
    pub allowed: usize,
    /// Index of the remaining count.
    pub remaining: Option<usize>,
    /// Index of the wait on a denial, and its unit.
    pub retry_after: Option<(usize, Nanos)>,
}

impl ReplyMap {
    /// Parses `allowed=0,remaining=1,retry_after_ms=2`.
    pub fn parse(text: &str) -> Result<ReplyMap, String> {
        let mut map = ReplyMap {
            allowed: usize::MAX,
            remaining: None,
            retry_after: None,
        };
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, index) = part
                .split_once('=')
                .ok_or_else(|| format!("--reply {part:?}: expected NAME=INDEX"))?;
            let index: usize = index
                .trim()
                .parse()
                .map_err(|_| format!("--reply {part:?}: the index is not a whole number"))?;
            let unit = |u: u64| Some((index, Nanos(u)));
            match name.trim() {
                "allowed" => map.allowed = index,
                "remaining" => map.remaining = Some(index),
                "retry_after_ns" => map.retry_after = unit(1),
                "retry_after_us" => map.retry_after = unit(1_000),
                "retry_after_ms" => map.retry_after = unit(1_000_000),
                "retry_after_s" => map.retry_after = unit(1_000_000_000),
                other => {
                    return Err(format!(
                        "--reply {other:?}: expected allowed, remaining or retry_after_ns|us|ms|s"
                    ));
                }
            }
        }
        if map.allowed == usize::MAX {
            return Err(format!("--reply {text:?}: allowed=INDEX is required"));
        }
        Ok(map)
    }
}

/// The placeholders a template may use.
const PLACEHOLDERS: [&str; 15] = [
    "key",
    "cost",
    "id",
    "capacity",
    "limit",
    "amount",
    "period_ns",
    "period_ms",
    "period_s",
    "rate",
    "window_ms",
    "window_s",
    "now_s",
    "now_ms",
    "now_us",
];

/// Checks every `{…}` of `template` is a known placeholder.
fn check_template(template: &str) -> Result<(), String> {
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let close = after
            .find('}')
            .ok_or_else(|| format!("template {template:?}: '{{' without '}}'"))?;
        let name = &after[..close];
        if name.is_empty() || !PLACEHOLDERS.contains(&name) {
            return Err(format!(
                "template {template:?}: unknown placeholder {{{name}}}; known: {}",
                PLACEHOLDERS.join(", ")
            ));
        }
        rest = &after[close + 1..];
    }
    Ok(())
}

/// A user's script and how to call it.
#[derive(Clone, Debug)]
pub struct ScriptSpec {
    /// The Redis URL.
    pub url: String,
    /// The script's source.
    pub source: String,
    /// `KEYS` templates.
    pub keys: Vec<String>,
    /// `ARGV` templates.
    pub args: Vec<String>,
    /// Where the reply's fields are.
    pub reply: ReplyMap,
    /// Connections to spread the calls over.
    pub connections: usize,
    /// Per-call timeout.
    pub timeout: Duration,
}

/// A probe target calling a Lua script.
#[derive(Clone)]
pub struct ScriptTarget {
    conns: Arc<Vec<Conn>>,
    script: Arc<redis::Script>,
    spec: Arc<ScriptSpec>,
    claim: Claim,
}

impl std::fmt::Debug for ScriptTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptTarget")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

impl ScriptTarget {
    /// Validates the templates, connects and loads the script (a script Redis refuses is
    /// reported here, before any request).
    pub async fn connect(spec: ScriptSpec, claim: Claim) -> Result<ScriptTarget, String> {
        for t in spec.keys.iter().chain(&spec.args) {
            check_template(t)?;
        }
        // One server or a cluster (`redis+cluster://…`): a cluster routes each call to its
        // first key's slot, so a script over several keys needs them in one slot.
        let mut conns = Vec::new();
        for _ in 0..spec.connections.max(1) {
            let conn = tokio::time::timeout(
                Duration::from_secs(5),
                Conn::open(spec.url.as_str(), Duration::from_secs(5)),
            )
            .await
            .map_err(|_| format!("{}: no connection within 5 s", spec.url))?
            .map_err(|e| format!("{}: {e}", spec.url))?;
            conns.push(conn);
        }
        let script = redis::Script::new(&spec.source);
        let mut c = conns[0].clone();
        script
            .prepare_invoke()
            .load_async(&mut c)
            .await
            .map_err(|e| format!("the script does not load: {e}"))?;
        Ok(ScriptTarget {
            conns: Arc::new(conns),
            script: Arc::new(script),
            spec: Arc::new(spec),
            claim,
        })
    }

    fn fill(&self, template: &str, id: u64, key: &str, cost: u64) -> String {
        if !template.contains('{') {
            return template.to_owned();
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let (capacity, amount, period) = match self.claim {
            Claim::TokenBucket {
                capacity,
                amount,
                period,
            } => (capacity, amount, period),
            Claim::Window { limit, window, .. } => (limit, limit, window),
            // Its parameters as a limits file writes them: a bucket's capacity and refill, a
            // window's limit and length.
            Claim::Policy(p) => {
                let spec = p.spec();
                let count = spec.capacity.or(spec.limit).unwrap_or(1);
                let amount = spec.refill.or(spec.refill_per_sec).unwrap_or(count);
                let ms = spec.refill_period_ms.or(spec.window_ms).unwrap_or(1_000);
                (count, amount, Nanos::from_millis(ms))
            }
        };
        let p = period.as_u64();
        let rate = amount as f64 * 1e9 / p.max(1) as f64;
        let values: [(&str, String); 15] = [
            ("key", key.to_owned()),
            ("cost", cost.to_string()),
            ("id", id.to_string()),
            ("capacity", capacity.to_string()),
            ("limit", capacity.to_string()),
            ("amount", amount.to_string()),
            ("period_ns", p.to_string()),
            ("period_ms", (p / 1_000_000).to_string()),
            ("period_s", (p / 1_000_000_000).to_string()),
            ("rate", format!("{rate}")),
            ("window_ms", (p / 1_000_000).to_string()),
            ("window_s", (p / 1_000_000_000).to_string()),
            ("now_s", now.as_secs().to_string()),
            ("now_ms", now.as_millis().to_string()),
            ("now_us", now.as_micros().to_string()),
        ];
        let mut out = template.to_owned();
        for (name, value) in &values {
            out = out.replace(&format!("{{{name}}}"), value);
        }
        out
    }
}

/// A reply value as an integer, if it is one.
fn integer(v: &redis::Value) -> Option<i64> {
    match v {
        redis::Value::Int(i) => Some(*i),
        redis::Value::Boolean(b) => Some(i64::from(*b)),
        redis::Value::Okay => Some(1),
        redis::Value::Nil => Some(0),
        redis::Value::Double(d) if d.is_finite() => Some(d.floor() as i64),
        redis::Value::BulkString(b) => std::str::from_utf8(b).ok()?.trim().parse().ok(),
        redis::Value::SimpleString(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// The decision and fields a script's reply carries, located by `map`.
pub fn read_reply(v: &redis::Value, map: &ReplyMap) -> (Outcome, Fields) {
    let one = [v.clone()];
    let items: &[redis::Value] = match v {
        redis::Value::Array(items) => items,
        _ => &one,
    };
    let at = |i: usize| items.get(i).and_then(integer);
    let Some(flag) = at(map.allowed) else {
        return (
            Outcome::Failed(format!(
                "reply {v:?}: no integer allowed flag at index {}",
                map.allowed
            )),
            Fields::default(),
        );
    };
    let mut fields = Fields {
        retry_after_unit: Nanos(1),
        ..Fields::default()
    };
    fields.remaining = map
        .remaining
        .and_then(at)
        .and_then(|r| u64::try_from(r).ok());
    if flag == 0
        && let Some((i, unit)) = map.retry_after
    {
        fields.retry_after = at(i)
            .and_then(|w| u64::try_from(w).ok())
            .map(|w| Nanos(w.saturating_mul(unit.as_u64())));
        fields.retry_after_unit = unit;
    }
    let outcome = if flag != 0 {
        Outcome::Allowed
    } else {
        Outcome::Denied
    };
    (outcome, fields)
}

impl Target for ScriptTarget {
    async fn send(&self, id: u64, key: &str, cost: u64) -> (Outcome, Fields) {
        let mut inv = self.script.prepare_invoke();
        for k in &self.spec.keys {
            inv.key(self.fill(k, id, key, cost));
        }
        for a in &self.spec.args {
            inv.arg(self.fill(a, id, key, cost));
        }
        let mut conn = self.conns[id as usize % self.conns.len()].clone();
        match tokio::time::timeout(
            self.spec.timeout,
            inv.invoke_async::<redis::Value>(&mut conn),
        )
        .await
        {
            Ok(Ok(v)) => read_reply(&v, &self.spec.reply),
            Ok(Err(e)) => (Outcome::Failed(e.to_string()), Fields::default()),
            Err(_) => (Outcome::Failed("timeout".into()), Fields::default()),
        }
    }
}

/// ratelab's naive read-then-write client over the user's Redis.
#[derive(Clone, Debug)]
pub struct GetSetTarget {
    store: RedisStore,
}

impl GetSetTarget {
    /// Connects for the claimed token bucket (the pattern computes a bucket in the client).
    pub async fn connect(
        url: &str,
        claim: Claim,
        timeout: Duration,
    ) -> Result<GetSetTarget, String> {
        let Claim::TokenBucket {
            capacity,
            amount,
            period,
        } = claim
        else {
            return Err("--pattern get-set computes a token bucket: give --policy token-bucket:B,R or leaky-bucket:RATE,BURST".into());
        };
        let bucket =
            TokenBucket::new(capacity, amount, period).map_err(|e| format!("--policy: {e}"))?;
        let options = RedisOptions {
            prefix: "ratelab-probe:".into(),
            timeout,
        };
        let store = RedisStore::connect(url, bucket, options)
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        Ok(GetSetTarget { store })
    }
}

impl Target for GetSetTarget {
    async fn send(&self, _id: u64, key: &str, cost: u64) -> (Outcome, Fields) {
        let key = match Key::new(key) {
            Ok(k) => k,
            Err(e) => return (Outcome::Failed(e.to_string()), Fields::default()),
        };
        match decide_remote(
            &self.store,
            Path::Naive,
            TimeSource::Store,
            &key,
            Nanos::ZERO,
            cost,
        )
        .await
        {
            Ok(o) => (
                if o.decision.allowed {
                    Outcome::Allowed
                } else {
                    Outcome::Denied
                },
                Fields {
                    remaining: Some(o.decision.remaining),
                    reset_secs: None,
                    retry_after: o.decision.retry_after,
                    retry_after_unit: Nanos(1),
                    ..Fields::default()
                },
            ),
            Err(e) => (Outcome::Failed(e.to_string()), Fields::default()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_maps_parse_and_locate_fields() {
        let m = ReplyMap::parse("allowed=0,remaining=1,retry_after_ms=3").unwrap();
        let v = redis::Value::Array(vec![
            redis::Value::Int(0),
            redis::Value::Int(0),
            redis::Value::Int(7),
            redis::Value::BulkString(b"250".to_vec()),
        ]);
        let (o, f) = read_reply(&v, &m);
        assert_eq!(o, Outcome::Denied);
        assert_eq!(f.retry_after, Some(Nanos(250_000_000)));
        assert_eq!(f.retry_after_unit, Nanos(1_000_000));
        let (o, _) = read_reply(
            &redis::Value::Int(1),
            &ReplyMap::parse("allowed=0").unwrap(),
        );
        assert_eq!(o, Outcome::Allowed);
        let (o, _) = read_reply(&redis::Value::Array(vec![]), &m);
        assert!(matches!(o, Outcome::Failed(_)));
        for (bad, says) in [
            ("remaining=1", "allowed=INDEX"),
            ("allowed=x", "whole number"),
            ("allow=1", "expected allowed"),
            ("allowed", "NAME=INDEX"),
        ] {
            assert!(ReplyMap::parse(bad).unwrap_err().contains(says), "{bad}");
        }
    }

    #[test]
    fn templates_name_only_known_placeholders() {
        assert!(check_template("rl:{key}:{cost}").is_ok());
        assert!(check_template("{capacity},{now_ms}").is_ok());
        assert!(
            check_template("{nope}")
                .unwrap_err()
                .contains("unknown placeholder {nope}")
        );
        assert!(check_template("{key").is_err());
        assert!(check_template("{}").is_err());
    }
}
