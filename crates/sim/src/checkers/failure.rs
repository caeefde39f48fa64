//! What a checker reports: a failure, its class, and the signature that names it.

use serde::{Deserialize, Serialize};

/// What kind of failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// An invariant broke.
    Safety,
    /// After the faults healed, the system did not recover.
    Liveness,
    /// The run panicked.
    Panic,
    /// The same seed gave another trace.
    Determinism,
    /// The drawn scenario was not valid (a bug in the generator).
    Generator,
}

/// One failure of one run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// Its class.
    pub class: Class,
    /// The checker that found it (or what failed).
    pub checker: String,
    /// What witnessed it.
    pub detail: String,
}

impl Failure {
    pub(crate) fn new(class: Class, checker: &str, detail: String) -> Failure {
        Failure {
            class,
            checker: checker.to_owned(),
            detail,
        }
    }
}

impl Class {
    /// Its name in signatures and files.
    pub fn name(self) -> &'static str {
        match self {
            Class::Safety => "safety",
            Class::Liveness => "liveness",
            Class::Panic => "panic",
            Class::Determinism => "determinism",
            Class::Generator => "generator",
        }
    }
}

impl Failure {
    /// `class/checker`, as `expect.explorer` names it.
    pub fn signature(&self) -> String {
        format!("{}/{}", self.class.name(), self.checker)
    }
}
