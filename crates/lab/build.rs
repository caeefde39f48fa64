//! The timeline's rendering test needs a headless Chromium: without one, and unless
//! `RATELAB_REQUIRE_CHROMIUM=1`, it is marked ignored (see
//! `ratelab_procs::installed`).

fn main() {
    use ratelab_procs::installed::{CHROMIUM, build_script};
    build_script(&[&CHROMIUM]);
}
