//! What one seed sends: a schedule drawn from the seed alone, written out as JSON so a
//! failure replays, shrinks and becomes a reproducer.
//!
//! Each key lives through a few spells, drawn in turn: clients paced at a share of the
//! claimed rate (a period that divides the policy's window, or one that does not), a burst
//! placed on or just around a window boundary, or an idle gap of 0 to 3 times the claim's
//! time to forget a key (half the time between one and two windows, where a key that
//! expires early shows). Every request goes to an instance drawn for it. Where the audit
//! started the target's store, faults are drawn at moments and lengths of their own
//! (frozen, killed and restarted empty, or answering slowly), and a key is driven beyond its
//! policy from before each fault until well past the declared recovery, so a target that
//! does not limit again shows.

use ratelab_store::rng::StreamRng;
use serde::{Deserialize, Serialize};

/// The stream a schedule is drawn from.
const STREAM: u64 = 0x7265_616c_2d65_7870;

/// One request of a schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Planned {
    /// When it is sent, µs after the start.
    pub at_us: u64,
    /// Its key (the schedule's numbering; the run names it under a fresh prefix).
    pub key: u32,
    /// The instance it goes to.
    pub instance: u32,
}

/// What a fault does to the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// Stopped (SIGSTOP), then continued: connections stay open, nothing is answered.
    Freeze,
    /// Killed (SIGKILL), then started again empty on the same port.
    Restart,
    /// Redis `CLIENT PAUSE`: every command waits until the pause ends.
    Slow,
}

impl FaultKind {
    /// Whether the store is unavailable (not only slow) while it lasts.
    pub fn down(self) -> bool {
        self != FaultKind::Slow
    }
}

/// One fault of a schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlannedFault {
    /// When it begins, µs after the start.
    pub at_us: u64,
    /// What it does.
    pub kind: FaultKind,
    /// How long it lasts, µs.
    pub for_us: u64,
}

/// One seed's schedule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    /// The seed it was drawn from.
    pub seed: u64,
    /// The start is placed on a multiple of this on the wall clock (µs), so that windows
    /// aligned to the clock begin where the schedule's do.
    pub align_us: u64,
    /// Every request, by send time.
    pub requests: Vec<Planned>,
    /// The store's faults, by start.
    pub faults: Vec<PlannedFault>,
}

/// What a schedule is drawn for: the claim's times, the target's instances and store.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// The policy's window (a bucket's time to refill from empty, halved), µs.
    pub window_us: u64,
    /// The claim's time to forget a key, µs.
    pub forget_us: u64,
    /// The time between two requests at the claimed rate, µs.
    pub rate_us: u64,
    /// The claim's burst.
    pub burst: u64,
    /// Instances.
    pub instances: u32,
    /// The faults the store takes (none without a store the audit started).
    pub faults: &'static [FaultKind],
    /// How long the target may take to limit again once its store is back, µs.
    pub recovery_us: u64,
    /// The longest schedule, µs.
    pub length_us: u64,
    /// The most requests in one schedule.
    pub most_requests: usize,
}

/// Draws from a seed's stream.
struct Draw(StreamRng);

impl Draw {
    fn int(&mut self, lo: u64, hi: u64) -> u64 {
        self.0.between(lo, hi.max(lo))
    }

    fn pick<T: Copy>(&mut self, of: &[T]) -> T {
        of[self.0.below(of.len() as u64) as usize]
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.0.below(100) < percent
    }
}

/// The schedule seed `seed` draws for `shape`.
pub fn draw(seed: u64, shape: &Shape) -> Schedule {
    let mut d = Draw(StreamRng::new(seed, STREAM));
    let w = shape.window_us.max(1_000);
    let mut requests: Vec<Planned> = Vec::new();
    let instances = u64::from(shape.instances.max(1));
    let send = |d: &mut Draw, requests: &mut Vec<Planned>, at_us: u64, key: u32| {
        let instance = d.int(0, instances - 1) as u32;
        requests.push(Planned {
            at_us,
            key,
            instance,
        });
    };
    let keys = d.int(1, 3) as u32;
    for key in 0..keys {
        let mut t = d.int(0, w / 2);
        for _ in 0..d.int(2, 8) {
            if t >= shape.length_us {
                break;
            }
            match d.int(0, 2) {
                0 => {
                    // Paced: a share of the claimed rate, its period dividing the window
                    // or not.
                    let percent = d.pick(&[50u64, 80, 100, 150, 200, 400]);
                    let base = (shape.rate_us.saturating_mul(100) / percent).max(500);
                    let per_window = (w / base).max(1);
                    let period = if d.chance(50) {
                        w / per_window
                    } else {
                        w * 2 / (2 * per_window + 1)
                    }
                    .max(500);
                    let until = (t + d.int(w / 2, 2 * w)).min(shape.length_us);
                    while t < until && requests.len() < shape.most_requests {
                        send(&mut d, &mut requests, t, key);
                        t += period;
                    }
                }
                1 => {
                    // A burst on a window boundary, or just before or after it.
                    let size = d
                        .int(1, shape.burst.saturating_mul(3) / 2 + 1)
                        .min(shape.most_requests as u64);
                    let boundary = (t / w + 1) * w;
                    let offset = d.pick(&[0i64, -1_000, 1_000, -(w as i64) / 20, w as i64 / 20]);
                    let at = boundary.saturating_add_signed(offset).max(t);
                    for _ in 0..size {
                        send(&mut d, &mut requests, at, key);
                    }
                    t = at + 1_000;
                }
                _ => {
                    // Quiet: between one and two windows half the time, else up to three
                    // times the time to forget.
                    t += if d.chance(50) {
                        d.int(w, 2 * w)
                    } else {
                        d.int(0, 3 * shape.forget_us)
                    };
                }
            }
        }
    }
    let end = requests.iter().map(|r| r.at_us).max().unwrap_or(0).max(w);
    let mut faults = Vec::new();
    if !shape.faults.is_empty() && d.chance(60) {
        let mut from = end / 5;
        for _ in 0..d.int(1, 2) {
            let at_us = d.int(from, from + end / 3);
            let kind = d.pick(shape.faults);
            let for_us = d.int(150_000, 1_000_000);
            // Observed well past its recovery, or not drawn at all: a fault whose answers
            // after recovery fall beyond the schedule would judge nothing.
            let observed_until = at_us + for_us + shape.recovery_us + 2 * w;
            if observed_until > shape.length_us {
                break;
            }
            faults.push(PlannedFault {
                at_us,
                kind,
                for_us,
            });
            // Driven beyond its policy from before the fault until well past recovery.
            let key = keys + faults.len() as u32 - 1;
            let period = (shape.rate_us / 4).max(2_000);
            let mut t = at_us.saturating_sub(200_000);
            while t < observed_until && requests.len() < 2 * shape.most_requests {
                send(&mut d, &mut requests, t, key);
                t += period;
            }
            from = observed_until;
        }
    }
    requests.sort_by_key(|r| r.at_us);
    requests.retain(|r| r.at_us <= shape.length_us);
    requests.truncate(shape.most_requests);
    faults.retain(|f| f.at_us + f.for_us <= shape.length_us);
    Schedule {
        seed,
        align_us: w,
        requests,
        faults,
    }
}

/// The longest a schedule read from a file may run, µs: an hour.
const LONGEST_US: u64 = 3_600_000_000;

/// The most requests a schedule read from a file may send.
const MOST_REQUESTS: usize = 100_000;

impl Schedule {
    /// Whether it can be run: its times within an hour, its requests at most 100 000, in
    /// send order; else what is wrong, at its JSON path.
    pub fn check(&self) -> Result<(), String> {
        if self.align_us == 0 || self.align_us > LONGEST_US {
            return Err(format!(
                "align_us: {} µs, expected 1 to {LONGEST_US}",
                self.align_us
            ));
        }
        if self.requests.len() > MOST_REQUESTS {
            return Err(format!(
                "requests: {} of them, at most {MOST_REQUESTS}",
                self.requests.len()
            ));
        }
        for (i, r) in self.requests.iter().enumerate() {
            if r.at_us > LONGEST_US {
                return Err(format!(
                    "requests[{i}].at_us: {} µs, beyond an hour",
                    r.at_us
                ));
            }
            if i > 0 && r.at_us < self.requests[i - 1].at_us {
                return Err(format!(
                    "requests[{i}].at_us: before the request ahead of it"
                ));
            }
        }
        for (i, f) in self.faults.iter().enumerate() {
            if f.at_us > LONGEST_US || f.for_us > LONGEST_US {
                return Err(format!("faults[{i}]: beyond an hour"));
            }
            if i > 0 && f.at_us < self.faults[i - 1].at_us + self.faults[i - 1].for_us {
                return Err(format!(
                    "faults[{i}].at_us: before the fault ahead of it has ended"
                ));
            }
        }
        Ok(())
    }

    /// The keys it sends on.
    pub fn keys(&self) -> std::collections::BTreeSet<u32> {
        self.requests.iter().map(|r| r.key).collect()
    }

    /// When its last request is sent or its last fault ends, µs.
    pub fn end_us(&self) -> u64 {
        let last = self.requests.last().map_or(0, |r| r.at_us);
        let fault = self
            .faults
            .iter()
            .map(|f| f.at_us + f.for_us)
            .max()
            .unwrap_or(0);
        last.max(fault)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> Shape {
        Shape {
            window_us: 1_000_000,
            forget_us: 2_000_000,
            rate_us: 100_000,
            burst: 10,
            instances: 2,
            faults: &[FaultKind::Freeze, FaultKind::Restart, FaultKind::Slow],
            recovery_us: 1_000_000,
            length_us: 12_000_000,
            most_requests: 2_000,
        }
    }

    #[test]
    fn a_schedule_read_from_a_file_is_checked_before_it_runs() {
        let good = draw(3, &shape());
        assert_eq!(good.check(), Ok(()));
        let mut far = good.clone();
        far.requests.push(Planned {
            at_us: u64::MAX,
            key: 0,
            instance: 0,
        });
        assert!(far.check().unwrap_err().contains("beyond an hour"));
        let mut late = good.clone();
        late.faults = vec![
            PlannedFault {
                at_us: 0,
                kind: FaultKind::Freeze,
                for_us: 10,
            },
            PlannedFault {
                at_us: 5,
                kind: FaultKind::Slow,
                for_us: 10,
            },
        ];
        assert!(late.check().unwrap_err().starts_with("faults[1].at_us"));
        let unaligned = Schedule {
            align_us: 0,
            ..good
        };
        assert!(unaligned.check().is_err());
    }

    #[test]
    fn a_seed_draws_one_schedule_and_seeds_differ() {
        assert_eq!(draw(7, &shape()), draw(7, &shape()));
        assert_ne!(draw(7, &shape()), draw(8, &shape()));
    }

    #[test]
    fn schedules_stay_in_bounds_and_reach_every_spell_and_fault() {
        let s = shape();
        let (mut bursts, mut gaps, mut faults) = (0, 0, std::collections::BTreeSet::new());
        for seed in 0..200 {
            let d = draw(seed, &s);
            assert!(d.requests.len() <= s.most_requests);
            assert!(d.end_us() <= s.length_us, "seed {seed}");
            assert!(d.requests.windows(2).all(|p| p[0].at_us <= p[1].at_us));
            assert!(d.requests.iter().all(|r| r.instance < s.instances));
            faults.extend(d.faults.iter().map(|f| f.kind));
            for k in d.keys() {
                let times: Vec<u64> = d
                    .requests
                    .iter()
                    .filter(|r| r.key == k)
                    .map(|r| r.at_us)
                    .collect();
                bursts += usize::from(times.windows(2).any(|p| p[0] == p[1]));
                gaps += usize::from(
                    times
                        .windows(2)
                        .any(|p| (s.window_us..=2 * s.window_us).contains(&(p[1] - p[0]))),
                );
            }
        }
        assert!(bursts > 50 && gaps > 20, "{bursts} bursts, {gaps} gaps");
        assert_eq!(faults.len(), 3, "{faults:?}");
    }
}
