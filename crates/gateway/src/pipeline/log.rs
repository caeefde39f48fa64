//! The request log: each answer's UUIDv7 minted and its log line emitted in one critical
//! section, so the log is sorted by id ([`crate::reqlog`]).

use super::Gateway;
use crate::answer::{Answer, LayerOutcome, Verdict};
use crate::env::Env;
use crate::reqlog::REQUEST_LOG_TARGET;
use crate::request::Request;
use ratelab_core::Nanos;
use ratelab_store::StoreClient;

impl<C: StoreClient, E: Env> Gateway<C, E> {
    /// Mints the answer's id and emits its log line, in one critical section: ids are issued
    /// and written in the same order, so the log is sorted by id.
    /// The id's time is Unix time at `start`, the request's monotonic start
    /// ([`Env::unix_at`]).
    pub(super) fn log(&self, req: &Request<'_>, answer: &mut Answer, start: Nanos) {
        self.log_lazily(|| *req, answer, start);
    }

    /// [`Gateway::log`] of the request `req` makes, made only for a subscriber that takes
    /// the line (the second half of a decision makes its request again from the head).
    pub(super) fn log_lazily<'r>(
        &self,
        req: impl FnOnce() -> Request<'r>,
        answer: &mut Answer,
        start: Nanos,
    ) {
        let mut ids = self.ids.lock().unwrap_or_else(|e| e.into_inner());
        let id = ids.next(self.env.unix_at(start).as_u64() / 1_000_000);
        // The line's fields are worked out only for a subscriber that takes it.
        if tracing::enabled!(target: REQUEST_LOG_TARGET, tracing::Level::INFO) {
            let req = req();
            let (decision, layer, fail_open, remaining) = Self::summary(answer);
            // Only a valid key is logged (bounded, no control characters): a request answered
            // without its key checked (the kill switch on, no enforced limit keyed on it) may
            // carry any bytes there, and a line too long for `ratelab log scan` would make the
            // log unsearchable.
            let key = req
                .api_key
                .and_then(|k| std::str::from_utf8(k).ok())
                .filter(|k| ratelab_store::Key::check(k).is_ok());
            let ip = answer.client_ip.unwrap_or(req.peer);
            tracing::info!(
                target: REQUEST_LOG_TARGET,
                id = %id,
                gateway = self.config.name.as_str(),
                trace = req.trace,
                ip = %ip,
                key,
                decision,
                layer,
                fail_open,
                status = answer.status,
                remaining,
            );
        }
        drop(ids);
        answer.id = id;
    }

    /// The log's decision, the limit it rests on, the fail-open reason, the quota left.
    /// Shadow limits never decide a request, so the log names only enforced ones.
    fn summary(
        a: &Answer,
    ) -> (
        &'static str,
        Option<&str>,
        Option<&'static str>,
        Option<u64>,
    ) {
        match &a.verdict {
            Verdict::Rejected(_) => return ("rejected", None, None, None),
            Verdict::BadRequest(_) => return ("bad_request", None, None, None),
            _ if a.bypassed => return ("bypassed", None, None, None),
            _ => {}
        }
        let enforced = || a.limits.iter().filter(|r| !r.shadow);
        if let Some((r, LayerOutcome::FailedClosed(reason))) = enforced()
            .map(|r| (r, r.outcome))
            .find(|(_, o)| matches!(o, LayerOutcome::FailedClosed(_)))
        {
            return ("unavailable", Some(&r.name), Some(reason.name()), None);
        }
        if a.verdict == Verdict::Deny {
            let denied = enforced().find(|r| match r.outcome {
                LayerOutcome::Decided { decision, .. } => !decision.allowed,
                LayerOutcome::StoreFull | LayerOutcome::Cached(_) => true,
                _ => false,
            });
            return ("denied", denied.map(|r| &*r.name), None, Some(0));
        }
        if let Some((r, LayerOutcome::FailedOpen(reason))) = enforced()
            .map(|r| (r, r.outcome))
            .find(|(_, o)| matches!(o, LayerOutcome::FailedOpen(_)))
        {
            return ("failed_open", Some(&r.name), Some(reason.name()), None);
        }
        match enforced().next_back() {
            Some(r) => match r.outcome {
                LayerOutcome::Decided { decision, .. } => {
                    ("allowed", Some(&r.name), None, Some(decision.remaining))
                }
                _ => ("allowed", None, None, None),
            },
            None => ("allowed", None, None, None),
        }
    }
}
