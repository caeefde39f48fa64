//! Seeded randomness: ChaCha8 streams derived from a seed, the only source of randomness of a
//! simulated run and of a probe's seeded choices.
//!
//! Each component (each client, the store's fault decisions) gets its own stream, so adding
//! a client never shifts another's draws.
//!
//! The methods are small and called per draw from the simulator's hottest loops, in another
//! crate: they are marked `#[inline]`.

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng as _, SeedableRng};

/// A seeded random stream.
#[derive(Clone, Debug)]
pub struct StreamRng(ChaCha8Rng);

impl StreamRng {
    /// Stream `stream` of `seed`.
    #[inline]
    pub fn new(seed: u64, stream: u64) -> StreamRng {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(stream);
        StreamRng(rng)
    }

    /// A uniform 64-bit integer.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A uniform integer in `0..n` (`n > 0`).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.0.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A uniform integer in `lo..=hi`.
    #[inline]
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// A uniform float in `[0, 1)`.
    #[inline]
    pub fn unit(&mut self) -> f64 {
        (self.0.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `p`.
    #[inline]
    pub fn chance(&mut self, p: f64) -> bool {
        p >= 1.0 || self.unit() < p
    }

    /// An exponential gap with mean `mean_ns`, in ns.
    #[inline]
    pub fn exponential(&mut self, mean_ns: f64) -> u64 {
        (-(1.0 - self.unit()).ln() * mean_ns) as u64
    }
}

/// A drawing helper over one stream, for generators (the explorer draws whole scenarios with
/// it; each fault kind draws its own fields).
#[derive(Debug)]
pub struct Draw(pub StreamRng);

impl Draw {
    /// A uniform integer in `[lo, hi]`.
    #[inline]
    pub fn int(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.0.below(hi - lo + 1)
    }

    /// True with probability `p`.
    #[inline]
    pub fn chance(&mut self, p: f64) -> bool {
        self.0.chance(p)
    }

    /// One of `xs`, uniformly.
    #[inline]
    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.0.below(xs.len() as u64) as usize]
    }
}
