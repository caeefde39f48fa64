//! A request at limits whose keys lie in several Redis Cluster slots, of any families.
//!
//! One script cannot span slots, so such a request is decided slot by slot: each slot's keys
//! in one script call (all or nothing there), every slot at once. If any slot denies it, the
//! request is denied — even if another slot could not be reached — and every slot that
//! admitted it is given back what it spent by `refund.lua`, one call per slot, in tasks of
//! their own so a dropped call does not cancel them; the denial waits for them a quarter of
//! the call's timeout at most (a second round trip). Until a refund lands another request can
//! see the spend; a refund that fails (the slot's primary lost) leaves it spent until it
//! refills or its window ends.
//!
//! The reply is as for one script: every key's decision, allowed only if every slot
//! admitted; a key whose spend was given back reports what it holds without it (the decision
//! at cost 0 on the state the request found, [`held_decision`]), a slot that could not be
//! reached nothing known.

use crate::redis_conn::{Conn, evalsha};
use crate::redis_state::held_decision;
use crate::script_loads::ScriptLoads;
use crate::{AllApplied, AllItem, Key, LimitError};
use core::future::Future;
use futures_util::future::join_all;
use ratelab_core::{Algorithm, Decision, Nanos, Policy};
use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::time::Duration;

pub use crate::script::REFUND_SCRIPT;

static REFUND: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(&REFUND_SCRIPT));

/// A Redis limit a cross-slot request can be decided at, slot by slot.
pub(crate) trait SlotClient: Clone + Send + Sync + 'static {
    /// The limit's policy.
    fn policy(&self) -> Policy;
    /// Its family and parameters as `refund.lua` takes them.
    fn refund_args(&self) -> (&'static str, [u64; 3]);
    /// The Redis key `key`'s state is stored under.
    fn state_key(&self, key: &Key) -> String;
    /// The connection refunds go through.
    fn connection(&self) -> &Conn;
    /// The scripts loaded through that connection after a `NOSCRIPT`.
    fn script_loads(&self) -> &ScriptLoads;
    /// One call's timeout.
    fn call_timeout(&self) -> Duration;
    /// One slot's items in one script call: its decisions, and the state written at each key
    /// (`""` where nothing was).
    fn decide_slot<'a>(
        items: &'a [AllItem<'a, Self>],
        now: Option<Nanos>,
    ) -> impl Future<Output = Result<(AllApplied, Vec<String>), LimitError>> + Send + 'a;
}

/// One slot's part: its decisions and each key's written state.
type SlotResult = Result<(AllApplied, Vec<String>), LimitError>;

/// Decides `items`, whose keys lie in `slots` (one per item, not all equal), slot by slot.
pub(crate) async fn apply_by_slot<C: SlotClient>(
    items: &[AllItem<'_, C>],
    slots: &[u16],
    now: Option<Nanos>,
) -> Result<AllApplied, LimitError> {
    let mut groups: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
    for (i, s) in slots.iter().enumerate() {
        groups.entry(*s).or_default().push(i);
    }
    let calls = groups.values().map(|idx| async move {
        let part: Vec<AllItem<'_, C>> = idx.iter().map(|&i| items[i]).collect();
        C::decide_slot(&part, now).await
    });
    let results = join_all(calls).await;
    let denied = results
        .iter()
        .any(|r| matches!(r, Ok((all, _)) if !all.allowed));
    let failed = results.iter().find_map(|r| r.as_ref().err().copied());
    if let (Some(e), false) = (failed, denied) {
        // Unreachable somewhere and denied nowhere: the caller's failure policy decides.
        // The slots that admitted spent, and are given back.
        refund_admitted(items, &groups, &results, now);
        return Err(e);
    }
    let mut decisions: Vec<Option<Decision>> = vec![None; items.len()];
    let mut store_time = Nanos::ZERO;
    for (idx, r) in groups.values().zip(&results) {
        if let Ok((all, _)) = r {
            store_time = store_time.max(all.store_time);
            for (&i, d) in idx.iter().zip(&all.decisions) {
                decisions[i] = Some(*d);
            }
        }
    }
    if denied {
        let refunds = refund_admitted(items, &groups, &results, now);
        // The refunds run to the end in their own tasks; the denial waits for them briefly,
        // so a client's next request finds them landed, and a slow refund never turns the
        // denial into a timeout.
        if let Some((first, _, _)) = items.first() {
            let cap = first.call_timeout() / 4;
            let _ = tokio::time::timeout(cap, join_all(refunds)).await;
        }
        for (idx, r) in groups.values().zip(&results) {
            let Ok((all, written)) = r else { continue };
            if !all.allowed {
                continue;
            }
            let at = now.unwrap_or(all.store_time);
            for (&i, w) in idx.iter().zip(written) {
                let (c, _, cost) = items[i];
                if let Some(d) = decisions[i].as_mut() {
                    *d = held_decision(&c.policy(), w, cost, at).unwrap_or(Decision {
                        remaining: (d.remaining + cost).min(d.limit),
                        ..*d
                    });
                }
            }
        }
    }
    // A slot that could not be reached reports what a denial by another would: nothing
    // spent there, nothing known.
    let unknown = |i: usize| Decision {
        allowed: true,
        limit: items[i].0.policy().quota().limit,
        remaining: 0,
        reset_after: Nanos::ZERO,
        retry_after: None,
        full_after: Nanos::ZERO,
    };
    Ok(AllApplied {
        allowed: !denied,
        decisions: decisions
            .into_iter()
            .enumerate()
            .map(|(i, d)| d.unwrap_or_else(|| unknown(i)))
            .collect(),
        store_time,
    })
}

/// Gives back, in the background, what the request spent at every slot that admitted it:
/// one refund script per slot. A refund that fails leaves the spend in place; the request
/// stays denied either way.
fn refund_admitted<C: SlotClient>(
    items: &[AllItem<'_, C>],
    groups: &BTreeMap<u16, Vec<usize>>,
    results: &[SlotResult],
    now: Option<Nanos>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    for (idx, r) in groups.values().zip(results) {
        let Ok((all, written)) = r else { continue };
        if !all.allowed {
            continue;
        }
        let first = items[idx[0]].0.clone();
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(REFUND.get_hash()).arg(idx.len());
        for &i in idx {
            let (c, k, _) = items[i];
            cmd.arg(c.state_key(k));
        }
        match now {
            Some(n) => cmd
                .arg(n.as_u64() / 1_000_000_000)
                .arg(n.as_u64() % 1_000_000_000),
            None => cmd.arg("").arg(""),
        };
        for (&i, w) in idx.iter().zip(written) {
            let (c, _, cost) = items[i];
            let (family, params) = c.refund_args();
            cmd.arg(family).arg(&params[..]).arg(cost).arg(w);
        }
        tasks.push(tokio::spawn(async move {
            let mut conn = first.connection().clone();
            let call = evalsha::<Vec<i64>>(&mut conn, first.script_loads(), &REFUND, &cmd);
            let _ = tokio::time::timeout(first.call_timeout(), call).await;
        }));
    }
    tasks
}

#[cfg(test)]
mod tests {
    use super::REFUND_SCRIPT;

    /// The text of `script`'s `families` table, from its `{` to its `}`.
    fn table(script: &str) -> &str {
        let start = script.find("local families = {").expect("a families table");
        let rest = &script[start..];
        &rest[..rest.find('}').expect("its end")]
    }

    #[test]
    fn the_refund_script_names_every_family_the_limits_script_decides() {
        let limits = table(crate::script::LIMITS_SCRIPT.as_str());
        let names: Vec<&str> = limits
            .trim_start_matches("local families = {")
            .split(',')
            .filter_map(|entry| entry.split('=').next())
            .map(str::trim)
            .collect();
        assert_eq!(names.len(), ratelab_core::AlgorithmName::ALL.len());
        let refunds = table(&REFUND_SCRIPT);
        for name in names {
            assert!(refunds.contains(&format!("{name} = ")), "{name}: {refunds}");
        }
    }
}
