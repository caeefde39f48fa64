//! Smaller schedules to try in place of a failing one: a fault, a key, half or a smaller
//! part of the requests left out, or every request sent to one instance.

use super::schedule::Schedule;

/// The candidates one step smaller than `s`, the boldest first.
pub fn candidates(s: &Schedule) -> Vec<Schedule> {
    let mut out = Vec::new();
    for i in 0..s.faults.len() {
        let mut c = s.clone();
        c.faults.remove(i);
        out.push(c);
    }
    let keys = s.keys();
    if keys.len() > 1 {
        for k in keys {
            let mut c = s.clone();
            c.requests.retain(|r| r.key != k);
            out.push(c);
        }
    }
    if s.requests.iter().any(|r| r.instance != 0) {
        let mut c = s.clone();
        for r in &mut c.requests {
            r.instance = 0;
        }
        out.push(c);
    }
    let n = s.requests.len();
    let mut chunk = n / 2;
    while chunk >= 1 {
        for from in (0..n).step_by(chunk).take(8) {
            let mut c = s.clone();
            c.requests.drain(from..(from + chunk).min(n));
            if !c.requests.is_empty() {
                out.push(c);
            }
        }
        if chunk == 1 {
            break;
        }
        chunk /= 2;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::schedule::{FaultKind, Planned, PlannedFault};
    use super::*;

    #[test]
    fn every_candidate_is_smaller_and_keeps_the_rest_in_order() {
        let s = Schedule {
            seed: 1,
            align_us: 1_000_000,
            requests: (0..10)
                .map(|i| Planned {
                    at_us: i * 1_000,
                    key: (i % 2) as u32,
                    instance: (i % 3) as u32,
                })
                .collect(),
            faults: vec![PlannedFault {
                at_us: 5_000,
                kind: FaultKind::Freeze,
                for_us: 1_000,
            }],
        };
        let c = candidates(&s);
        assert!(c.len() > 5);
        for x in &c {
            let size = |s: &Schedule| s.requests.len() + s.faults.len();
            let fewer = size(x) < size(&s);
            let one_instance = x.requests.iter().all(|r| r.instance == 0);
            assert!(fewer || one_instance, "{x:?}");
            assert!(x.requests.windows(2).all(|p| p[0].at_us <= p[1].at_us));
        }
        assert!(c.iter().any(|x| x.faults.is_empty()));
        assert!(c.iter().any(|x| x.keys().len() == 1));
    }
}
