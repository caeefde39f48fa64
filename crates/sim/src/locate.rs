//! Finding a JSON path's line and column in a scenario's text: ratelab-core's located errors
//! ([`ratelab_core::located`]), under the names the scenario reader uses.
//!
//! serde reports where a *syntax or type* error is; a rule that spans fields (a window that
//! ends before it starts, a gateway index beyond the cluster) is checked after parsing, and
//! these point such errors at the offending value in the original text.

pub use ratelab_core::located::{PathSeg, locate, render};
