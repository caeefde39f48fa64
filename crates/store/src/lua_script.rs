//! ratelab's Redis scripts run in process: [`LIMITS_SCRIPT`](crate::script::LIMITS_SCRIPT), the
//! very text Redis runs, in an embedded Lua 5.1 (the Lua Redis embeds) with the few Redis
//! commands it calls served over one key's state. The simulator's store node decides with it
//! when a scenario asks (`store.engine: "redis_scripts"`), so the simulator's faults,
//! checkers and explorer judge the scripts themselves, not only the Rust core they were
//! written to match.
//!
//! [`transition`] is one script call over one key: the state it holds goes in as the value
//! the script's `GET` reads (written as the scripts write it, [`crate::redis_state::encode`]),
//! the caller's clock as the script's arguments (the script never calls `TIME` then), and
//! what comes out is the decision in the script's reply and the state its `SET` wrote. The
//! key's lifetime stays the store's to keep, as in [`crate::MemoryStore`].
//!
//! Each thread holds one Lua state with the script compiled once; a call sets the script's
//! `KEYS` and `ARGV` anew and serves its commands from the call's own key, so no call sees
//! another's. Lua's arithmetic is the machine's doubles: the same on every run.

use crate::redis_state::{decode, encode};
use crate::script::{LIMITS_SCRIPT, ScriptLimit, read_reply};
use mlua::{Function, Lua, Value, Variadic};
use ratelab_core::{Algorithm, CostError, Decision, Nanos, Policy, PolicyState};
use std::cell::RefCell;

/// Why a script call decided nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScriptError {
    /// A cost the limit can never admit (the script is not called, as on Redis).
    Cost(CostError),
    /// A policy beyond the script's exact range.
    Range(String),
    /// The script failed, refused the state (`CORRUPT`), or replied what a decision is not.
    Failed(String),
}

impl std::fmt::Display for ScriptError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScriptError::Cost(c) => write!(f, "{c}"),
            ScriptError::Range(m) => write!(f, "{m}"),
            ScriptError::Failed(m) => write!(f, "the limits script failed: {m}"),
        }
    }
}

/// The one key a call serves: its value before the script ran, and what the script wrote.
#[derive(Default)]
struct Slot {
    value: Option<String>,
    written: Option<String>,
}

/// A thread's Lua state and the script compiled in it.
struct Engine {
    lua: Lua,
    script: Function,
    /// The script's text.
    text: String,
}

thread_local! {
    static ENGINE: RefCell<Option<Engine>> = const { RefCell::new(None) };
    static SLOT: RefCell<Slot> = RefCell::new(Slot::default());
    /// The text [`transition`] runs in place of `limits.lua` on this thread, if any.
    static PLANTED: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Runs `f` with [`transition`] running `text` in place of `limits.lua` on this thread (runs
/// on other threads, as `ratelab run` spreads seeds, keep the script): a script under test,
/// or one with a bug planted, through code that calls [`transition`] on this thread (the
/// simulator's store node) — to show that its checkers catch what a script gets wrong.
pub fn with_script<R>(text: &str, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<String>);
    impl Drop for Restore {
        fn drop(&mut self) {
            PLANTED.with_borrow_mut(|p| *p = self.0.take());
        }
    }
    let _restore = Restore(PLANTED.with_borrow_mut(|p| p.replace(text.to_owned())));
    f()
}

/// A Lua state with Redis's `redis.call` (`GET`, `SET … PX|KEEPTTL`, `DEL`; anything else
/// an error) and `redis.error_reply` / `redis.status_reply`, and `text` compiled in it.
fn engine(text: &str) -> mlua::Result<Engine> {
    let lua = Lua::new();
    let redis = lua.create_table()?;
    redis.set(
        "call",
        lua.create_function(|lua, args: Variadic<Value>| {
            let word = |i: usize| -> mlua::Result<String> {
                match args.get(i) {
                    Some(Value::String(s)) => Ok(s.to_str()?.to_string()),
                    Some(Value::Integer(n)) => Ok(n.to_string()),
                    Some(Value::Number(n)) => Ok(format!("{n}")),
                    _ => Err(mlua::Error::runtime("ERR wrong arguments")),
                }
            };
            let command = word(0)?.to_ascii_uppercase();
            SLOT.with_borrow_mut(|slot| match command.as_str() {
                "GET" => Ok(match &slot.value {
                    Some(v) => Value::String(lua.create_string(v)?),
                    None => Value::Boolean(false),
                }),
                "SET" => {
                    let value = word(2)?;
                    slot.value = Some(value.clone());
                    slot.written = Some(value);
                    Ok(Value::Boolean(true))
                }
                "DEL" => {
                    slot.value = None;
                    slot.written = Some(String::new());
                    Ok(Value::Integer(1))
                }
                other => Err(mlua::Error::runtime(format!(
                    "ERR {other} is not served here: the caller's clock is the script's"
                ))),
            })
        })?,
    )?;
    redis.set(
        "error_reply",
        lua.create_function(|lua, msg: String| {
            let t = lua.create_table()?;
            t.set("err", msg)?;
            Ok(t)
        })?,
    )?;
    redis.set(
        "status_reply",
        lua.create_function(|lua, msg: String| {
            let t = lua.create_table()?;
            t.set("ok", msg)?;
            Ok(t)
        })?,
    )?;
    lua.globals().set("redis", redis)?;
    // As Redis: a script that assigns a global (a `local` forgotten) fails, rather than keep
    // state from one call to the next.
    let guard = lua.create_table()?;
    guard.set(
        "__newindex",
        lua.create_function(|_, (_, name): (Value, Value)| -> mlua::Result<()> {
            Err(mlua::Error::runtime(format!(
                "Script attempted to create global variable {name:?}"
            )))
        })?,
    )?;
    lua.globals().set_metatable(Some(guard))?;
    let script = lua.load(text).set_name("limits.lua").into_function()?;
    Ok(Engine {
        lua,
        script,
        text: text.to_owned(),
    })
}

/// One call of `text` on this thread's engine over one key holding `value`: the script's
/// reply as integers, and what it wrote.
fn call(
    text: &str,
    value: Option<String>,
    argv: &[String],
) -> Result<(Vec<i64>, Option<String>), String> {
    ENGINE.with_borrow_mut(|e| {
        if e.as_ref().is_none_or(|e| e.text != text) {
            *e = Some(engine(text).map_err(|err| err.to_string())?);
        }
        let Some(engine) = e.as_ref() else {
            return Err("no Lua state".to_owned());
        };
        SLOT.with_borrow_mut(|slot| {
            *slot = Slot {
                value,
                written: None,
            }
        });
        let run = || -> mlua::Result<Value> {
            let g = engine.lua.globals();
            g.raw_set("KEYS", engine.lua.create_sequence_from(["k"])?)?;
            g.raw_set(
                "ARGV",
                engine.lua.create_sequence_from(argv.iter().cloned())?,
            )?;
            engine.script.call::<Value>(())
        };
        let reply = run().map_err(|err| err.to_string())?;
        let written = SLOT.with_borrow_mut(|slot| slot.written.take());
        let Value::Table(t) = reply else {
            return Err(format!("a reply that is no array: {reply:?}"));
        };
        if let Ok(Some(err)) = t.get::<Option<String>>("err") {
            return Err(err);
        }
        // Redis turns a Lua number into an integer by dropping its fraction.
        let ints = t
            .sequence_values::<f64>()
            .map(|v| v.map(|n| n as i64))
            .collect::<mlua::Result<Vec<i64>>>()
            .map_err(|err| err.to_string())?;
        Ok((ints, written))
    })
}

/// `policy`'s transition as the limits script computes it: one request of `cost` at `now`
/// on a key holding `state`. The state after it (the input's on a denial, which writes
/// nothing) and the decision.
pub fn transition(
    policy: &Policy,
    state: Option<PolicyState>,
    now: Nanos,
    cost: u64,
) -> Result<(Option<PolicyState>, Decision), ScriptError> {
    match PLANTED.with_borrow(Option::clone) {
        Some(text) => transition_by(&text, policy, state, now, cost),
        None => transition_by(&LIMITS_SCRIPT, policy, state, now, cost),
    }
}

/// [`transition`] by the script `text` in place of `limits.lua` (a script under test, or one
/// with a bug planted to show a checker catching it).
pub fn transition_by(
    text: &str,
    policy: &Policy,
    state: Option<PolicyState>,
    now: Nanos,
    cost: u64,
) -> Result<(Option<PolicyState>, Decision), ScriptError> {
    let limit = ScriptLimit::new(*policy).map_err(ScriptError::Range)?;
    let most = policy.quota().limit;
    if cost > most {
        return Err(ScriptError::Cost(CostError { cost, limit: most }));
    }
    let value =
        match state {
            Some(s) => Some(encode(policy, &s).ok_or_else(|| {
                ScriptError::Failed(format!("{s:?} is not a state of {policy:?}"))
            })?),
            None => None,
        };
    let (family, params) = limit.script_args();
    let t = now.as_u64();
    let mut argv = vec![
        (t / 1_000_000_000).to_string(),
        (t % 1_000_000_000).to_string(),
        family.to_owned(),
    ];
    argv.extend(params.iter().map(u64::to_string));
    argv.push(cost.to_string());
    let (reply, written) = call(text, value, &argv).map_err(ScriptError::Failed)?;
    let all = read_reply(&[("k", &limit, cost)], &reply)
        .map_err(|_| ScriptError::Failed(format!("an unreadable reply {reply:?}")))?;
    let decision = all.decisions[0];
    let next = match (all.allowed, written) {
        (true, Some(w)) => Some(decode(policy, &w).map_err(|_| {
            ScriptError::Failed(format!("it wrote {w:?}, not a state of {policy:?}"))
        })?),
        (true, None) => return Err(ScriptError::Failed("it admitted and wrote nothing".into())),
        (false, None) => state,
        (false, Some(w)) => return Err(ScriptError::Failed(format!("it denied and wrote {w:?}"))),
    };
    Ok((next, decision))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratelab_core::{FirstHitWindow, FixedWindow, SlidingWindow, SteppedBucket, TokenBucket};

    /// Every family, 400 requests of costs 1 to 3 at clock steps from 0 to ~1.3 s, forward
    /// and now and then back: the script's decision and state are the core's.
    #[test]
    fn the_script_decides_as_the_core_for_every_family() {
        let ms = Nanos::from_millis;
        let policies = [
            Policy::TokenBucket(TokenBucket::per_second(5, 3).unwrap()),
            Policy::FixedWindow(FixedWindow::new(5, ms(700)).unwrap()),
            Policy::FirstHitWindow(FirstHitWindow::new(4, ms(500)).unwrap()),
            Policy::SlidingWindow(SlidingWindow::new(6, ms(900)).unwrap()),
            Policy::SteppedBucket(SteppedBucket::new(5, 2, ms(300)).unwrap()),
        ];
        for policy in policies {
            let (mut script, mut core) = (None, None);
            let mut t: u64 = 1_764_500_000_123_456_789;
            for i in 0..400u64 {
                let step = (i * 7_919_337) % 1_300_000_000;
                t = if i % 17 == 5 {
                    t - step / 8
                } else {
                    t + step / 4
                };
                let cost = 1 + i % 3;
                let (s, got) = transition(&policy, script, Nanos(t), cost).unwrap();
                let (c, want) = policy.transition(core, Nanos(t), cost).unwrap();
                assert_eq!(got, want, "{policy:?}: request {i}");
                if want.allowed {
                    core = Some(c);
                }
                script = s;
                // The same state, as far as any later decision can tell.
                let probe = |st| policy.transition(st, Nanos(t + 1), 0).map(|(_, d)| d);
                assert_eq!(probe(script), probe(core), "{policy:?}: after request {i}");
            }
        }
    }

    /// A bucket whose state lies far ahead of the clock (a caller's clock set back): every
    /// field stays the core's, where the scaled lead passes 2^53; and a state more than 2^52
    /// ns ahead is refused (`CORRUPT`), as every family's is.
    #[test]
    fn a_bucket_far_ahead_of_the_clock_keeps_its_fields_exact() {
        let cases = [
            // 5 tokens, 5 000 001 per 10 ms: 9 s back makes the scaled lead ~4.6e16 (> 2^53).
            (
                TokenBucket::new(5, 5_000_001, Nanos::from_millis(10)).unwrap(),
                1_764_500_000_105_083_685,
                1_764_499_990_967_219_202,
            ),
            // 5 per second, an hour back.
            (
                TokenBucket::per_second(5, 3).unwrap(),
                1_764_500_000_000_000_001,
                1_764_496_400_000_000_000,
            ),
        ];
        for (bucket, first, then) in cases {
            let policy = Policy::TokenBucket(bucket);
            let (script, _) = transition(&policy, None, Nanos(first), 1).unwrap();
            let (core, _) = policy.transition(None, Nanos(first), 1).unwrap();
            assert_eq!(script, Some(core), "{policy:?}");
            for cost in [0, 1, 5] {
                let (_, got) = transition(&policy, script, Nanos(then), cost).unwrap();
                let (_, want) = policy.transition(Some(core), Nanos(then), cost).unwrap();
                assert_eq!(got, want, "{policy:?}, cost {cost}");
            }
        }
        // The state's second more than 4 503 599 s (2^52 ns) after the clock's: refused, as
        // every family's is, not answered with rounded fields; at that bound, answered as the
        // core answers.
        let policy = Policy::TokenBucket(TokenBucket::per_second(5, 3).unwrap());
        let first = 1_764_500_000_000_000_000; // a whole second: the state's second is its
        let (state, _) = transition(&policy, None, Nanos(first), 1).unwrap();
        let (core, _) = policy.transition(None, Nanos(first), 1).unwrap();
        let s = 1_000_000_000;
        for back in [4_503_600 * s, 4_503_599 * s + 1, 1 << 53] {
            let far = transition(&policy, state, Nanos(first - back), 1);
            assert!(
                matches!(far, Err(ScriptError::Failed(ref m)) if m.contains("CORRUPT")),
                "{back} ns back: {far:?}"
            );
        }
        for back in [4_503_599 * s, 1 << 51] {
            let (_, got) = transition(&policy, state, Nanos(first - back), 1).unwrap();
            let (_, want) = policy
                .transition(Some(core), Nanos(first - back), 1)
                .unwrap();
            assert_eq!(got, want, "{back} ns back");
        }
    }

    #[test]
    fn a_cost_beyond_the_limit_and_a_policy_beyond_the_range_are_refused() {
        let p = Policy::FixedWindow(FixedWindow::new(5, Nanos::from_millis(100)).unwrap());
        assert!(matches!(
            transition(&p, None, Nanos(1), 6),
            Err(ScriptError::Cost(_))
        ));
        let short = Policy::FixedWindow(FixedWindow::new(5, Nanos(10)).unwrap());
        assert!(matches!(
            transition(&short, None, Nanos(1), 1),
            Err(ScriptError::Range(_))
        ));
    }

    /// A script with a bug planted (a window that forgets its count) is told apart: the
    /// comparison above is not one that cannot fail.
    #[test]
    fn a_planted_bug_in_the_script_shows() {
        // The fixed window forgets its count within the window it is in.
        let planted = LIMITS_SCRIPT.replace(
            "if st[1] >= index then win, count = st[1], st[2] end",
            "if st[1] > index then win, count = st[1], st[2] end",
        );
        assert_ne!(planted, *LIMITS_SCRIPT, "the bug is planted");
        let p = Policy::FixedWindow(FixedWindow::new(3, Nanos::from_millis(1_000)).unwrap());
        let mut state = None;
        let mut admitted = 0;
        for _ in 0..6 {
            let (s, d) = transition_by(&planted, &p, state, Nanos(5_000_000_000), 1).unwrap();
            state = s;
            admitted += u32::from(d.allowed);
        }
        assert_eq!(admitted, 6, "every request, past the limit of 3");
        // And the script itself, on the same thread afterwards, admits the limit.
        let mut state = None;
        let mut admitted = 0;
        for _ in 0..6 {
            let (s, d) = transition(&p, state, Nanos(5_000_000_000), 1).unwrap();
            state = s;
            admitted += u32::from(d.allowed);
        }
        assert_eq!(admitted, 3);
    }

    /// As on Redis, a script that assigns a global fails.
    #[test]
    fn a_script_that_assigns_a_global_fails() {
        let leaky = format!("leaked = 1\n{}", *LIMITS_SCRIPT);
        let p = Policy::FixedWindow(FixedWindow::new(3, Nanos::from_millis(1_000)).unwrap());
        let e = transition_by(&leaky, &p, None, Nanos(5_000_000_000), 1).unwrap_err();
        assert!(
            matches!(&e, ScriptError::Failed(m) if m.contains("global variable")),
            "{e}"
        );
        assert!(transition(&p, None, Nanos(5_000_000_000), 1).is_ok());
    }
}
