//! The singleton job: a periodic task (the idle-bucket cleanup) that must run on exactly one
//! gateway at a time.
//!
//! Every gateway runs a [`Singleton`]; each tick it keeps or takes a lease in the store
//! ([`LeaseClient`]), and only the holder runs the job. A job is two steps ([`FencedJob`]):
//! `plan` reads what to do (the keys to delete), `commit` writes it to the protected resource
//! with the lease's **fencing token**, and the resource refuses tokens lower than the highest
//! it has accepted.
//!
//! Why the token and not just the lease: the holder checks its lease at the start of a tick,
//! then plans, then commits. A stall anywhere in between (a GC pause, a descheduled VM) can
//! outlast the lease; another gateway takes over with a larger token and runs the job; then the
//! stalled one wakes and commits a plan made under a lease it no longer holds. No check on the
//! holder's side closes that gap — there is always a moment between the last check and the
//! write. Only the resource, which sees the writes in order, can refuse it.
//!
//! The local lease deadline is counted from *before* the acquire or renew was sent, so when
//! clocks run at one rate the holder gives up no later than the store expires the lease.

use crate::env::Env;
use core::future::Future;
use ratelab_core::Nanos;
use ratelab_store::{FenceVerdict, LeaseClient, StoreError};
use std::time::Duration;

/// A job whose writes are fenced.
pub trait FencedJob: Send + Sync {
    /// What `plan` found to do.
    type Plan: Send;

    /// Reads what to do. Not fenced: it changes nothing.
    fn plan(&self) -> impl Future<Output = Result<Self::Plan, StoreError>> + Send;

    /// Applies `plan` to the protected resource, which checks `token`.
    fn commit(
        &self,
        token: u64,
        plan: Self::Plan,
    ) -> impl Future<Output = Result<FenceVerdict, StoreError>> + Send;
}

/// Settings of a [`Singleton`].
#[derive(Clone, Debug)]
pub struct SingletonConfig {
    /// The lease's name in the store.
    pub name: String,
    /// This gateway's name: the lease owner.
    pub owner: String,
    /// How long a grant or renewal lasts.
    pub lease_ttl: Duration,
    /// Time between ticks; shorter than `lease_ttl`, so the holder renews before it lapses.
    pub period: Duration,
}

/// What one tick did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tick {
    /// Another gateway holds the lease.
    Follower,
    /// This gateway held the lease with `token` and ran the job; the resource's verdict. A
    /// stale verdict means the lease had been superseded: leadership is dropped.
    Ran {
        /// The fencing token used.
        token: u64,
        /// Accepted, or stale.
        verdict: FenceVerdict,
    },
    /// The store refused to renew: the lease had lapsed or passed to someone else.
    Lost,
    /// A store call failed; the next tick tries again.
    Failed(StoreError),
}

/// One gateway's side of the singleton job.
#[derive(Debug)]
pub struct Singleton<L, J, E> {
    config: SingletonConfig,
    lease: L,
    job: J,
    env: E,
    /// The token held and the local time it must be given up by.
    held: Option<(u64, Nanos)>,
}

impl<L: LeaseClient, J: FencedJob, E: Env> Singleton<L, J, E> {
    /// A follower that will compete for `config.name`.
    pub fn new(config: SingletonConfig, lease: L, job: J, env: E) -> Self {
        Singleton {
            config,
            lease,
            job,
            env,
            held: None,
        }
    }

    /// The token held, if this gateway believes it leads.
    pub fn token(&self) -> Option<u64> {
        self.held.map(|(t, _)| t)
    }

    /// Keeps or takes the lease, then, if leading, runs the job once.
    pub async fn tick(&mut self) -> Tick {
        let c = &self.config;
        let ttl = Nanos::from(c.lease_ttl);
        let start = self.env.now();
        let token = match self.held {
            Some((token, deadline)) if start < deadline => {
                match self.lease.renew(&c.name, &c.owner, token, ttl).await {
                    Ok(true) => {
                        self.held = Some((token, start.saturating_add(ttl)));
                        token
                    }
                    Ok(false) => {
                        self.held = None;
                        return Tick::Lost;
                    }
                    // Keep believing until the local deadline: the renewal may yet succeed.
                    Err(e) => return Tick::Failed(e),
                }
            }
            _ => {
                self.held = None;
                match self.lease.acquire(&c.name, &c.owner, ttl).await {
                    Ok(Some(token)) => {
                        self.held = Some((token, start.saturating_add(ttl)));
                        token
                    }
                    Ok(None) => return Tick::Follower,
                    Err(e) => return Tick::Failed(e),
                }
            }
        };
        let plan = match self.job.plan().await {
            Ok(p) => p,
            Err(e) => return Tick::Failed(e),
        };
        match self.job.commit(token, plan).await {
            Ok(verdict) => {
                if matches!(verdict, FenceVerdict::Stale { .. }) {
                    self.held = None;
                }
                Tick::Ran { token, verdict }
            }
            Err(e) => Tick::Failed(e),
        }
    }

    /// Ticks at a fixed rate, one every `period` on the local clock (skipping ticks missed
    /// while stalled), while `go_on` says so; it sees each tick's outcome.
    pub async fn run(&mut self, mut go_on: impl FnMut(Tick) -> bool) {
        let period = Nanos::from(self.config.period).as_u64().max(1);
        let mut next = self.env.now().as_u64();
        loop {
            let tick = self.tick().await;
            if !go_on(tick) {
                return;
            }
            let now = self.env.now().as_u64();
            next += period * ((now.saturating_sub(next)) / period + 1);
            // A clock that stepped back must not stretch the wait past one period.
            next = next.min(now + period);
            let wait = Duration::from_nanos(next - now);
            self.env.timeout(wait, core::future::pending::<()>()).await;
        }
    }

    /// Gives the lease up, if held; the store refuses it unless this gateway still holds it.
    pub async fn release(&mut self) -> Result<bool, StoreError> {
        let Some((token, _)) = self.held.take() else {
            return Ok(false);
        };
        let c = &self.config;
        self.lease.release(&c.name, &c.owner, token).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratelab_store::{Fence, LocalLeases};
    use std::pin::pin;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll, Waker};

    /// Every future here completes at once (the leases are in-process).
    fn ready<F: Future>(f: F) -> F::Output {
        match pin!(f).poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(v) => v,
            Poll::Pending => panic!("an in-process call was pending"),
        }
    }

    #[derive(Clone)]
    struct TestEnv(Arc<AtomicU64>);

    impl Env for TestEnv {
        fn now(&self) -> Nanos {
            Nanos(self.0.load(Ordering::SeqCst))
        }
        async fn timeout<F: Future + Send>(&self, _: Duration, fut: F) -> Option<F::Output>
        where
            F::Output: Send,
        {
            Some(fut.await)
        }
    }

    type Stall = Box<dyn Fn() + Send + Sync>;

    /// Writes to a shared fenced resource; `stall` runs between plan and commit.
    struct Job {
        fence: Arc<Mutex<Fence>>,
        commits: Arc<Mutex<Vec<(u64, FenceVerdict)>>>,
        stall: Option<Stall>,
    }

    impl FencedJob for Job {
        type Plan = ();
        async fn plan(&self) -> Result<(), StoreError> {
            if let Some(stall) = &self.stall {
                stall();
            }
            Ok(())
        }
        async fn commit(&self, token: u64, (): ()) -> Result<FenceVerdict, StoreError> {
            let verdict = self.fence.lock().unwrap().admit(token);
            self.commits.lock().unwrap().push((token, verdict));
            Ok(verdict)
        }
    }

    const TTL: Duration = Duration::from_millis(100);

    fn config(owner: &str) -> SingletonConfig {
        SingletonConfig {
            name: "cleanup".into(),
            owner: owner.into(),
            lease_ttl: TTL,
            period: Duration::from_millis(30),
        }
    }

    fn stalled_leader(fence: Fence) -> Vec<(u64, FenceVerdict)> {
        let clock = Arc::new(AtomicU64::new(0));
        let c = clock.clone();
        let leases = LocalLeases::new(move || Nanos(c.load(Ordering::SeqCst)));
        let fence = Arc::new(Mutex::new(fence));
        let commits = Arc::new(Mutex::new(Vec::new()));
        let env = TestEnv(clock.clone());
        let job = |stall| Job {
            fence: fence.clone(),
            commits: commits.clone(),
            stall,
        };
        let b = Arc::new(Mutex::new(Singleton::new(
            config("b"),
            leases.clone(),
            job(None),
            env.clone(),
        )));
        let stalled = Arc::new(AtomicU64::new(0));
        let (b2, clock2, once) = (b.clone(), clock.clone(), stalled.clone());
        // A's second tick stalls after its lease check for 2 TTLs, during which B takes over
        // and runs the job.
        let stall: Stall = Box::new(move || {
            if once.fetch_add(1, Ordering::SeqCst) == 1 {
                clock2.fetch_add(2 * TTL.as_nanos() as u64, Ordering::SeqCst);
                let tick = ready(b2.lock().unwrap().tick());
                assert!(matches!(tick, Tick::Ran { token: 2, .. }), "{tick:?}");
            }
        });
        let mut a = Singleton::new(config("a"), leases, job(Some(stall)), env);
        assert!(matches!(ready(a.tick()), Tick::Ran { token: 1, .. }));
        assert_eq!(ready(b.lock().unwrap().tick()), Tick::Follower);
        clock.fetch_add(30_000_000, Ordering::SeqCst);
        let Tick::Ran { token: 1, verdict } = ready(a.tick()) else {
            panic!("A ran its second tick with its first token");
        };
        assert_eq!(commits.lock().unwrap().last(), Some(&(1, verdict)));
        // Woken, A is a follower: B holds the lease.
        assert_eq!(ready(a.tick()), Tick::Follower);
        assert_eq!(a.token(), None);
        let log = commits.lock().unwrap();
        log.clone()
    }

    #[test]
    fn a_stalled_leaders_commit_is_rejected_by_the_fence() {
        let commits = stalled_leader(Fence::new());
        assert_eq!(
            commits,
            [
                (1, FenceVerdict::Accepted),
                (2, FenceVerdict::Accepted),
                (1, FenceVerdict::Stale { highest: 2 }),
            ]
        );
    }

    #[test]
    fn without_the_check_the_stalled_leaders_commit_lands_after_its_successors() {
        let commits = stalled_leader(Fence::unchecked());
        assert_eq!(
            commits,
            [
                (1, FenceVerdict::Accepted),
                (2, FenceVerdict::Accepted),
                (1, FenceVerdict::Accepted),
            ]
        );
    }

    #[test]
    fn a_leader_renews_and_releases_and_only_then_is_replaced() {
        let clock = Arc::new(AtomicU64::new(0));
        let c = clock.clone();
        let leases = LocalLeases::new(move || Nanos(c.load(Ordering::SeqCst)));
        let job = || Job {
            fence: Arc::new(Mutex::new(Fence::new())),
            commits: Default::default(),
            stall: None,
        };
        let env = TestEnv(clock.clone());
        let mut a = Singleton::new(config("a"), leases.clone(), job(), env.clone());
        let mut b = Singleton::new(config("b"), leases, job(), env);
        assert!(matches!(ready(a.tick()), Tick::Ran { token: 1, .. }));
        for _ in 0..10 {
            // Renewed every 30 ms, A keeps a 100 ms lease for 300 ms.
            clock.fetch_add(30_000_000, Ordering::SeqCst);
            assert!(matches!(ready(a.tick()), Tick::Ran { token: 1, .. }));
            assert_eq!(ready(b.tick()), Tick::Follower);
        }
        assert_eq!(ready(a.release()), Ok(true));
        assert!(matches!(ready(b.tick()), Tick::Ran { token: 2, .. }));
        assert_eq!(ready(a.release()), Ok(false), "nothing held");
    }
}
