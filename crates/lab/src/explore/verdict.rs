//! Every applicable checker over one explored run: the simulator's own verdict module
//! (`ratelab_sim::verdict`), which `ratelab_sim::run_with` shares.

pub use ratelab_sim::verdict::*;
