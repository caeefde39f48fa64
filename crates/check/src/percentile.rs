//! Percentiles of measured values, with one definition for every figure ratelab reports
//! (latency p50 / p99 of the real runs, the failover, the soak, the simulator's fail-open
//! answers, the load examples): the **nearest rank**. The `q` percentile of `n` values is
//! the value at rank ⌈q·n⌉ (1-based, at least 1) of the values sorted ascending: the
//! smallest value such that at least a share `q` of the values are at most it. It is always
//! one of the values measured, never an interpolation; `q = 1` is the maximum and `q = 0`
//! (like any `q` below `1/n`) the minimum.

/// The 1-based rank of the `q` percentile among `n` sorted values: ⌈q·n⌉ within `1..=n`
/// (`q` is clamped to `[0, 1]`, NaN taken as 0); 0 when `n` is 0.
pub fn rank(n: u64, q: f64) -> u64 {
    if n == 0 {
        return 0;
    }
    let q = if q.is_nan() { 0.0 } else { q.clamp(0.0, 1.0) };
    ((n as f64 * q).ceil() as u64).clamp(1, n)
}

/// The `q` percentile of `sorted` (ascending), by [`rank`]; `None` if it is empty.
pub fn of<T: Copy + PartialOrd>(sorted: &[T], q: f64) -> Option<T> {
    debug_assert!(sorted.is_sorted(), "percentile of unsorted values");
    let r = rank(sorted.len() as u64, q);
    sorted
        .get(usize::try_from(r).ok()?.checked_sub(1)?)
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nearest_rank_is_one_of_the_values_at_rank_ceil_q_n() {
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(of(&v, 0.5), Some(50));
        assert_eq!(of(&v, 0.99), Some(99));
        assert_eq!(of(&v, 0.995), Some(100));
        assert_eq!(of(&v, 1.0), Some(100));
        assert_eq!(of(&v, 0.0), Some(1));
        // Four values: the median is the second, p99 the largest.
        let v = [10, 20, 30, 40];
        assert_eq!(of(&v, 0.5), Some(20));
        assert_eq!(of(&v, 0.99), Some(40));
        assert_eq!(of(&[7.5], 0.5), Some(7.5));
    }

    #[test]
    fn empty_input_and_odd_q_never_panic() {
        assert_eq!(of::<u64>(&[], 0.5), None);
        assert_eq!(rank(0, 0.99), 0);
        assert_eq!(rank(3, -1.0), 1);
        assert_eq!(rank(3, 2.0), 3);
        assert_eq!(rank(3, f64::NAN), 1);
        assert_eq!(rank(u64::MAX, 1.0), u64::MAX);
    }
}
