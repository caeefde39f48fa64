//! Named limits: which requests a limit applies to (its [`Selector`]), which bucket each one
//! counts in ([`KeyBy`]), what it costs ([`Cost`]), and whether it is enforced or only
//! measured ([`Mode`]).
//!
//! A gateway holds a [`LimitSet`]: every limit whose selector matches a request is checked, in
//! the set's order. Built by hand ([`crate::Gateway::new`]'s per-IP and per-key pair) or from
//! a limits file (`ratelab-server`), and replaced whole while serving
//! ([`crate::Gateway::replace_limits`]): a request decides against the set it started with.
//!
//! A request is *planned* against the set before any store is called: the limits it matches,
//! the key and cost of each. An unreadable key or cost refuses the request (400) before any
//! limit has spent anything.

use crate::breaker::{BreakerConfig, SharedBreaker};
use crate::denial_cache::DenialCache;
use crate::ip::{IpNet, edge_network};
pub use crate::request::{Headers, NoHeaders};
use crate::request::{Request, same_when_folded};
use ratelab_core::Algorithm;
use ratelab_core::headers::{PolicyFields, PolicyName};
use ratelab_store::{Key, StoreClient};
use std::net::IpAddr;
use std::sync::Arc;

/// The name of the per-IP limit [`crate::Gateway::new`] builds.
pub const PER_IP: &str = "per-ip";
/// The name of the per-key limit [`crate::Gateway::new`] builds.
pub const PER_KEY: &str = "per-key";
/// The most limits one set holds: names are metric labels, and their number must stay small.
pub const MAX_LIMITS: usize = 256;

/// Which requests a limit applies to: all of its conditions hold (an absent one always does).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    /// The path (normalised: [`crate::path`]) starts with this, ASCII case aside.
    pub route_prefix: Option<String>,
    /// The method is one of these (upper case; `GET` covers `HEAD`); empty: any method.
    pub methods: Vec<String>,
    /// This header is sent, and when a value is given, has exactly that value.
    pub header: Option<(String, Option<String>)>,
    /// The client address is in one of these ranges; empty: any client.
    pub clients: Vec<IpNet>,
}

impl Selector {
    /// Whether the request, from client address `ip`, meets every condition.
    pub fn matches(&self, req: &Request<'_>, ip: IpAddr) -> bool {
        let route = self
            .route_prefix
            .as_deref()
            .is_none_or(|p| starts_with_ignoring_case(req.route, p));
        // HEAD is GET without the body (RFC 9110 §9.3.2), and frameworks answer it with the
        // GET handler: a limit on GET holds for HEAD too.
        let method = self.methods.is_empty()
            || self
                .methods
                .iter()
                .any(|m| m == req.method || (m == "GET" && req.method == "HEAD"));
        let header =
            self.header
                .as_ref()
                .is_none_or(|(name, value)| match (req.headers.get(name), value) {
                    (None, _) => false,
                    (Some(_), None) => true,
                    (Some(got), Some(want)) => got == want.as_bytes(),
                });
        let ip = ip.to_canonical();
        let client = self.clients.is_empty() || self.clients.iter().any(|n| n.contains(ip));
        route && method && header && client
    }
}

/// Whether `path` starts with `prefix`, ASCII case aside ([`crate::path`]: an application
/// that routes without regard to case must not see `/API/` escape `/api/`).
pub fn starts_with_ignoring_case(path: &str, prefix: &str) -> bool {
    path.len() >= prefix.len()
        && path.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
}

/// What one bucket of a limit is: requests with the same key share one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyBy {
    /// The client's address (IPv6 clients by their network, see
    /// [`crate::GatewayConfig::ipv6_prefix`]).
    ClientIp,
    /// The `x-api-key` header ([`Request::api_key`]); a request without one is not counted.
    ApiKey,
    /// A header's value; a request without the header is not counted.
    Header(String),
    /// One bucket for every request the selector matches.
    Global,
}

/// What a request costs at a limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cost {
    /// The request's own cost ([`Request::cost`]: 1 over HTTP).
    Request,
    /// A constant.
    Fixed(u64),
    /// A header's value, an integer from 1 to `max`; `default` when the header is absent.
    Header {
        /// The header.
        name: String,
        /// The cost of a request without it.
        default: u64,
        /// The largest cost it may claim.
        max: u64,
    },
}

/// Whether a limit's denials refuse the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A denial is a 429.
    Enforce,
    /// Evaluated and counted (`ratelab_shadow_denied_total`), but the request goes through
    /// and the limit shows in no response field: a new limit's dry run.
    Shadow,
}

/// A limit without its store: everything the pipeline needs to know to apply it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitSpec {
    /// Its name, in `RateLimit-Policy`, problem bodies, the request log and metric labels.
    pub name: PolicyName,
    /// Which requests it applies to.
    pub selector: Selector,
    /// What a bucket is.
    pub key_by: KeyBy,
    /// What a request costs.
    pub cost: Cost,
    /// Enforced or shadow.
    pub mode: Mode,
}

impl LimitSpec {
    /// A limit on every request, enforced, at the request's own cost.
    pub fn new(name: PolicyName, key_by: KeyBy) -> LimitSpec {
        LimitSpec {
            name,
            selector: Selector::default(),
            key_by,
            cost: Cost::Request,
            mode: Mode::Enforce,
        }
    }
}

/// One limit: its spec over a store client, with its own circuit breaker.
#[derive(Debug)]
pub struct Limit<C> {
    pub(crate) spec: LimitSpec,
    /// The name, shared with every answer that names the limit.
    name: Arc<str>,
    /// The same name as a metric label, shared without copying.
    pub(crate) label: metrics::SharedString,
    pub(crate) client: C,
    pub(crate) breaker: SharedBreaker,
    /// Its local denial cache, if it has one.
    pub(crate) cache: Option<DenialCache>,
    /// Its store-latency histogram (its name's, [`crate::latency`]).
    latency: Arc<crate::latency::Histogram>,
    /// Its response fields' fixed parts, rendered on first use.
    fields: std::sync::OnceLock<PolicyFields>,
}

impl<C: StoreClient> Limit<C> {
    /// Its response fields' fixed parts: its name and its algorithm's quota.
    pub(crate) fn policy_fields(&self) -> &PolicyFields {
        self.fields
            .get_or_init(|| PolicyFields::new(&self.spec.name, self.client.algorithm().quota()))
    }
}

impl<C> Limit<C> {
    /// `spec` over `client`, whose algorithm is the limit's.
    pub fn new(spec: LimitSpec, client: C, breaker: BreakerConfig) -> Limit<C> {
        let name = Arc::<str>::from(spec.name.as_str());
        Limit {
            latency: crate::latency::for_limit(&name),
            label: metrics::SharedString::from(name.clone()),
            name,
            spec,
            client,
            breaker: SharedBreaker::new(breaker),
            cache: None,
            fields: std::sync::OnceLock::new(),
        }
    }

    /// Records one store call's latency, `nanos` nanoseconds, in its histogram.
    pub(crate) fn record_latency(&self, nanos: u64) {
        self.latency.record(nanos);
    }

    /// The same limit with a local denial cache of `keys` keys (none for 0).
    pub fn with_denial_cache(mut self, keys: usize) -> Limit<C> {
        self.cache = (keys > 0).then(|| DenialCache::new(keys));
        self
    }

    /// The spec.
    pub fn spec(&self) -> &LimitSpec {
        &self.spec
    }

    /// The store client.
    pub fn client(&self) -> &C {
        &self.client
    }

    /// The limit's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn name_arc(&self) -> Arc<str> {
        self.name.clone()
    }
}

/// The limits a gateway applies, in order. Limits are shared, so a new set can keep an
/// unchanged limit's store and breaker.
pub type LimitSet<C> = Vec<Arc<Limit<C>>>;

/// One limit a request is checked against: the limit, the bucket's key in the limit's key
/// space, and what the request costs there. [`crate::Gateway::check`] plans these from an
/// HTTP request; a front end with its own model of requests (Envoy's rate limit service)
/// plans them itself and calls [`crate::Gateway::check_planned`].
#[derive(Debug)]
pub struct Planned<'s, C> {
    /// The limit.
    pub limit: &'s Arc<Limit<C>>,
    /// The bucket.
    pub key: Key,
    /// The request's cost at it.
    pub cost: u64,
}

/// A request's planned limits: the first two (the default pair, and most sets a request
/// matches) held in place, with no allocation of their own.
pub(crate) type PlannedList<'s, C> = smallvec::SmallVec<[Planned<'s, C>; 2]>;

/// The headers `spec` reads: its selector's, its key's, its cost's.
fn headers_read(spec: &LimitSpec) -> impl Iterator<Item = &str> {
    let selector = spec.selector.header.as_ref().map(|(n, _)| n.as_str());
    let key = match &spec.key_by {
        KeyBy::ApiKey => Some(API_KEY),
        KeyBy::Header(n) => Some(n.as_str()),
        KeyBy::ClientIp | KeyBy::Global => None,
    };
    let cost = match &spec.cost {
        Cost::Header { name, .. } => Some(name.as_str()),
        Cost::Request | Cost::Fixed(_) => None,
    };
    selector.into_iter().chain(key).chain(cost)
}

/// The API key's header, read for every request (the guard and the request log read it too).
pub const API_KEY: &str = "x-api-key";

/// `Err` naming the header when a header the limits (or the API key) read was sent more than
/// once, in another spelling a framework folds into it, or named by a `Connection` field (a
/// proxy drops it): the limiter would count one value and the application behind it might
/// read another, or none.
pub(crate) fn unambiguous<C>(set: &LimitSet<C>, headers: &dyn Headers) -> Result<(), String> {
    if headers.none_sent() {
        return Ok(());
    }
    let read = || std::iter::once(API_KEY).chain(set.iter().flat_map(|l| headers_read(&l.spec)));
    // No name sent twice (nearly every request): none to count. Otherwise each name read
    // is looked up once, however many limits read it (the API key, nearly always).
    let counted = if headers.none_repeated() {
        Vec::new()
    } else {
        let mut names: Vec<&str> = read().collect();
        names.sort_unstable();
        names.dedup();
        names
    };
    for name in counted {
        let mut n = 0;
        headers.each(name, &mut |_| n += 1);
        if n > 1 {
            return Err(format!(
                "{name} was sent {n} times: the rate limiter keys on it, so it must be sent once"
            ));
        }
    }
    // Only a name with `_` on one side or the other can be folded into another: requests
    // without one (nearly all) skip the comparison.
    // (Names are short: a loop over their bytes, not a search's set-up.)
    let has_underscore = |s: &str| s.bytes().any(|b| b == b'_');
    let underscore_read = read().any(has_underscore);
    let mut folded = None;
    let mut connection = false;
    headers.each_name(&mut |sent| {
        connection |= sent == "connection";
        if folded.is_none()
            && (underscore_read || has_underscore(sent))
            && let Some(name) = read().find(|r| *r != sent && same_when_folded(r, sent))
        {
            folded = Some(format!(
                "{sent} is another spelling of {name}, which the rate limiter keys on \
                 (frameworks read both as one header): send {name} only"
            ));
        }
    });
    if folded.is_none() && connection {
        folded = dropped_by_a_proxy(read, headers);
    }
    folded.map_or(Ok(()), Err)
}

/// An error naming a header the limits read (`read`) that a `Connection` field names: a
/// proxy drops every header `Connection` names (RFC 9110 §7.6.1), so the application behind
/// it would not see what the limiter counted.
fn dropped_by_a_proxy<'a, I: Iterator<Item = &'a str>>(
    read: impl Fn() -> I,
    headers: &dyn Headers,
) -> Option<String> {
    let mut named = None;
    headers.each("connection", &mut |value| {
        let tokens = value.split(|b| *b == b',').map(<[u8]>::trim_ascii);
        for token in tokens.filter_map(|t| std::str::from_utf8(t).ok()) {
            if named.is_none()
                && let Some(name) = read().find(|r| same_when_folded(r, token))
            {
                named = Some(format!(
                    "Connection names {name}, which the rate limiter keys on: a proxy drops \
                     it, and the application would not see what the limiter counted"
                ));
            }
        }
    });
    named
}

/// Every limit of `set` that applies to `req` from `ip`, with its key and cost; `Err` names
/// the header or key an enforced limit could not read. A shadow limit (or every limit, under
/// the global shadow switch: `shadow_all`) that cannot read its own is left out: it never
/// refuses a request.
pub(crate) fn plan<'s, C>(
    set: &'s LimitSet<C>,
    req: &Request<'_>,
    ip: IpAddr,
    api_key: Option<&str>,
    ipv6_prefix: u8,
    shadow_all: bool,
) -> Result<PlannedList<'s, C>, String> {
    let mut planned = PlannedList::new();
    for limit in set {
        if !limit.spec.selector.matches(req, ip) {
            continue;
        }
        match plan_one(limit, req, ip, api_key, ipv6_prefix) {
            Ok(Some(p)) => planned.push(p),
            Ok(None) => {}
            Err(_) if shadow_all || limit.spec.mode == Mode::Shadow => {}
            Err(e) => return Err(e),
        }
    }
    Ok(planned)
}

/// `limit`'s key and cost for `req`: `None` when the request lacks the key's header.
fn plan_one<'s, C>(
    limit: &'s Arc<Limit<C>>,
    req: &Request<'_>,
    ip: IpAddr,
    api_key: Option<&str>,
    ipv6_prefix: u8,
) -> Result<Option<Planned<'s, C>>, String> {
    let spec = &limit.spec;
    // A client's value may be a whole key (1 to MAX_KEY_LEN bytes, as documented); the
    // kind's tag rides on top of it, bounded apart (`Key::prefixed`).
    let tagged = Key::tagged;
    let key = match &spec.key_by {
        KeyBy::ClientIp => Key::from_string(format!("ip:{}", edge_network(ip, ipv6_prefix))),
        KeyBy::ApiKey => match api_key {
            Some(k) => tagged("key:", k),
            None => return Ok(None),
        },
        KeyBy::Header(name) => match req.headers.get(name) {
            Some(v) => match std::str::from_utf8(v) {
                Ok(v) => tagged("h:", v),
                Err(_) => return Err(format!("{name} is not valid UTF-8")),
            },
            None => return Ok(None),
        },
        KeyBy::Global => Key::new("global"),
    };
    let key = key.map_err(|e| match &spec.key_by {
        KeyBy::ApiKey => format!("x-api-key: {e}"),
        KeyBy::Header(name) => format!("{name}: {e}"),
        _ => format!("limit {}: {e}", spec.name.as_str()),
    })?;
    let cost = match &spec.cost {
        Cost::Request => req.cost,
        Cost::Fixed(c) => *c,
        Cost::Header { name, default, max } => match req.headers.get(name) {
            None => *default,
            Some(v) => std::str::from_utf8(v)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .filter(|c| (1..=*max).contains(c))
                .ok_or_else(|| format!("{name}: expected an integer cost from 1 to {max}"))?,
        },
    };
    Ok(Some(Planned { limit, key, cost }))
}
