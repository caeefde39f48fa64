//! The store-fault phase, for a target whose store the audit started: a few paced clients
//! on fresh keys while the store is healthy, frozen (SIGSTOP), continued, killed, and
//! started again empty. Each answer is judged by when it was sent and answered:
//!
//! - **failure mode**: an answer whose whole flight fell while the store was down is held to
//!   the mode the recipe declares — fail-open admits, fail-closed refuses (a denial or an
//!   error), a local fallback decides (admits or denies, never errs) within its own bound:
//!   each instance holding the target's policy alone, a key admits at most the instances
//!   times the policy's envelope over each spell the store is down; a target that
//!   holds requests while the store is down (answering one only once it is back, after
//!   half the spell or more) decides in no mode at all, and fails whichever it declares;
//! - **recovery**: from `grace` after the store is back, every request gets a decision.
//!
//! The policy checkers do not judge this phase: while the store is down, a fail-open target
//! admits beyond its policy by design. The clients pace themselves from the policy, at four
//! times what all the instances together may admit (between 5 and 50 ms apart), so that a
//! fallback beyond its bound, or a target that fails open, shows.

use super::instances::Store;
use super::recipe::FailureMode;
use crate::probe::Target;
use crate::probe::http::HttpTarget;
use crate::probe::interval_at;
use ratelab_check::probe::Claim;
use ratelab_check::probe::Outcome;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The checks the phase's failure lines belong to (`failure-mode: …`, `recovery: …`).
pub const CHECKS: [&str; 2] = ["failure-mode", "recovery"];

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
    /// Requests in flight while the store was down (sent then, or already in flight when it
    /// went down) and answered only after it was back, having waited through at least half
    /// that spell (a target that holds requests rather than deciding them).
    #[serde(default)]
    pub held: u64,
    /// The longest of those waits, in milliseconds.
    #[serde(default)]
    pub held_longest_ms: u64,
    /// What the phase could not judge (a fallback's bound no key's answers could exceed).
    #[serde(default)]
    pub inconclusive: Vec<String>,
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

/// What the phase holds a target to: the mode it declares, and for a local fallback the
/// bound of each instance's (the target's policy's envelope) and how many instances.
#[derive(Clone, Copy, Debug)]
pub struct Declared {
    /// The failure mode.
    pub mode: FailureMode,
    /// The target's policy.
    pub claim: Claim,
    /// Instances.
    pub instances: u32,
    /// How long after the store is back it may take to limit again (the recipe's
    /// `recovery`): the grace is at least this.
    pub recovery: Duration,
    /// How far the target's clock may lag its decisions: a spell's admissions are held to
    /// the policy over the spell widened by this.
    pub clock_resolution: Duration,
}

impl Declared {
    /// The time between two requests of one client: a quarter of the time all instances
    /// together take to admit one more, from 5 to 50 ms.
    pub fn every(&self) -> Duration {
        let percent = 400u32.saturating_mul(self.instances.max(1));
        interval_at(&self.claim, percent).clamp(Duration::from_millis(5), Duration::from_millis(50))
    }

    /// The most a key may admit over `span` from the instances' fallbacks.
    fn bound(&self, span: Duration) -> u64 {
        let span = u64::try_from(span.as_nanos()).unwrap_or(u64::MAX);
        let one = self.claim.envelope().over(span);
        one.saturating_mul(u64::from(self.instances.max(1)))
    }
}

/// One answer of the phase: its client (its key), when it was sent and answered, what.
type Seen = (u32, Duration, Duration, Outcome);

/// Runs the phase against `target`, its keys named from `prefix`, driving `store`.
pub async fn run(
    target: &HttpTarget,
    store: &mut Store,
    declared: Declared,
    prefix: &str,
    t: Timing,
) -> Result<FaultReport, String> {
    let start = Instant::now();
    let every = declared.every();
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
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
                    .push((c, sent, answered, outcome));
                n += 1;
                tokio::time::sleep_until((start + sent + every).into()).await;
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
    tokio::time::sleep(t.grace.max(declared.recovery)).await;
    steps.push((back, now(), Step::Grace));
    let judged = now();
    tokio::time::sleep(t.judged).await;
    steps.push((judged, now(), Step::Judged));
    stop.store(true, Ordering::Relaxed);
    for c in std::mem::take(&mut clients.0) {
        let _ = c.await;
    }
    let seen = std::mem::take(&mut *seen.lock().expect("fault phase"));
    Ok(judge(&seen, &steps, declared))
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

/// The requests a target held through a spell its store was down, `[from, until)` (ns):
/// those already in flight when it went down and answered only once it was back, and those
/// sent in its first half, when every one of those was answered only once it was back (each
/// then waited through half the spell or more). A target that gives up on its store after a
/// timeout shorter than the spell answers a request sent early in it before the store is
/// back, and holds nothing; one that waits for its store holds them all. (A request in
/// flight at the start and answered during the spell says nothing: its answer may have left
/// the store just before it stopped.)
pub fn held((from, until): (u64, u64), flights: impl Iterator<Item = (u64, u64, u64)>) -> Vec<u64> {
    let half = from + until.saturating_sub(from) / 2;
    let (mut waited, mut early) = (Vec::new(), Vec::new());
    for (id, sent, answered) in flights {
        if sent < from && answered > until {
            waited.push(id);
        } else if (from..half).contains(&sent) {
            early.push((id, answered));
        }
    }
    if early.iter().any(|&(_, answered)| answered <= until) {
        return Vec::new();
    }
    waited.extend(early.into_iter().map(|(id, _)| id));
    waited.sort_unstable();
    waited
}

/// Judges the answers against the steps they fell in.
fn judge(seen: &[Seen], steps: &Steps, declared: Declared) -> FaultReport {
    let mode = declared.mode;
    let mut r = FaultReport::default();
    // Held through a spell down (sent then, or already in flight when it began: a client
    // waiting on that one sends nothing more until it is answered, so counting only the
    // first kind made the verdict hang on where a client's send fell).
    let ns = |d: &Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    for (from, until, _) in steps.iter().filter(|(.., step)| *step == Step::Down) {
        let flights = seen
            .iter()
            .enumerate()
            .map(|(i, (_, sent, answered, _))| (i as u64, ns(sent), ns(answered)));
        for i in held((ns(from), ns(until)), flights) {
            let (_, sent, answered, _) = &seen[i as usize];
            r.held += 1;
            let waited = answered.saturating_sub(*sent).as_millis() as u64;
            r.held_longest_ms = r.held_longest_ms.max(waited);
        }
    }
    let mut wrong: Vec<String> = Vec::new();
    // Answers and admissions by (down step, client) for a fallback's bound.
    let mut fallback: BTreeMap<(usize, u32), (u64, u64)> = BTreeMap::new();
    // Per client after recovery: first send, last answer, admitted.
    let mut resumed: BTreeMap<u32, (Duration, Duration, u64)> = BTreeMap::new();
    for (client, sent, answered, o) in seen {
        let within = steps
            .iter()
            .position(|(from, until, _)| from <= sent && answered <= until);
        match within.map(|i| steps[i].2) {
            None => r.straddling += 1,
            Some(Step::Healthy) => r.healthy.add(o),
            Some(Step::Grace) => {}
            Some(Step::Judged) => {
                r.recovered.add(o);
                let spell = resumed.entry(*client).or_insert((*sent, *answered, 0));
                spell.0 = spell.0.min(*sent);
                spell.1 = spell.1.max(*answered);
                spell.2 += u64::from(*o == Outcome::Allowed);
            }
            Some(Step::Down) => {
                r.down.add(o);
                let key = fallback.entry((within.unwrap_or(0), *client)).or_default();
                key.0 += 1;
                key.1 += u64::from(*o == Outcome::Allowed);
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
    if mode == FailureMode::LocalFallback {
        let bound = |step: usize| {
            let (from, until, _) = steps[step];
            declared.bound(until.saturating_sub(from))
        };
        // A bound no key's answers could exceed is not judged.
        if !fallback
            .iter()
            .any(|(&(step, _), &(answers, _))| answers > bound(step))
        {
            let most = fallback
                .values()
                .map(|&(answers, _)| answers)
                .max()
                .unwrap_or(0);
            r.inconclusive.push(format!(
                "local-fallback bound not exercised: a key had at most {most} answers in a spell down, no more than its {} instances' own limits allow then",
                declared.instances
            ));
        }
        // The worst key of the worst spell down, against what the instances may admit then.
        let worst = fallback
            .iter()
            .map(|(&(step, client), &(_, n))| (n, bound(step), step, client))
            .filter(|&(n, bound, ..)| n > bound)
            .max_by_key(|&(n, bound, ..)| n - bound);
        if let Some((n, bound, step, client)) = worst {
            r.failures.push(format!(
                "failure-mode: declared local-fallback, but key {client} admitted {n} while the store was down for {:?}, beyond the {bound} its {} instances' own limits allow",
                steps[step].1.saturating_sub(steps[step].0),
                declared.instances
            ));
        }
    }
    if r.held > 0 {
        // Decided in no mode: the target waited for the store (in one spell down, or both).
        r.failures.push(format!(
            "failure-mode: declared {}, but {} requests in flight while the store was down got no answer until it was back, the longest after {} ms",
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
    limiting_resumed(&mut r, &resumed, declared);
    if r.recovered.requests == 0 {
        r.failures.push(
            "recovery: no request was answered after the store came back (the target never recovered, or answered too slowly to judge)"
                .into(),
        );
    }
    r
}

/// Limiting resumes once the store is back: from the declared recovery on, a key admits no
/// more over its clients' spell than the policy allows from any state (its envelope over
/// the spell's length, send to last answer). A target still failing open, or still on each
/// instance's own fallback, admits every request of clients paced at four times what all
/// its instances together may admit.
fn limiting_resumed(
    r: &mut FaultReport,
    resumed: &BTreeMap<u32, (Duration, Duration, u64)>,
    declared: Declared,
) {
    let allowed = |span: Duration| {
        let span = span.saturating_add(declared.clock_resolution);
        declared
            .claim
            .envelope()
            .over(u64::try_from(span.as_nanos()).unwrap_or(u64::MAX))
    };
    let worst = resumed
        .iter()
        .map(|(&client, &(from, until, n))| {
            (client, from, until, n, allowed(until.saturating_sub(from)))
        })
        .max_by_key(|&(.., n, bound)| n.saturating_sub(bound));
    let Some((client, from, until, n, bound)) = worst else {
        return;
    };
    if n > bound {
        r.failures.push(format!(
            "recovery: limiting did not resume: key {client} admitted {n} in the {:?} from {:?} to {:?} into the phase, once the store had been back for the declared {:?}, beyond the {bound} its policy allows over that spell from any state",
            until.saturating_sub(from),
            from,
            until,
            declared.recovery
        ));
    } else if resumed.values().all(|&(from, until, _)| {
        let sent = r.recovered.requests / resumed.len().max(1) as u64;
        sent <= allowed(until.saturating_sub(from))
    }) {
        // No key sent more than its policy allows: a target still failing open would
        // have passed too.
        r.inconclusive.push(format!(
            "recovery: limiting not exercised: {} requests after recovery, no more a key than its policy allows over the spell",
            r.recovered.requests
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    /// Two instances of a policy of 2 at once and 10 a second.
    fn declared(mode: FailureMode) -> Declared {
        Declared {
            mode,
            claim: Claim::TokenBucket {
                capacity: 2,
                amount: 10,
                period: ratelab_core::Nanos(1_000_000_000),
            },
            recovery: Duration::ZERO,
            clock_resolution: Duration::ZERO,
            instances: 2,
        }
    }

    #[test]
    fn a_fallback_is_held_to_its_instances_own_limits() {
        let steps: Steps = vec![(s(0), s(100), Step::Down), (s(100), s(200), Step::Judged)];
        // 100 ms down: each instance 2 + 1, so 6 for the key; key 1 admits 7.
        let answers = |client: u32, n: u64| {
            (0..n).map(move |i| (client, s(i * 10), s(i * 10 + 5), Outcome::Allowed))
        };
        let mut seen: Vec<Seen> = answers(0, 6).chain(answers(1, 7)).collect();
        seen.push((0, s(150), s(160), Outcome::Denied));
        let r = judge(&seen, &steps, declared(FailureMode::LocalFallback));
        assert_eq!(r.failures.len(), 1, "{:?}", r.failures);
        assert!(
            r.failures[0].contains("key 1 admitted 7") && r.failures[0].contains("beyond the 6"),
            "{:?}",
            r.failures
        );
        seen.retain(|a| a.0 == 0);
        let r = judge(&seen, &steps, declared(FailureMode::LocalFallback));
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        // Six answers, all admitted: within the bound, but no more answers than it, so the
        // bound was not put to the test.
        let fallback = |r: &FaultReport| {
            r.inconclusive
                .iter()
                .filter(|i| i.starts_with("local-fallback"))
                .count()
        };
        assert_eq!(fallback(&r), 1, "{r:?}");
        seen.extend((6..9).map(|i| (0, s(i * 10), s(i * 10 + 5), Outcome::Denied)));
        let r = judge(&seen, &steps, declared(FailureMode::LocalFallback));
        assert!(r.failures.is_empty() && fallback(&r) == 0, "{r:?}");
        // Paced at a quarter of the instances' 20 a second together.
        assert_eq!(
            declared(FailureMode::LocalFallback).every(),
            Duration::from_micros(12_500)
        );
    }

    /// Once the store is back past the declared recovery, a key that admits every request
    /// of clients paced beyond its policy fails; one limited again passes.
    #[test]
    fn limiting_must_resume_after_recovery() {
        let steps: Steps = vec![
            (s(0), s(100), Step::Down),
            (s(100), s(200), Step::Grace),
            (s(200), s(1_200), Step::Judged),
        ];
        // A request every 10 ms for a second: 100, where 2 + 10 × 0.992 may be admitted.
        let judged = |admitted: u64| -> Vec<Seen> {
            (0..100)
                .map(|i| {
                    let at = s(200 + i * 10);
                    let o = Outcome::of(i < admitted);
                    (0, at, at + s(2), o)
                })
                .collect()
        };
        let open = judge(&judged(100), &steps, declared(FailureMode::FailClosed));
        assert!(
            open.failures
                .iter()
                .any(|f| f.starts_with("recovery: limiting did not resume: key 0 admitted 100")),
            "{open:?}"
        );
        let limited = judge(&judged(11), &steps, declared(FailureMode::FailClosed));
        assert!(limited.failures.is_empty(), "{limited:?}");
        assert!(limited.inconclusive.is_empty(), "{limited:?}");
        // Two requests could not have shown a target still failing open.
        let few = judge(&judged(100)[..2], &steps, declared(FailureMode::FailClosed));
        assert!(few.failures.is_empty(), "{few:?}");
        assert!(
            few.inconclusive
                .iter()
                .any(|i| i.starts_with("recovery: limiting not exercised")),
            "{few:?}"
        );
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
            (0, s(10), s(20), Outcome::Allowed),
            (0, s(110), s(120), Outcome::Allowed),
            (0, s(130), s(140), Outcome::Failed("status 500".into())),
            (0, s(90), s(110), Outcome::Denied),
            (0, s(310), s(320), Outcome::Denied),
        ];
        let open = judge(&seen, &steps, declared(FailureMode::FailOpen));
        assert_eq!(open.down.requests, 2);
        assert_eq!(open.straddling, 1);
        assert_eq!(open.failures.len(), 1, "{:?}", open.failures);
        assert!(open.failures[0].starts_with("failure-mode: declared fail-open, 1 of 2"));
        let closed = judge(&seen, &steps, declared(FailureMode::FailClosed));
        assert!(closed.failures[0].contains("declared fail-closed, 1 of 2"));
        let fallback = judge(&seen, &steps, declared(FailureMode::LocalFallback));
        assert!(fallback.failures[0].contains("local-fallback, 1 of 2"));
        // Requests sent while the store was down, answered once it was back.
        let held = vec![
            (0, s(110), s(250), Outcome::Denied),
            (0, s(150), s(210), Outcome::Allowed),
            (0, s(310), s(320), Outcome::Denied),
        ];
        // The one sent in the spell's first half was held to its end (the other, sent at its
        // middle, is not counted: a target with a timeout under half the spell would have
        // answered it too, late).
        let r = judge(&held, &steps, declared(FailureMode::FailClosed));
        assert_eq!((r.held, r.held_longest_ms), (1, 140));
        assert_eq!(r.failures.len(), 1, "{:?}", r.failures);
        assert!(
            r.failures[0].contains("1 requests in flight while the store was down got no answer"),
            "{:?}",
            r.failures
        );
        // A client that gives up after 60 ms answers requests sent late in the spell only
        // after it, having waited: it holds nothing, as the first of them shows.
        let timeout = vec![
            (0, s(105), s(165), Outcome::Failed("status 500".into())),
            (0, s(165), s(225), Outcome::Failed("status 500".into())),
        ];
        let r = judge(&timeout, &steps, declared(FailureMode::FailClosed));
        assert_eq!(r.held, 0, "{r:?}");
        // A request in flight at the start whose answer is recorded a little after the store
        // stopped (it left the store just before) does not clear a target that then holds
        // what it is sent.
        let raced = vec![
            (0, s(95), s(102), Outcome::Denied),
            (1, s(99), s(230), Outcome::Denied),
            (0, s(120), s(210), Outcome::Denied),
        ];
        let r = judge(&raced, &steps, declared(FailureMode::FailClosed));
        assert_eq!(r.held, 2, "{r:?}");
        // Already in flight when the store went down, and held through it: held as well,
        // so the verdict does not hang on whether a client's send fell before the freeze.
        let r = judge(
            &[(0, s(90), s(230), Outcome::Denied)],
            &steps,
            declared(FailureMode::FailClosed),
        );
        assert_eq!((r.held, r.held_longest_ms), (1, 140));
        // Refused at once early in the spell: the target decides while its store is down,
        // and a request answered after it is not one it held.
        let mut both = held.clone();
        both.extend([
            (0, s(120), s(130), Outcome::Denied),
            (0, s(195), s(205), Outcome::Denied),
        ]);
        let r = judge(&both, &steps, declared(FailureMode::FailClosed));
        assert_eq!((r.down.requests, r.held), (1, 0), "{r:?}");
        assert_eq!(r.failures.len(), 0, "{:?}", r.failures);
        let stuck = vec![(0, s(310), s(320), Outcome::Failed("status 500".into()))];
        let r = judge(&stuck, &steps, declared(FailureMode::FailClosed));
        assert_eq!(
            r.failures,
            vec![
                "recovery: 1 of 1 requests got no decision after the store had been back for the grace"
            ]
        );
    }
}
