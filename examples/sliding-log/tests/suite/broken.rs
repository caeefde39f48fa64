//! A deliberately broken sliding log, to show the cluster's checkers fail it.
use ratelab_core::{Algorithm, CostError, Decision, Nanos, Quota};
use ratelab_example_sliding_log::{Log, SlidingLog};
use ratelab_sim::{Client, Scenario};
use ratelab_sim::{Limiter, RunOptions, run_with};

/// Forgets each admission after half the window it advertises.
#[derive(Clone, Copy, Debug)]
struct Forgetful(SlidingLog);

impl Algorithm for Forgetful {
    type State = Log;

    fn transition(
        &self,
        log: Option<Log>,
        now: Nanos,
        cost: u64,
    ) -> Result<(Log, Decision), CostError> {
        SlidingLog {
            window: Nanos(self.0.window.0 / 2),
        }
        .transition(log, now, cost)
    }

    fn expires_at(&self, log: &Log) -> Nanos {
        self.0.expires_at(log)
    }

    fn quota(&self) -> Quota {
        self.0.quota()
    }
}

#[test]
fn cluster_catches_a_limiter_that_forgets_early() {
    let limiter = Limiter::new(Forgetful(SlidingLog {
        window: Nanos(100_000_000),
    }));
    let sc = Scenario::builder("forgetful log")
        .duration_ms(1_000)
        .gateways(3)
        .policy_of(&limiter);
    let sc = sc
        .client(Client::key("user:ana").count(3).poisson(60))
        .build()
        .expect("valid");
    for seed in 1..=3 {
        let (r, _) = run_with(&sc, seed, RunOptions::default(), &limiter).expect("runs");
        let found = r.checkers.expect("judged");
        assert!(
            !r.passed && found.iter().any(|f| f.signature() == "safety/window"),
            "{found:?}"
        );
    }
}
