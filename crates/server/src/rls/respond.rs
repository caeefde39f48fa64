//! The answer to one call: a status per descriptor, in order, from the gateway's outcomes,
//! and the fields for Envoy to add to the response.

use super::plan::Resolved;
use super::proto::envoy::config::core::v3::HeaderValue;
use super::proto::envoy::service::ratelimit::v3::RateLimitResponse;
use super::proto::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use ratelab_gateway::{Answer, LayerOutcome, Verdict};

/// The response: one status per descriptor, in order, and the fields.
pub(super) fn respond<C>(
    resolved: &[Resolved<'_, C>],
    slot: &[Option<usize>],
    answer: Option<&Answer>,
) -> RateLimitResponse {
    let mut over = false;
    let statuses = resolved
        .iter()
        .zip(slot)
        .map(|(r, s)| {
            let (Resolved::Limited { current, .. }, Some(j)) = (r, s) else {
                return DescriptorStatus {
                    code: Code::Ok as i32,
                    current_limit: None,
                    limit_remaining: if matches!(r, Resolved::Unlimited) {
                        u32::MAX
                    } else {
                        0
                    },
                    duration_until_reset: None,
                };
            };
            let result = answer.and_then(|a| a.limits.iter().find(|l| l.planned == *j));
            let (denied, decision) = match result.map(|l| (l.shadow, l.outcome)) {
                Some((shadow, LayerOutcome::Decided { decision, .. }))
                | Some((shadow, LayerOutcome::Cached(decision))) => {
                    (!decision.allowed && !shadow, Some(decision))
                }
                Some((shadow, LayerOutcome::StoreFull)) => (!shadow, None),
                // Failed open, or not consulted after another descriptor's denial (which
                // already makes the answer OVER_LIMIT).
                _ => (false, None),
            };
            over |= denied;
            DescriptorStatus {
                code: if denied { Code::OverLimit } else { Code::Ok } as i32,
                current_limit: Some(current.clone().into_owned()),
                limit_remaining: decision
                    .map_or(0, |d| u32::try_from(d.remaining).unwrap_or(u32::MAX)),
                duration_until_reset: decision.map(|d| {
                    let t = std::time::Duration::from(d.reset_after);
                    prost_types::Duration {
                        seconds: i64::try_from(t.as_secs()).unwrap_or(i64::MAX),
                        nanos: t.subsec_nanos() as i32,
                    }
                }),
            }
        })
        .collect();
    // The gateway's verdict also covers a denial answered from its denial cache.
    over |= answer.is_some_and(|a| a.verdict == Verdict::Deny);
    RateLimitResponse {
        overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
        statuses,
        response_headers_to_add: answer.map_or(Vec::new(), |a| {
            a.headers
                .iter()
                .map(|(k, v)| HeaderValue {
                    key: (*k).to_owned(),
                    value: v.clone(),
                })
                .collect()
        }),
        request_headers_to_add: Vec::new(),
    }
}

/// The answer when planned item `over` costs more than its limit's capacity: that
/// descriptor (and any on the same bucket) OVER_LIMIT, no store called, nothing spent.
pub(super) fn beyond_capacity<C>(
    resolved: &[Resolved<'_, C>],
    slot: &[Option<usize>],
    over: usize,
) -> RateLimitResponse {
    let statuses = resolved
        .iter()
        .zip(slot)
        .map(|(r, s)| {
            let current = match r {
                Resolved::Limited { current, .. } => Some(current.clone().into_owned()),
                _ => None,
            };
            DescriptorStatus {
                code: if *s == Some(over) {
                    Code::OverLimit
                } else {
                    Code::Ok
                } as i32,
                current_limit: current,
                limit_remaining: if matches!(r, Resolved::Unlimited) {
                    u32::MAX
                } else {
                    0
                },
                duration_until_reset: None,
            }
        })
        .collect();
    RateLimitResponse {
        overall_code: Code::OverLimit as i32,
        statuses,
        response_headers_to_add: Vec::new(),
        request_headers_to_add: Vec::new(),
    }
}
