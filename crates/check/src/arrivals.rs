//! Arrival processes: whether the requests a run sent left when their process says.
//!
//! A Poisson stream's gaps are exponential; the Kolmogorov–Smirnov distance between the
//! realised gaps and that distribution ([`ks_exponential`]) measures how far a sender's
//! timing (a timer wheel's ticks, a floor on sleeps) bent the process, and [`ks_critical`] is
//! the distance a true Poisson stream stays under with probability 0.999.

/// The Kolmogorov–Smirnov distance between the empirical distribution of `gaps` and the
/// exponential distribution with mean `mean` (in the gaps' unit): the largest vertical gap
/// between the two distribution functions. 1.0 for an empty sample or a mean ≤ 0.
pub fn ks_exponential(gaps: &[f64], mean: f64) -> f64 {
    if gaps.is_empty() || mean <= 0.0 || mean.is_nan() {
        return 1.0;
    }
    let mut xs = gaps.to_vec();
    xs.sort_by(f64::total_cmp);
    let n = xs.len() as f64;
    xs.iter()
        .enumerate()
        .map(|(i, &x)| {
            let f = 1.0 - (-x.max(0.0) / mean).exp();
            (f - i as f64 / n).max((i + 1) as f64 / n - f)
        })
        .fold(0.0, f64::max)
}

/// The KS distance that `n` exponential gaps exceed with probability 0.001 (the asymptotic
/// critical value 1.949/√n).
pub fn ks_critical(n: usize) -> f64 {
    1.949 / (n.max(1) as f64).sqrt()
}

/// The gaps between consecutive `times` (sorted first), in their unit.
pub fn gaps(times: &[u64]) -> Vec<f64> {
    let mut t = times.to_vec();
    t.sort_unstable();
    t.windows(2).map(|w| (w[1] - w[0]) as f64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exponential gaps by inversion of an evenly spread sample: as close to the
    /// distribution as n points get.
    fn ideal(n: usize, mean: f64) -> Vec<f64> {
        (0..n)
            .map(|i| -(1.0 - (i as f64 + 0.5) / n as f64).ln() * mean)
            .collect()
    }

    #[test]
    fn exponential_gaps_pass_and_others_fail() {
        let n = 5_000;
        let good = ideal(n, 1_000.0);
        assert!(ks_exponential(&good, 1_000.0) < ks_critical(n));
        // The right shape at the wrong rate fails.
        assert!(ks_exponential(&good, 1_500.0) > ks_critical(n));
        // Evenly spaced gaps (a constant process) fail.
        assert!(ks_exponential(&vec![1_000.0; n], 1_000.0) > ks_critical(n));
        // Gaps held to a 1 000-unit tick fail.
        let ticked: Vec<f64> = good
            .iter()
            .map(|g| (g / 1_000.0).round() * 1_000.0)
            .collect();
        assert!(ks_exponential(&ticked, 1_000.0) > ks_critical(n));
        assert_eq!(ks_exponential(&[], 1.0), 1.0);
    }

    #[test]
    fn gaps_sort_their_input() {
        assert_eq!(gaps(&[30, 10, 20]), vec![10.0, 10.0]);
        assert!(gaps(&[5]).is_empty());
    }
}
