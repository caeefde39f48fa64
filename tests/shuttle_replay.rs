//! A failing shuttle schedule, captured and replayed: shuttle's random scheduler finds the
//! naive path's lost update, persists the schedule, and `shuttle::replay` with that exact
//! string reproduces the same violation.
//!
//! Its own test binary: shuttle's failure persistence goes through a process-wide panic hook.
//! A saved schedule is tied to the exact code it came from, so what stays pinned as a
//! regression is this *procedure* (seeded search, capture, replay), not a schedule string.

use ratelab_testkit::docs;
mod support {
    pub mod shuttle_model;
}
use support::shuttle_model as model;

use model::{Counter, expect_violation, take_last_token};
use ratelab_store::Path;
use shuttle::scheduler::RandomScheduler;
use shuttle::{Config, FailurePersistence, Runner};
use std::sync::Arc;

#[test]
fn naive_failing_schedule_replays_the_lost_update() {
    let dir = std::env::temp_dir().join(format!("ratelab-shuttle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut config = Config::new();
    config.failure_persistence = FailurePersistence::File(Some(dir.clone()));

    let found = Arc::new(Counter::default());
    let message = expect_violation(|| {
        let scheduler = RandomScheduler::new_from_seed(0x5eed, 1_000);
        Runner::new(scheduler, config).run(take_last_token(Path::Naive, 3, found.clone()));
    });
    assert!(message.contains("lost update"), "{message}");

    let file = std::fs::read_dir(&dir)
        .expect("schedule dir")
        .map(|e| e.expect("dir entry").path())
        .find(|p| p.extension().is_some_and(|x| x == "txt"))
        .expect("shuttle persisted the failing schedule");
    let schedule = std::fs::read_to_string(&file).expect("schedule file");
    let schedule = schedule.trim();
    println!(
        "shuttle random (seed 0x5eed): lost update after {} executions; failing schedule {schedule:?}",
        found.get()
    );
    // The README shows the schedule's first characters: the rest is an encoding detail.
    let head: String = schedule.chars().take(6).collect();
    let mut lines = format!(
        "shuttle random (seed 0x5eed): lost update after {} executions; failing schedule \"{head}…\"\n",
        found.get()
    );

    let replays = Arc::new(Counter::default());
    let replayed = expect_violation(|| {
        shuttle::replay(take_last_token(Path::Naive, 3, replays.clone()), schedule)
    });
    println!("shuttle::replay of that schedule: {replayed}");
    assert!(replayed.contains("lost update"), "{replayed}");
    assert_eq!(replays.get(), 1, "a replay runs exactly one execution");
    lines.push_str(&format!("shuttle::replay of that schedule: {replayed}\n"));
    docs::check_block(
        "README.md",
        "shuttle-replay",
        &format!("```text\n{lines}```\n"),
    );
    std::fs::remove_dir_all(&dir).ok();
}
