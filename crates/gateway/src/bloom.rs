//! A bloom-filter guard of valid API keys, in front of the limits.
//!
//! The filter holds every valid key. A request whose key the filter has *never* seen is
//! rejected at once (403), before any limit is consulted and without a store round trip: a
//! bloom filter has no false negatives, so a valid key is never rejected here. A false
//! positive — an invalid key that happens to hit set bits — is harmless: the request simply
//! goes on to the limits (and to whatever authenticates keys behind the gateway), exactly as
//! it would without the guard. Its only cost is the round trip the guard failed to save.
//!
//! Sizing for `n` keys and a target false-positive rate `p`: `m = ⌈−n·ln p / (ln 2)²⌉` bits
//! and `k = round((m / n)·ln 2)` hash functions (at least 1).

use crate::request::Guard;
use std::hash::Hash;

/// A filter's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BloomSizing {
    /// Bits, m.
    pub bits: u64,
    /// Hash functions, k.
    pub hashes: u32,
}

/// Most keys a guard is sized for.
pub const MAX_KEYS: u64 = 100_000_000;

/// The optimal size for `n` keys at false-positive rate `p` (0 < p < 1).
pub fn sizing(n: u64, p: f64) -> Result<BloomSizing, String> {
    if !(1..=MAX_KEYS).contains(&n) {
        return Err(format!("key count {n}: expected 1 to {MAX_KEYS}"));
    }
    if !(p > 0.0 && p < 1.0) {
        return Err(format!(
            "false-positive rate {p}: expected a fraction strictly between 0 and 1"
        ));
    }
    let ln2 = std::f64::consts::LN_2;
    let bits = (-(n as f64) * p.ln() / (ln2 * ln2)).ceil().max(8.0);
    let hashes = ((bits / n as f64) * ln2).round().max(1.0);
    Ok(BloomSizing {
        bits: bits as u64,
        hashes: hashes as u32,
    })
}

/// The guard: a bloom filter of valid API keys.
#[derive(Debug)]
pub struct KeyGuard {
    filter: fastbloom::BloomFilter,
    sizing: BloomSizing,
}

impl KeyGuard {
    /// A guard holding `keys`, sized for `n` keys at rate `p`; `seed` fixes the hashing (so a
    /// simulation is reproducible).
    pub fn new<K: Hash + ?Sized>(
        keys: impl IntoIterator<Item = impl AsRef<K>>,
        n: u64,
        p: f64,
        seed: u128,
    ) -> Result<KeyGuard, String> {
        let sizing = sizing(n, p)?;
        let bits = usize::try_from(sizing.bits)
            .map_err(|_| "filter too large for this machine".to_owned())?;
        let mut filter = fastbloom::BloomFilter::with_num_bits(bits)
            .seed(&seed)
            .hashes(sizing.hashes);
        for k in keys {
            filter.insert(k.as_ref());
        }
        Ok(KeyGuard { filter, sizing })
    }

    /// The filter's size.
    pub fn sizing(&self) -> BloomSizing {
        self.sizing
    }

    /// Whether `key` may be valid (false: certainly not).
    pub fn may_contain(&self, key: &str) -> bool {
        self.filter.contains(key)
    }
}

impl Guard for KeyGuard {
    fn reject(&self, api_key: Option<&str>) -> Option<String> {
        match api_key {
            Some(k) if !self.may_contain(k) => Some("unknown API key".into()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizing_follows_the_formulas_and_rejects_bad_input() {
        // n = 1000, p = 1%: m = ⌈1000 · 4.60517 / 0.480453⌉ = 9586, k = round(9.586 · 0.6931) = 7.
        assert_eq!(
            sizing(1000, 0.01),
            Ok(BloomSizing {
                bits: 9586,
                hashes: 7
            })
        );
        assert!(sizing(0, 0.01).is_err() && sizing(10, 0.0).is_err() && sizing(10, 1.0).is_err());
    }

    #[test]
    fn valid_keys_always_pass_and_requests_without_a_key_are_not_guarded() {
        let keys: Vec<String> = (0..1000).map(|i| format!("user:{i}")).collect();
        let g = KeyGuard::new::<str>(&keys, 1000, 0.01, 7).unwrap();
        assert!(
            keys.iter().all(|k| g.reject(Some(k)).is_none()),
            "no false negatives"
        );
        assert_eq!(g.reject(None), None);
        assert_eq!(
            g.reject(Some("definitely-not-a-key-0")).as_deref(),
            Some("unknown API key")
        );
    }
}
