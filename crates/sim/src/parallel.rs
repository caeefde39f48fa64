//! Many independent runs on every core.
//!
//! Each run builds its own madsim runtime on the thread that runs it ([`crate::run`]), so
//! runs share nothing and each is as deterministic on a worker thread as on the main one.
//! Results come back in input order, whatever finished first: what is printed, hashed or
//! written does not depend on the number of threads.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The machine's cores (at least 1): the default number of worker threads.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// `f` over `items` on `threads` worker threads (at least 1), results in `items`' order;
/// `progress(done, total)` after each.
pub fn map<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    f: impl Fn(&T) -> R + Sync,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Vec<R> {
    let total = items.len();
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<R>>> = Mutex::new((0..total).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, total.max(1)) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else { break };
                    let r = f(item);
                    results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(r);
                    progress(done.fetch_add(1, Ordering::Relaxed) + 1, total);
                }
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .map(|r| r.expect("every item was run"))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn results_come_back_in_input_order_on_any_number_of_threads() {
        let items: Vec<u64> = (0..100).collect();
        let one = super::map(&items, 1, |&i| i * i, &|_, _| {});
        let many = super::map(&items, 7, |&i| i * i, &|_, _| {});
        assert_eq!(one, many);
        assert_eq!(one[9], 81);
        assert!(super::map(&[] as &[u64], 4, |&i| i, &|_, _| {}).is_empty());
    }
}
