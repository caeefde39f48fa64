//! A future boxed where it is made. `Box::pin(fut)` makes `fut` on the stack and then copies
//! all of it into the box; a request's future on a remote store is kilobytes, most of it
//! not yet written (the states it has not reached), and that copy was the largest one of the
//! request. With the box allocated first, the optimiser writes the future straight into it
//! (not a promise of the language: the release builds do, and `docs/PERFORMANCE.md` measured
//! the copy gone; an unoptimised build may still copy).

use std::pin::Pin;

/// The future `make` makes, in a box allocated before it is made.
#[inline(always)]
pub(crate) fn boxed<G>(make: impl FnOnce() -> G) -> Pin<Box<G>> {
    Box::into_pin(made_in_box(make))
}

/// What `make` makes, in a box allocated before it is made.
#[inline(always)]
pub(crate) fn made_in_box<G>(make: impl FnOnce() -> G) -> Box<G> {
    let slot = Box::<G>::new_uninit();
    Box::write(slot, make())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    #[test]
    fn the_boxed_future_runs_as_made() {
        let mut f = boxed(|| async { 6 * 7 });
        let mut cx = Context::from_waker(Waker::noop());
        assert_eq!(f.as_mut().poll(&mut cx), Poll::Ready(42));
    }
}
