//! The madsim floor of `ratelab bench` alone, on the bench's default load for `SECONDS`
//! simulated seconds (default 2): 64 Poisson clients at 313 requests/s each, each arrival one
//! task sending one raw endpoint message and waiting for the echo. For profilers, which
//! then see nothing but the floor:
//!
//! ```sh
//! cargo build --release -p ratelab-sim --example madsim_floor
//! valgrind --tool=callgrind --callgrind-out-file=floor.out target/release/examples/madsim_floor
//! python3 scripts/callgrind-calls.py floor.out REQUESTS   # REQUESTS as printed
//! ```

fn main() {
    let seconds = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    let run = ratelab_sim::floor::madsim_round_trips(64, 313, seconds, 1);
    println!(
        "{} requests in {:.3} s: {:.0} requests/s",
        run.requests,
        run.wall.as_secs_f64(),
        run.per_sec()
    );
}
