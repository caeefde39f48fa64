//! The response fields of a request's enforced limits: `RateLimit-Policy` and `RateLimit`,
//! each joined as one list, and the latest `Retry-After` a denying limit announced.

/// The enforced limits' response fields, joined as one list each.
#[derive(Debug, Default)]
pub(super) struct Fields {
    pub(super) policies: String,
    pub(super) ratelimit: String,
    /// The latest wait a denying limit announced, whole seconds.
    pub(super) retry_after: Option<u64>,
}

impl Fields {
    pub(super) fn add(&mut self, policy: &str, ratelimit: String) {
        if self.policies.is_empty() {
            self.policies = policy.to_owned();
            // The first item is the list: no copy.
            self.ratelimit = ratelimit;
        } else {
            for (list, item) in [
                (&mut self.policies, policy),
                (&mut self.ratelimit, &*ratelimit),
            ] {
                list.push_str(", ");
                list.push_str(item);
            }
        }
    }
}
