//! Many independent runs on every core.
//!
//! Each run builds its own madsim runtime on the thread that runs it ([`crate::run`]), so
//! runs share nothing and each is as deterministic on a worker thread as on the main one.
//! Results come back in input order, whatever finished first: what is printed, hashed or
//! written does not depend on the number of threads.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

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
    let mut out = Vec::with_capacity(total);
    for_each_in_order(items, threads, f, |r| {
        out.push(r);
        progress(out.len(), total);
    });
    out
}

/// `f` over `items` on `threads` worker threads (at least 1), handing each result to `each`
/// on the calling thread in `items`' order as soon as it and every earlier one are done: a
/// caller can print or write as runs finish, and holds only the results that came back
/// early.
pub fn for_each_in_order<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    f: impl Fn(&T) -> R + Sync,
    mut each: impl FnMut(R),
) {
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel::<(usize, R)>();
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, items.len().max(1)) {
            let tx = tx.clone();
            let (next, f) = (&next, &f);
            s.spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else { break };
                    if tx.send((i, f(item))).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let mut early = BTreeMap::new();
        let mut due = 0;
        for (i, r) in rx {
            early.insert(i, r);
            while let Some(r) = early.remove(&due) {
                each(r);
                due += 1;
            }
        }
    });
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
