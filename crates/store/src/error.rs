//! Store failures, and what a decision can fail with.

use core::fmt;
use ratelab_core::CostError;

/// Why a store call failed. The gateway's policy (fail open or closed) acts on these; none of
/// them is a denial.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoreError {
    /// The store could not be reached or refused the call.
    Unavailable,
    /// The store did not answer in time. The call may or may not have been applied.
    Timeout,
    /// The store holds its maximum number of live keys and cannot add another.
    Full,
    /// The store answered with a value this client cannot read (a corrupt or foreign stored
    /// state, a malformed reply): no decision is made from it.
    Corrupt,
}

impl StoreError {
    /// Whether the store itself answered: a full store or an unreadable value is a problem
    /// with one key, not with the store, and must not count against the store's health (a
    /// circuit breaker opened by them would switch limiting off for every key).
    pub fn store_answered(self) -> bool {
        matches!(self, StoreError::Full | StoreError::Corrupt)
    }

    /// The error of a Redis error reply whose code (its first word) is `code`: `CORRUPT`, a
    /// script refusing a stored value it cannot read, is [`StoreError::Corrupt`]; anything
    /// else is [`StoreError::Unavailable`].
    #[cfg(feature = "redis")]
    pub(crate) fn of_reply_code(code: Option<&str>) -> StoreError {
        if code == Some("CORRUPT") {
            StoreError::Corrupt
        } else {
            StoreError::Unavailable
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StoreError::Unavailable => "store unavailable",
            StoreError::Timeout => "store timed out",
            StoreError::Full => "store full: key limit reached",
            StoreError::Corrupt => "store returned a value that cannot be decoded",
        })
    }
}

impl std::error::Error for StoreError {}

/// Why a limit layer could not decide, and let the request through (or refused it, on a
/// fail-closed route). The gateway acts on it; the recorder and the checkers read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FailReason {
    /// The store answered with an error.
    Error,
    /// The store did not answer before the request's deadline.
    Timeout,
    /// The breaker was open: the store was not called.
    BreakerOpen,
}

impl FailReason {
    /// Every reason.
    pub const ALL: [FailReason; 3] = [
        FailReason::Error,
        FailReason::Timeout,
        FailReason::BreakerOpen,
    ];

    /// The lower-case name (metric label, log field).
    pub fn name(self) -> &'static str {
        match self {
            FailReason::Error => "error",
            FailReason::Timeout => "timeout",
            FailReason::BreakerOpen => "breaker_open",
        }
    }
}

/// Why no decision was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LimitError {
    /// The request's cost can never be admitted (the caller's error).
    Cost(CostError),
    /// The store failed.
    Store(StoreError),
    /// One all-or-nothing step named the same key twice (the caller's error: each limit
    /// has a key space of its own).
    RepeatedKey,
}

impl fmt::Display for LimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LimitError::Cost(e) => e.fmt(f),
            LimitError::Store(e) => e.fmt(f),
            LimitError::RepeatedKey => f.write_str("the same key twice in one step"),
        }
    }
}

impl std::error::Error for LimitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LimitError::Cost(e) => Some(e),
            LimitError::Store(e) => Some(e),
            LimitError::RepeatedKey => None,
        }
    }
}

impl From<CostError> for LimitError {
    fn from(e: CostError) -> Self {
        LimitError::Cost(e)
    }
}

impl From<StoreError> for LimitError {
    fn from(e: StoreError) -> Self {
        LimitError::Store(e)
    }
}
