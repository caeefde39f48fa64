//! madsim's record of spawned tasks. Each node keeps a weak reference to every task it ever
//! spawned, for killing them with the node, and sheds the finished ones only when something
//! counts them: a run of many short tasks (one per request) otherwise holds every finished
//! task's record to its end, so each spawn writes a record in memory never used before.
//! Counting them now and then lets finished records go back to the allocator, to be reused
//! while they are still in cache. Counting consumes no randomness and moves no clock: runs
//! and their trace hashes are the same.

/// Spawns between two counts.
const EVERY: u64 = 1 << 8;

/// Called once per task spawned, with the spawn's sequence number: every [`EVERY`]th call,
/// madsim's nodes shed their finished tasks' records.
pub(crate) fn spawned(n: u64) {
    if n % EVERY == EVERY - 1 {
        madsim::runtime::Handle::current().metrics().num_tasks();
    }
}
