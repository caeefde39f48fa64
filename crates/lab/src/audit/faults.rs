//! The store-fault phase, for a target whose store the audit started: a few paced clients
//! on fresh keys while the store is healthy, frozen (SIGSTOP), continued, killed, and
//! started again empty. Each answer is judged by when it was sent and answered:
//!
//! - **failure mode**: an answer whose whole flight fell while the store was down is held to
//!   the mode the recipe declares — fail-open admits, fail-closed refuses (a denial or an
//!   error), a local fallback decides (admits or denies, never errs); a target that
//!   answers nothing while the store is down, holding every request until it is back,
//!   decides in no mode at all, and fails whichever it declares;
//! - **recovery**: from `grace` after the store is back, every request gets a decision.
//!
//! The policy checkers do not judge this phase: while the store is down, a fail-open target
//! admits beyond its policy by design.

use super::instances::Store;
use super::recipe::FailureMode;
use crate::probe::Target;
use crate::probe::http::HttpTarget;
use ratelab_check::probe::Outcome;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long each step lasts.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// Healthy, before the first fault; also continued after the freeze, and down after
    /// the kill.
    pub step: Duration,
    /// Frozen.
    pub frozen: Duration,
    /// After the restart, before recovery is judged.
    pub grace: Duration,
    /// Judged for recovery, after the grace.
    pub judged: Duration,
    /// Time between two requests of one client.
    pub every: Duration,
    /// Clients.
    pub clients: u32,
}

/// One answer of the phase, by step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Requests whose whole flight fell in the step.
    pub requests: u64,
    /// Admitted.
    pub admitted: u64,
    /// Denied.
    pub denied: u64,
    /// Without a decision (an error status, a timeout, a refused connection).
    pub failed: u64,
}

impl Counts {
    fn add(&mut self, o: &Outcome) {
        self.requests += 1;
        match o {
            Outcome::Allowed => self.admitted += 1,
            Outcome::Denied => self.denied += 1,
            Outcome::Failed(_) => self.failed += 1,
        }
    }
}

/// What the phase saw and found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultReport {
    /// Answers while the store was healthy.
    pub healthy: Counts,
    /// Answers whose flight fell while the store was down (frozen or killed).
    pub down: Counts,
    /// Answers judged for recovery.
    pub recovered: Counts,
    /// Answers in flight across a change of the store, not judged.
    pub straddling: u64,
    /// Requests sent while the store was down and answered only after it was back (a
    /// target that holds requests rather than deciding them), and the longest wait.
    #[serde(default)]
    pub held: u64,
    /// The longest of those waits, in milliseconds.
    #[serde(default)]
    pub held_longest_ms: u64,
    /// Failure lines, as the probe's checks write theirs (`failure-mode: …`,
    /// `recovery: …`).
    pub failures: Vec<String>,
}

/// The store's state over the phase: (from, until, down) in time since the phase began.
type Steps = Vec<(Duration, Duration, Step)>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Healthy,
    Down,
    Grace,
    Judged,
}

/// Runs the phase against `target`, its keys named from `prefix`, driving `store`.
pub async fn run(
    target: &HttpTarget,
    store: &mut Store,
    mode: FailureMode,
    prefix: &str,
    t: Timing,
) -> Result<FaultReport, String> {
    let start = Instant::now();
    let seen: Arc<Mutex<Vec<(Duration, Duration, Outcome)>>> = Arc::default();
    // The clients send until the judged step is over, however long the store's steps took.
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Clients(Vec::new());
    for c in 0..t.clients {
        let (target, seen, key) = (target.clone(), seen.clone(), format!("{prefix}-fault{c}"));
        let stop = stop.clone();
        clients.0.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let sent = start.elapsed();
                let id = u64::from(c) + n * 1_000;
                let (outcome, _) = target.send(id, &key, 1).await;
                let answered = start.elapsed();
                seen.lock()
                    .expect("fault phase")
                    .push((sent, answered, outcome));
                n += 1;
                tokio::time::sleep_until((start + sent + t.every).into()).await;
            }
        }));
    }
    // The store's steps, as they happen: a step down begins once the signal has been sent
    // (so a request after it was never decided by a running store) and ends before the
    // store runs again.
    let now = || start.elapsed();
    let mut steps: Steps = Vec::new();
    tokio::time::sleep(t.step).await;
    store.signal("STOP")?;
    let frozen = now();
    steps.push((Duration::ZERO, frozen, Step::Healthy));
    tokio::time::sleep(t.frozen).await;
    let thawed = now();
    store.signal("CONT")?;
    steps.push((frozen, thawed, Step::Down));
    tokio::time::sleep(t.step).await;
    let killing = now();
    store.kill();
    let killed = now();
    steps.push((thawed, killing, Step::Healthy));
    tokio::time::sleep(t.step).await;
    let restarting = now();
    tokio::task::block_in_place(|| store.restart())?;
    let back = now();
    steps.push((killed, restarting, Step::Down));
    tokio::time::sleep(t.grace).await;
    steps.push((back, now(), Step::Grace));
    let judged = now();
    tokio::time::sleep(t.judged).await;
    steps.push((judged, now(), Step::Judged));
    stop.store(true, Ordering::Relaxed);
    for c in std::mem::take(&mut clients.0) {
        let _ = c.await;
    }
    let seen = std::mem::take(&mut *seen.lock().expect("fault phase"));
    Ok(judge(&seen, &steps, mode))
}

/// The phase's clients, stopped if the phase ends early (a signal the store refused, a
/// restart that failed).
struct Clients(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Clients {
    fn drop(&mut self) {
        for c in &self.0 {
            c.abort();
        }
    }
}

/// Judges the answers against the steps they fell in.
fn judge(seen: &[(Duration, Duration, Outcome)], steps: &Steps, mode: FailureMode) -> FaultReport {
    let mut r = FaultReport::default();
    let mut wrong: Vec<String> = Vec::new();
    for (sent, answered, o) in seen {
        let down_at_send = steps
            .iter()
            .find(|(from, until, step)| *step == Step::Down && from <= sent && sent < until);
        if let Some((_, until, _)) = down_at_send
            && answered > until
        {
            r.held += 1;
            let waited = answered.saturating_sub(*sent).as_millis() as u64;
            r.held_longest_ms = r.held_longest_ms.max(waited);
        }
        let within = steps
            .iter()
            .find(|(from, until, _)| from <= sent && answered <= until);
        match within.map(|s| s.2) {
            None => r.straddling += 1,
            Some(Step::Healthy) => r.healthy.add(o),
            Some(Step::Grace) => {}
            Some(Step::Judged) => r.recovered.add(o),
            Some(Step::Down) => {
                r.down.add(o);
                let fits = match mode {
                    FailureMode::FailOpen => *o == Outcome::Allowed,
                    FailureMode::FailClosed => *o != Outcome::Allowed,
                    FailureMode::LocalFallback => !matches!(o, Outcome::Failed(_)),
                };
                if !fits && wrong.len() < 3 {
                    wrong.push(format!("{o:?} at {sent:?}"));
                }
            }
        }
    }
    let bad = match mode {
        FailureMode::FailOpen => r.down.requests - r.down.admitted,
        FailureMode::FailClosed => r.down.admitted,
        FailureMode::LocalFallback => r.down.failed,
    };
    if bad > 0 {
        r.failures.push(format!(
            "failure-mode: declared {}, {bad} of {} answers while the store was down were not (first: {})",
            mode.name(),
            r.down.requests,
            wrong.join(", ")
        ));
    }
    if r.down.requests == 0 && r.held > 0 {
        // Nothing to hold to the declared mode: the target decided nothing while the store
        // was down, it waited for the store.
        r.failures.push(format!(
            "failure-mode: declared {}, but no request sent while the store was down was answered before it was back: {} were held, the longest {} ms",
            mode.name(),
            r.held,
            r.held_longest_ms
        ));
    }
    if r.recovered.failed > 0 {
        r.failures.push(format!(
            "recovery: {} of {} requests got no decision after the store had been back for the grace",
            r.recovered.failed, r.recovered.requests
        ));
    }
    if r.recovered.requests == 0 {
        r.failures.push(
            "recovery: no request was answered after the store came back (the target never recovered, or answered too slowly to judge)"
                .into(),
        );
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn answers_are_held_to_the_declared_mode_and_to_recovery() {
        let steps: Steps = vec![
            (s(0), s(100), Step::Healthy),
            (s(100), s(200), Step::Down),
            (s(200), s(300), Step::Grace),
            (s(300), s(400), Step::Judged),
        ];
        let seen = vec![
            (s(10), s(20), Outcome::Allowed),
            (s(110), s(120), Outcome::Allowed),
            (s(130), s(140), Outcome::Failed("status 500".into())),
            (s(90), s(110), Outcome::Denied),
            (s(310), s(320), Outcome::Denied),
        ];
        let open = judge(&seen, &steps, FailureMode::FailOpen);
        assert_eq!(open.down.requests, 2);
        assert_eq!(open.straddling, 1);
        assert_eq!(open.failures.len(), 1, "{:?}", open.failures);
        assert!(open.failures[0].starts_with("failure-mode: declared fail-open, 1 of 2"));
        let closed = judge(&seen, &steps, FailureMode::FailClosed);
        assert!(closed.failures[0].contains("declared fail-closed, 1 of 2"));
        let fallback = judge(&seen, &steps, FailureMode::LocalFallback);
        assert!(fallback.failures[0].contains("local-fallback, 1 of 2"));
        // Requests sent while the store was down, answered once it was back.
        let held = vec![
            (s(110), s(250), Outcome::Denied),
            (s(150), s(210), Outcome::Allowed),
            (s(310), s(320), Outcome::Denied),
        ];
        let r = judge(&held, &steps, FailureMode::FailClosed);
        assert_eq!((r.held, r.held_longest_ms), (2, 140));
        assert_eq!(r.failures.len(), 1, "{:?}", r.failures);
        assert!(r.failures[0].contains("2 were held, the longest 140 ms"));
        let stuck = vec![(s(310), s(320), Outcome::Failed("status 500".into()))];
        let r = judge(&stuck, &steps, FailureMode::FailClosed);
        assert_eq!(
            r.failures,
            vec![
                "recovery: 1 of 1 requests got no decision after the store had been back for the grace"
            ]
        );
    }
}
