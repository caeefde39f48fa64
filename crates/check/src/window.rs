//! The window spike: the most admitted for one key in any interval of one window length.
//! It shows the fixed window's boundary burst (up to twice the limit across a reset), which
//! the envelope alone states only as excess.

use crate::envelope::Admission;
use ratelab_core::Nanos;
use std::collections::BTreeMap;

/// The most admitted for one key in any half-open interval of length `window`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpikeReport {
    /// The largest admitted cost in any such interval.
    pub max_in_window: u64,
    /// Its key.
    pub key: String,
    /// Its start.
    pub from: Nanos,
}

/// Runs the window-spike checker.
pub fn window_spike<K: AsRef<str>>(
    by_key: &BTreeMap<K, Vec<Admission>>,
    window: Nanos,
) -> SpikeReport {
    let mut best = SpikeReport::default();
    for (key, adm) in by_key {
        let mut lo = 0;
        let mut sum = 0u64;
        for x in adm {
            sum += x.cost;
            while adm[lo].at.as_u64() + window.as_u64() <= x.at.as_u64() {
                sum -= adm[lo].cost;
                lo += 1;
            }
            if sum > best.max_in_window {
                best = SpikeReport {
                    max_in_window: sum,
                    key: key.as_ref().to_owned(),
                    from: adm[lo].at,
                };
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::adm;

    #[test]
    fn window_spike_counts_the_densest_window() {
        let r = window_spike(&adm(&[0, 900, 950, 1000, 1050, 3000]), Nanos::from_secs(1));
        assert_eq!(r.max_in_window, 4, "900, 950, 1000 and 1050 are within 1 s");
        assert_eq!(r.from, Nanos::from_millis(900));
    }
}
