//! Envoy's rate limit service: `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`
//! over gRPC (`--grpc-listen`), deciding descriptors against the domains of the limits file
//! or of envoyproxy/ratelimit YAML files ([`config`]).
//!
//! A request names a domain and descriptors; each descriptor's entries walk its domain's
//! tree, as envoyproxy/ratelimit walks it: at each level the child with the entry's key and
//! value, else the child with the key and no value; the descriptor's limit is that of the node
//! its last entry reaches. A descriptor that reaches no limited node is OK and counted in
//! `ratelab_rls_descriptors_total{result="unmatched"}`. On a configured domain, a
//! descriptor's `limit` override replaces the tree's limit with a token bucket of
//! `requests_per_unit` per `unit` (in a key space of its own per override). Its cost is its
//! own `hits_addend` when above 0, else the request's when above 0, else 1.
//!
//! Every limited descriptor of one call is decided by the gateway's pipeline in one
//! all-or-nothing step ([`Gateway::check_planned`]): a denial by one spends nothing at the
//! others. A cost above a limit's capacity can never be admitted: such a call is answered
//! OVER_LIMIT before any store call, so it spends nothing anywhere. The answer has one status per descriptor, in order, and the `RateLimit-Policy`,
//! `RateLimit` and (when over the limit) `Retry-After` fields in `response_headers_to_add`.
//! When the store fails, the call is answered per `--grpc-failure-mode`: `ok` (fail open,
//! counted as for HTTP) or the gRPC status `UNAVAILABLE`, so that Envoy's own
//! `failure_mode_deny` decides. The gateway's timeout is one deadline for the whole call.

pub mod config;

use crate::limit_set::{fingerprint, fingerprint_text, limit};
use crate::stores::Stores;
use arc_swap::ArcSwap;
use config::{Descriptor, Domain, Leaf, Unit};
use proto::envoy::service::ratelimit::v3::rate_limit_response::{
    RateLimit, rate_limit::Unit as ProtoUnit,
};
use proto::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use ratelab_core::{Algorithm, Policy};
use ratelab_gateway::http::TokioEnv;
use ratelab_gateway::limits::{KeyBy, Limit, LimitSpec, Mode};
use ratelab_gateway::{Gateway, GatewayConfig, Verdict};
use ratelab_store::StoreClient as _;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

mod plan;
pub mod proto;
mod respond;

use plan::{Resolved, bucket_key, plan};

/// The most distinct `limit` overrides kept per server; a call bringing a new one beyond
/// them is refused with `RESOURCE_EXHAUSTED`.
pub const MAX_OVERRIDES: usize = 1024;
/// The most descriptors in one call.
pub const MAX_DESCRIPTORS_PER_CALL: usize = 64;
/// The most entries in one descriptor.
pub const MAX_ENTRIES: usize = 16;

/// What a tree node limits, with its limit over the store.
#[derive(Debug)]
enum Node<C> {
    None,
    Unlimited,
    Limited {
        limit: Arc<Limit<C>>,
        current: RateLimit,
    },
}

/// One domain's tree over the store.
#[derive(Debug)]
struct Tree<C> {
    key: String,
    value: Option<String>,
    node: Node<C>,
    children: Vec<Tree<C>>,
}

/// Every domain's tree, over the store: what a reload replaces in one swap.
#[derive(Debug)]
pub struct Tables<C> {
    domains: BTreeMap<String, Vec<Tree<C>>>,
}

impl<C> Tables<C> {
    /// Every limit of every tree.
    pub fn limits(&self) -> Vec<Arc<Limit<C>>> {
        fn walk<C>(trees: &[Tree<C>], out: &mut Vec<Arc<Limit<C>>>) {
            for t in trees {
                if let Node::Limited { limit, .. } = &t.node {
                    out.push(limit.clone());
                }
                walk(&t.children, out);
            }
        }
        let mut out = Vec::new();
        for trees in self.domains.values() {
            walk(trees, &mut out);
        }
        out
    }

    /// How many domains it serves.
    pub fn len(&self) -> usize {
        self.domains.len()
    }

    /// Whether it serves none.
    pub fn is_empty(&self) -> bool {
        self.domains.is_empty()
    }
}

/// The `current_limit` of a limit running `policy` (envoyproxy/ratelimit's own `unit` when it
/// came from one of theirs).
fn current_limit(name: &str, policy: &Policy, unit: Option<(u32, Unit)>) -> RateLimit {
    let (requests_per_unit, unit) = match unit {
        Some((n, u)) => (n, proto_unit(Some(u))),
        None => {
            let quota = policy.quota();
            let secs = quota.window.as_secs_ceil();
            let exact = quota.window == ratelab_core::Nanos::from_secs(secs);
            (
                u32::try_from(quota.limit).unwrap_or(u32::MAX),
                proto_unit(exact.then(|| Unit::of_seconds(secs)).flatten()),
            )
        }
    };
    RateLimit {
        name: name.to_owned(),
        requests_per_unit,
        unit: unit as i32,
    }
}

fn proto_unit(u: Option<Unit>) -> ProtoUnit {
    match u {
        None => ProtoUnit::Unknown,
        Some(Unit::Second) => ProtoUnit::Second,
        Some(Unit::Minute) => ProtoUnit::Minute,
        Some(Unit::Hour) => ProtoUnit::Hour,
        Some(Unit::Day) => ProtoUnit::Day,
        Some(Unit::Week) => ProtoUnit::Week,
        Some(Unit::Month) => ProtoUnit::Month,
        Some(Unit::Year) => ProtoUnit::Year,
    }
}

/// The key prefix of a limit: a fingerprint of its domain, its place and its policy, so a
/// changed limit starts new buckets.
fn prefix(domain: &str, place: &str, policy: &Policy) -> String {
    format!(
        "ratelab:rls:{:08x}{:08x}:",
        fingerprint_text(&format!("{domain}\u{0}{place}")),
        fingerprint(policy)
    )
}

/// Builds the domains' trees over `stores`.
pub async fn build<S: Stores>(
    stores: &S,
    domains: &[Domain],
    config: &GatewayConfig,
) -> Result<Tables<S::Client>, String> {
    let mut out = BTreeMap::new();
    for d in domains {
        let mut trees = Vec::with_capacity(d.descriptors.len());
        for desc in &d.descriptors {
            trees.push(Box::pin(tree(stores, &d.name, desc, "", config)).await?);
        }
        out.insert(d.name.clone(), trees);
    }
    Ok(Tables { domains: out })
}

async fn tree<S: Stores>(
    stores: &S,
    domain: &str,
    d: &Descriptor,
    place: &str,
    config: &GatewayConfig,
) -> Result<Tree<S::Client>, String> {
    let place = format!(
        "{place}/{}={}",
        d.key,
        d.value.as_deref().map_or("*".into(), |v| format!("={v}"))
    );
    let node = match &d.leaf {
        Leaf::None => Node::None,
        Leaf::Unlimited => Node::Unlimited,
        Leaf::Limited {
            name,
            policy,
            shadow,
            unit,
            ..
        } => {
            let client = stores
                .client(&prefix(domain, &place, policy), *policy)
                .await
                .map_err(|e| format!("domain {domain}, limit {name}: {e}"))?;
            let mut spec = LimitSpec::new(
                ratelab_core::headers::PolicyName::new(name).map_err(|e| e.to_string())?,
                KeyBy::Global,
            );
            if *shadow {
                spec.mode = Mode::Shadow;
            }
            Node::Limited {
                current: current_limit(name, policy, *unit),
                limit: limit(config, spec, client),
            }
        }
    };
    let mut children = Vec::with_capacity(d.children.len());
    for c in &d.children {
        children.push(Box::pin(tree(stores, domain, c, &place, config)).await?);
    }
    Ok(Tree {
        key: d.key.clone(),
        value: d.value.clone(),
        node,
        children,
    })
}

/// The limits of the overrides seen so far: by domain, requests per unit and unit.
type Overrides<C> = BTreeMap<(String, u32, i32), Arc<Limit<C>>>;

/// The rate limit service over the gateway's pipeline.
pub struct Rls<S: Stores> {
    gateway: Arc<Gateway<S::Client, TokioEnv>>,
    tables: Arc<ArcSwap<Tables<S::Client>>>,
    stores: S,
    config: GatewayConfig,
    fail_closed: bool,
    overrides: Mutex<Overrides<S::Client>>,
    sequence: AtomicU64,
}

impl<S: Stores> std::fmt::Debug for Rls<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rls")
            .field("fail_closed", &self.fail_closed)
            .finish_non_exhaustive()
    }
}

fn invalid(msg: String) -> tonic::Status {
    tonic::Status::invalid_argument(msg)
}

impl<S: Stores> Rls<S> {
    /// A service deciding with `gateway`'s pipeline over `tables`, creating override limits
    /// on `stores`; `fail_closed` answers `UNAVAILABLE` when the store fails.
    pub fn new(
        gateway: Arc<Gateway<S::Client, TokioEnv>>,
        tables: Arc<ArcSwap<Tables<S::Client>>>,
        stores: S,
        config: GatewayConfig,
        fail_closed: bool,
    ) -> Self {
        for result in ["matched", "unmatched", "unlimited"] {
            metrics::counter!("ratelab_rls_descriptors_total", "result" => result).increment(0);
        }
        metrics::describe_counter!(
            "ratelab_rls_descriptors_total",
            "Descriptors of ShouldRateLimit calls, by result: matched a limit, matched none \
             (answered OK), or matched an unlimited one."
        );
        Rls {
            gateway,
            tables,
            stores,
            config,
            fail_closed,
            overrides: Mutex::new(BTreeMap::new()),
            sequence: AtomicU64::new(0),
        }
    }

    /// The limit of an override on a configured domain, made on first use.
    async fn override_limit(
        &self,
        domain: &str,
        requests_per_unit: u32,
        unit: i32,
    ) -> Result<(Arc<Limit<S::Client>>, RateLimit), tonic::Status> {
        use proto::envoy::r#type::v3::RateLimitUnit as U;
        let unit_of = match U::try_from(unit) {
            Ok(U::Second) => Unit::Second,
            Ok(U::Minute) => Unit::Minute,
            Ok(U::Hour) => Unit::Hour,
            Ok(U::Day) => Unit::Day,
            Ok(U::Week) => Unit::Week,
            Ok(U::Month) => Unit::Month,
            Ok(U::Year) => Unit::Year,
            _ => {
                return Err(invalid(format!(
                    "limit override: unit {unit}: expected SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR"
                )));
            }
        };
        if requests_per_unit == 0 {
            return Err(invalid(
                "limit override: requests_per_unit 0: expected at least 1".into(),
            ));
        }
        let name = format!("override-{requests_per_unit}-per-{unit_of:?}");
        let policy = config::unit_policy(requests_per_unit, unit_of).map_err(invalid)?;
        let current = current_limit(&name, &policy, Some((requests_per_unit, unit_of)));
        let id = (domain.to_owned(), requests_per_unit, unit);
        if let Some(l) = self.overrides.lock().expect("overrides").get(&id) {
            return Ok((l.clone(), current));
        }
        // A store that cannot run the override (beyond the Redis script's exact range) is
        // the caller's choice of limit: a bad request.
        let client = self
            .stores
            .client(&prefix(domain, "override", &policy), policy)
            .await
            .map_err(|e| invalid(format!("limit override: {e}")))?;
        let spec = LimitSpec::new(
            ratelab_core::headers::PolicyName::new(&name)
                .map_err(|e| tonic::Status::internal(e.to_string()))?,
            KeyBy::Global,
        );
        let made = limit(&self.config, spec, client);
        let mut all = self.overrides.lock().expect("overrides");
        if let Some(l) = all.get(&id) {
            return Ok((l.clone(), current));
        }
        if all.len() >= MAX_OVERRIDES {
            return Err(tonic::Status::resource_exhausted(format!(
                "more than {MAX_OVERRIDES} distinct limit overrides"
            )));
        }
        all.insert(id, made.clone());
        Ok((made, current))
    }

    /// Resolves descriptor `i` of `req` against `trees` (its domain's, if configured).
    async fn resolve<'t>(
        &self,
        req: &RateLimitRequest,
        i: usize,
        trees: Option<&'t [Tree<S::Client>]>,
    ) -> Result<Resolved<'t, S::Client>, tonic::Status> {
        let d = &req.descriptors[i];
        if d.entries.is_empty() || d.entries.len() > MAX_ENTRIES {
            return Err(invalid(format!(
                "descriptors[{i}]: {} entries: expected 1 to {MAX_ENTRIES}",
                d.entries.len()
            )));
        }
        if let Some(j) = d.entries.iter().position(|e| e.key.is_empty()) {
            return Err(invalid(format!(
                "descriptors[{i}].entries[{j}]: the key is empty"
            )));
        }
        let cost = match (d.hits_addend, req.hits_addend) {
            (Some(n), _) if n > 0 => n,
            (_, n) if n > 0 => u64::from(n),
            _ => 1,
        };
        // An unknown domain limits nothing, overrides included (as envoyproxy/ratelimit).
        let Some(mut level) = trees else {
            return Ok(Resolved::Unmatched);
        };
        if let Some(o) = &d.limit {
            let (limit, current) = self
                .override_limit(&req.domain, o.requests_per_unit, o.unit)
                .await?;
            return Ok(Resolved::Limited {
                limit,
                current: std::borrow::Cow::Owned(current),
                key: bucket_key(d),
                cost,
            });
        }
        let mut reached = None;
        for e in &d.entries {
            let exact = level
                .iter()
                .find(|t| t.key == e.key && t.value.as_deref() == Some(&e.value));
            let Some(t) =
                exact.or_else(|| level.iter().find(|t| t.key == e.key && t.value.is_none()))
            else {
                return Ok(Resolved::Unmatched);
            };
            level = &t.children;
            reached = Some(t);
        }
        Ok(match reached.map(|t| &t.node) {
            Some(Node::Limited { limit, current }) => Resolved::Limited {
                limit: limit.clone(),
                current: std::borrow::Cow::Borrowed(current),
                key: bucket_key(d),
                cost,
            },
            Some(Node::Unlimited) => Resolved::Unlimited,
            _ => Resolved::Unmatched,
        })
    }

    /// Decides one call.
    pub async fn decide(
        &self,
        req: &RateLimitRequest,
        peer: IpAddr,
    ) -> Result<RateLimitResponse, tonic::Status> {
        if req.domain.is_empty() {
            return Err(invalid("the domain is empty".into()));
        }
        if req.descriptors.is_empty() || req.descriptors.len() > MAX_DESCRIPTORS_PER_CALL {
            return Err(invalid(format!(
                "{} descriptors: expected 1 to {MAX_DESCRIPTORS_PER_CALL}",
                req.descriptors.len()
            )));
        }
        let tables = self.tables.load_full();
        let trees = tables.domains.get(&req.domain).map(Vec::as_slice);
        let mut resolved = Vec::with_capacity(req.descriptors.len());
        for i in 0..req.descriptors.len() {
            resolved.push(self.resolve(req, i, trees).await?);
        }
        let (planned, slot) = plan(&resolved);
        // A cost no enforced bucket can ever admit: OVER_LIMIT with nothing spent anywhere.
        // A shadow limit never answers OVER_LIMIT (it is measured as any other request), nor
        // does any limit under the global shadow switch or the kill switch (which lets the
        // request through unmeasured).
        let enforcing = !self.gateway.kill_switch() && !self.gateway.shadow();
        if let Some(j) = planned.iter().position(|p| {
            enforcing
                && p.limit.spec().mode != Mode::Shadow
                && p.cost > p.limit.client().algorithm().quota().limit
        }) {
            return Ok(respond::beyond_capacity(&resolved, &slot, j));
        }
        let trace = self.sequence.fetch_add(1, Ordering::Relaxed);
        let route = format!("/rls/{}", req.domain);
        let answer = if planned.is_empty() {
            None
        } else {
            Some(
                self.gateway
                    .check_planned(&planned, (peer, &route), trace, self.fail_closed)
                    .await,
            )
        };
        if answer.as_ref().map(|a| &a.verdict) == Some(&Verdict::Unavailable) {
            return Err(tonic::Status::unavailable(
                "the rate limit store is unavailable",
            ));
        }
        Ok(respond::respond(&resolved, &slot, answer.as_ref()))
    }
}

#[tonic::async_trait]
impl<S: Stores> RateLimitService for Rls<S> {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let peer = request
            .remote_addr()
            .map_or(IpAddr::from([0, 0, 0, 0]), |a| a.ip());
        let req = request.into_inner();
        self.decide(&req, peer).await.map(tonic::Response::new)
    }
}
