//! Running one schedule against a started target: each request sent at its time to its
//! instance, the store's faults applied at theirs, every answer recorded.

use super::schedule::{FaultKind, Schedule};
use crate::audit::instances::Store;
use crate::probe::http::HttpTarget;
use ratelab_check::probe::Observation;
use ratelab_core::Nanos;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// When a fault was applied, on the run's clock (from its start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Applied {
    /// What it was.
    pub kind: FaultKind,
    /// The store stopped serving (the signal sent, the pause begun).
    pub from: Nanos,
    /// It was certainly still down until here (before it was continued or started again).
    pub down_until: Nanos,
    /// It certainly served again from here (continued, restarted, the pause over).
    pub until: Nanos,
}

/// What one run of a schedule recorded.
#[derive(Clone, Debug)]
pub struct Ran {
    /// Every request, by its index in the schedule (its id).
    pub observations: Vec<Observation>,
    /// The faults, as applied.
    pub faults: Vec<Applied>,
    /// The wall clock at the run's start (its timeline's zero).
    pub wall: SystemTime,
}

/// The key request key `key` is sent on, under `prefix`.
pub fn key_name(prefix: &str, key: u32) -> String {
    format!("{prefix}-k{key}")
}

/// Sleeps until the wall clock is on a multiple of `align_us`, if that is under 10 s away.
async fn align(align_us: u64) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros() as u64;
    let align_us = align_us.max(1);
    let wait = align_us - now % align_us;
    if wait < 10_000_000 {
        tokio::time::sleep(Duration::from_micros(wait)).await;
    }
}

/// Runs `schedule` against `target` with keys under `prefix`, applying its faults to
/// `store` (a schedule with faults needs one).
pub async fn run(
    schedule: &Schedule,
    target: &HttpTarget,
    mut store: Option<&mut Store>,
    prefix: &str,
) -> Result<Ran, String> {
    if !schedule.faults.is_empty() && store.is_none() {
        return Err("the schedule has store faults, and the target has no store".into());
    }
    align(schedule.align_us).await;
    let wall = SystemTime::now();
    let start = Instant::now();
    let at = |us: u64| tokio::time::Instant::from_std(start + Duration::from_micros(us));
    let since = move || Nanos(u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX));
    let seen: Arc<Mutex<Vec<Observation>>> = Arc::default();
    let mut tasks = Requests(Vec::with_capacity(schedule.requests.len()));
    for (id, r) in schedule.requests.iter().enumerate() {
        let (target, seen, key) = (target.clone(), seen.clone(), key_name(prefix, r.key));
        let (when, r) = (at(r.at_us), *r);
        tasks.0.push(tokio::spawn(async move {
            tokio::time::sleep_until(when).await;
            let sent = since();
            let (outcome, fields) = target.send_to(r.instance, &key).await;
            let answered = since();
            seen.lock().expect("explore recorder").push(Observation {
                id: id as u64,
                key,
                client: r.key,
                instance: r.instance,
                cost: 1,
                sent,
                answered,
                outcome,
                fields,
            });
        }));
    }
    let mut faults = Vec::new();
    for f in &schedule.faults {
        let store = store.as_deref_mut().expect("checked above");
        tokio::time::sleep_until(at(f.at_us)).await;
        let lasts = Duration::from_micros(f.for_us);
        let applied = match f.kind {
            FaultKind::Freeze => {
                store.signal("STOP")?;
                let from = since();
                tokio::time::sleep(lasts).await;
                let down_until = since();
                store.signal("CONT")?;
                (from, down_until, since())
            }
            FaultKind::Restart => {
                store.kill();
                let from = since();
                tokio::time::sleep(lasts).await;
                let down_until = since();
                tokio::task::block_in_place(|| store.restart())?;
                (from, down_until, since())
            }
            FaultKind::Slow => {
                let ms = (f.for_us / 1_000).max(1).to_string();
                let reply = tokio::task::block_in_place(|| {
                    ratelab_procs::redis::cli(store.port(), &["CLIENT", "PAUSE", &ms, "ALL"])
                });
                let from = since();
                if reply.trim() != "OK" {
                    return Err(format!("CLIENT PAUSE {ms}: {reply:?}"));
                }
                tokio::time::sleep(lasts).await;
                let over = since();
                (from, over, over)
            }
        };
        faults.push(Applied {
            kind: f.kind,
            from: applied.0,
            down_until: applied.1,
            until: applied.2,
        });
    }
    for t in std::mem::take(&mut tasks.0) {
        // A task that panicked loses only its own request.
        let _ = t.await;
    }
    let mut observations = std::mem::take(&mut *seen.lock().expect("explore recorder"));
    observations.sort_by_key(|o| o.id);
    Ok(Ran {
        observations,
        faults,
        wall,
    })
}

/// A run's request tasks, stopped if the run ends early (a fault the store refused).
struct Requests(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Requests {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}
