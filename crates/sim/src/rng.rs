//! The run's only source of randomness: ChaCha8 streams derived from the seed
//! ([`ratelab_store::rng`]), one named stream per component. madsim's own RNG (network
//! latency) is seeded by the same seed through the runtime.

pub use ratelab_store::rng::{Draw, StreamRng as SimRng};

/// Named streams.
pub mod stream {
    /// Store-side fault decisions.
    pub const STORE: u64 = 1;
    /// The store's hash keys.
    pub const STORE_HASH: u64 = 2;
    /// The replica's lag, per write.
    pub const REPLICA: u64 = 3;
    /// Client `i` uses `CLIENTS + i`.
    pub const CLIENTS: u64 = 1 << 32;
    /// Gateway `i`'s request-id seed comes from `GATEWAY_IDS + i`.
    pub const GATEWAY_IDS: u64 = 2 << 32;
}
