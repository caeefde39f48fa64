//! Time as an integer count of nanoseconds.

use core::fmt;

/// Nanoseconds: an instant since an arbitrary epoch chosen by the caller, or a duration.
///
/// The core never reads a clock; every instant comes in as an argument. Integer nanoseconds
/// keep every decision exact and reproducible (no floats anywhere in a decision).
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Nanos(pub u64);

/// Nanoseconds in one second.
pub const NANOS_PER_SEC: u64 = 1_000_000_000;

impl Nanos {
    /// Zero nanoseconds.
    pub const ZERO: Nanos = Nanos(0);
    /// The latest representable instant.
    pub const MAX: Nanos = Nanos(u64::MAX);

    /// `secs` whole seconds, saturating at [`Nanos::MAX`].
    pub const fn from_secs(secs: u64) -> Nanos {
        Nanos(secs.saturating_mul(NANOS_PER_SEC))
    }

    /// `ms` milliseconds, saturating at [`Nanos::MAX`].
    pub const fn from_millis(ms: u64) -> Nanos {
        Nanos(ms.saturating_mul(1_000_000))
    }

    /// `us` microseconds, saturating at [`Nanos::MAX`].
    pub const fn from_micros(us: u64) -> Nanos {
        Nanos(us.saturating_mul(1_000))
    }

    /// The raw count.
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// Whole seconds, rounded up: `1 ns` is `1 s`, `0 ns` is `0 s`.
    pub const fn as_secs_ceil(self) -> u64 {
        self.0.div_ceil(NANOS_PER_SEC)
    }

    /// `self + rhs`, saturating at [`Nanos::MAX`].
    pub const fn saturating_add(self, rhs: Nanos) -> Nanos {
        Nanos(self.0.saturating_add(rhs.0))
    }

    /// `self - rhs`, saturating at zero.
    pub const fn saturating_sub(self, rhs: Nanos) -> Nanos {
        Nanos(self.0.saturating_sub(rhs.0))
    }

    /// Converts an exact `u128` count, saturating at [`Nanos::MAX`].
    pub(crate) fn saturating_from_u128(v: u128) -> Nanos {
        Nanos(u64::try_from(v).unwrap_or(u64::MAX))
    }
}

impl fmt::Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ns", self.0)
    }
}

impl From<core::time::Duration> for Nanos {
    /// Converts, saturating at [`Nanos::MAX`] (about 584 years).
    fn from(d: core::time::Duration) -> Nanos {
        Nanos::saturating_from_u128(d.as_nanos())
    }
}

impl From<Nanos> for core::time::Duration {
    fn from(n: Nanos) -> core::time::Duration {
        core::time::Duration::from_nanos(n.0)
    }
}
