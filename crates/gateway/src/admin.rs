//! The admin plane: the metrics and the switches, served on a listener of their own, never on
//! the data plane.
//!
//! - `GET /metrics`: Prometheus text (requests by decision, fail-open by reason and limit,
//!   kill switch, breaker transitions, store latency histogram, connections);
//! - `GET /admin/kill-switch` (`on` / `off`), and `PUT` or `POST` with body `on` or `off`;
//! - `/admin/shadow`, the same for the global shadow switch: while it is on, every limit is
//!   evaluated and counted (`ratelab_shadow_denied_total`), and nothing is denied.
//!
//! Who may do what ([`AdminAccess`]):
//!
//! - with a token configured, every request must carry `Authorization: Bearer <token>`
//!   (401 otherwise), reads included;
//! - a change (`PUT`, `POST`) must also come straight from an admin address (the TCP peer;
//!   loopback by default), and is refused when it carries any forwarding header
//!   (`Forwarded`, `X-Forwarded-For`, `X-Real-IP`, `Via`, …): a request relayed by a proxy is
//!   never taken to come from the proxy's own address. Forwarding headers are never read
//!   here to find a client either.
//!
//! The data plane ([`crate::front`], [`crate::http::app`]) reserves no path: `/metrics` sent
//! there is limited and answered (or proxied) like any other path, so no client of the
//! limited service can reach the switches, whatever proxy stands in front.

use crate::env::Env;
use crate::http::{prometheus, text};
use crate::ip::IpNet;
use crate::pipeline::Gateway;
use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, State};
use axum::routing::get;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode};
use metrics_exporter_prometheus::PrometheusHandle;
use ratelab_store::StoreClient;
use std::net::SocketAddr;
use std::sync::Arc;

/// The metrics endpoint's path.
pub const METRICS_PATH: &str = "/metrics";
/// The kill switch's path.
pub const KILL_SWITCH_PATH: &str = "/admin/kill-switch";
/// The global shadow switch's path.
pub const SHADOW_PATH: &str = "/admin/shadow";

/// The request headers that say a proxy relayed the request (a proxy that adds none cannot
/// be told from a local client: the admin listener must not be where a proxy forwards to).
const FORWARDING: [&str; 12] = [
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-original-forwarded-for",
    "x-real-ip",
    "x-client-ip",
    "x-cluster-client-ip",
    "true-client-ip",
    "cf-connecting-ip",
    "fastly-client-ip",
    "via",
];

/// A bearer token for the admin listener: 16 to 512 characters of RFC 6750's `b64token`
/// alphabet. Its `Debug` hides it.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken(String);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(…)")
    }
}

impl AdminToken {
    /// The shortest token accepted.
    pub const MIN_LEN: usize = 16;
    /// The longest token accepted.
    pub const MAX_LEN: usize = 512;

    /// The token in `text` (a token file's contents: surrounding whitespace is ignored).
    pub fn parse(text: &str) -> Result<AdminToken, String> {
        let t = text.trim();
        if !(Self::MIN_LEN..=Self::MAX_LEN).contains(&t.len()) {
            return Err(format!(
                "expected a token of {} to {} characters, found {}",
                Self::MIN_LEN,
                Self::MAX_LEN,
                t.len()
            ));
        }
        let b64token = |b: u8| b.is_ascii_alphanumeric() || b"-._~+/=".contains(&b);
        if let Some(at) = t.bytes().position(|b| !b64token(b)) {
            return Err(format!(
                "character {} of the token is not one of A-Z a-z 0-9 - . _ ~ + / = (RFC 6750 b64token)",
                at + 1
            ));
        }
        Ok(AdminToken(t.to_owned()))
    }

    /// Whether `header` (an `Authorization` value) carries this token, compared in time that
    /// does not depend on where the first difference is.
    fn admits(&self, header: Option<&HeaderValue>) -> bool {
        let Some(given) = header
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, t)| t.trim().as_bytes())
        else {
            return false;
        };
        let want = self.0.as_bytes();
        given.len() == want.len()
            && given
                .iter()
                .zip(want)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }
}

/// Who may use the admin listener.
#[derive(Clone, Debug)]
pub struct AdminAccess {
    /// The addresses a change may come from (the TCP peer's).
    pub from: Vec<IpNet>,
    /// The bearer token every request must carry, if any.
    pub token: Option<AdminToken>,
}

impl Default for AdminAccess {
    /// Changes from loopback only, no token.
    fn default() -> Self {
        AdminAccess {
            from: vec![
                "127.0.0.0/8".parse().expect("a literal range"),
                "::1".parse().expect("a literal address"),
            ],
            token: None,
        }
    }
}

impl AdminAccess {
    /// `None` when the request may go on; else the refusal.
    fn check(
        &self,
        peer: SocketAddr,
        method: &Method,
        headers: &HeaderMap,
    ) -> Option<Response<Body>> {
        if let Some(token) = &self.token
            && !token.admits(headers.get(http::header::AUTHORIZATION))
        {
            let mut r = text(
                StatusCode::UNAUTHORIZED,
                "the admin listener needs `Authorization: Bearer <token>`\n".into(),
            );
            r.headers_mut().insert(
                http::header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"ratelab-admin\""),
            );
            return Some(r);
        }
        if method == Method::GET || method == Method::HEAD {
            return None;
        }
        if let Some(h) = FORWARDING.iter().find(|h| headers.contains_key(**h)) {
            return Some(text(
                StatusCode::FORBIDDEN,
                format!(
                    "a request relayed by a proxy ({h}) may not change the switches: send it to \
                     the admin listener directly\n"
                ),
            ));
        }
        if !self.from.iter().any(|n| n.contains(peer.ip())) {
            return Some(text(
                StatusCode::FORBIDDEN,
                format!("{} may not change the switches\n", peer.ip()),
            ));
        }
        None
    }
}

/// State of the admin routes.
struct AdminState<C, E> {
    gateway: Arc<Gateway<C, E>>,
    metrics: PrometheusHandle,
    access: AdminAccess,
}

/// The admin plane of `gateway` ([`METRICS_PATH`], [`KILL_SWITCH_PATH`], [`SHADOW_PATH`]), for
/// `access`; serve it with `ConnectInfo<SocketAddr>` in each request's extensions (axum's
/// `into_make_service_with_connect_info`, or [`crate::front::serve`] inserting it). Installs
/// the metrics recorder and exports the gateway's counters at zero.
pub fn admin_app<C, E>(gateway: Arc<Gateway<C, E>>, access: AdminAccess) -> Router
where
    C: StoreClient + 'static,
    E: Env + 'static,
{
    let metrics = prometheus();
    gateway.export_zeros();
    let state = Arc::new(AdminState {
        gateway,
        metrics,
        access,
    });
    Router::new()
        .route(METRICS_PATH, get(metrics_text::<C, E>))
        .route(KILL_SWITCH_PATH, switch_routes(Switch::Kill))
        .route(SHADOW_PATH, switch_routes(Switch::Shadow))
        .with_state(state)
}

async fn metrics_text<C, E>(
    State(s): State<Arc<AdminState<C, E>>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    method: Method,
    headers: HeaderMap,
) -> Response<Body>
where
    C: StoreClient + 'static,
    E: Env + 'static,
{
    if let Some(refused) = s.access.check(peer, &method, &headers) {
        return refused;
    }
    let mut r = text(
        StatusCode::OK,
        s.metrics.render() + &crate::latency::render(),
    );
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    r
}

/// A switch the admin endpoints turn: the kill switch or the global shadow switch.
#[derive(Clone, Copy, Debug)]
enum Switch {
    Kill,
    Shadow,
}

impl Switch {
    fn get<C: StoreClient, E: Env>(self, gateway: &Gateway<C, E>) -> bool {
        match self {
            Switch::Kill => gateway.kill_switch(),
            Switch::Shadow => gateway.shadow(),
        }
    }

    fn set<C: StoreClient, E: Env>(self, gateway: &Gateway<C, E>, on: bool) {
        match self {
            Switch::Kill => gateway.set_kill_switch(on),
            Switch::Shadow => gateway.set_shadow(on),
        }
    }

    /// `on` or `off`, as the endpoint reports it.
    fn state<C: StoreClient, E: Env>(self, gateway: &Gateway<C, E>) -> Response<Body> {
        let state = if self.get(gateway) { "on\n" } else { "off\n" };
        text(StatusCode::OK, state.into())
    }
}

/// The routes that read (`GET`) and turn (`PUT` or `POST` with `on` or `off`) `switch`.
fn switch_routes<C, E>(switch: Switch) -> axum::routing::MethodRouter<Arc<AdminState<C, E>>>
where
    C: StoreClient + 'static,
    E: Env + 'static,
{
    let set = move |State(s): State<Arc<AdminState<C, E>>>,
                    ConnectInfo(peer): ConnectInfo<SocketAddr>,
                    method: Method,
                    headers: HeaderMap,
                    body: String| async move {
        match s.access.check(peer, &method, &headers) {
            Some(refused) => refused,
            None => switch_set(&s.gateway, &body, switch),
        }
    };
    let read = move |State(s): State<Arc<AdminState<C, E>>>,
                     ConnectInfo(peer): ConnectInfo<SocketAddr>,
                     method: Method,
                     headers: HeaderMap| async move {
        match s.access.check(peer, &method, &headers) {
            Some(refused) => refused,
            None => switch.state(&s.gateway),
        }
    };
    get(read).put(set).post(set)
}

fn switch_set<C, E>(gateway: &Gateway<C, E>, body: &str, switch: Switch) -> Response<Body>
where
    C: StoreClient + 'static,
    E: Env + 'static,
{
    match body.trim() {
        "on" => switch.set(gateway, true),
        "off" => switch.set(gateway, false),
        other => {
            return text(
                StatusCode::BAD_REQUEST,
                format!(
                    "expected a body of `on` or `off`, got {:?}\n",
                    other.chars().take(32).collect::<String>()
                ),
            );
        }
    }
    switch.state(gateway)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.insert(
                http::HeaderName::from_bytes(n.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    fn status(r: Option<Response<Body>>) -> Option<u16> {
        r.map(|r| r.status().as_u16())
    }

    #[test]
    fn a_relayed_change_is_refused_even_from_loopback() {
        let access = AdminAccess::default();
        let local: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        assert_eq!(
            status(access.check(local, &Method::PUT, &headers(&[]))),
            None
        );
        for h in FORWARDING {
            let relayed = headers(&[(h, "203.0.113.9")]);
            assert_eq!(
                status(access.check(local, &Method::PUT, &relayed)),
                Some(403),
                "{h}"
            );
            assert_eq!(
                status(access.check(local, &Method::GET, &relayed)),
                None,
                "{h}"
            );
        }
        let remote: SocketAddr = "192.0.2.1:5000".parse().unwrap();
        assert_eq!(
            status(access.check(remote, &Method::POST, &headers(&[]))),
            Some(403)
        );
    }

    #[test]
    fn with_a_token_every_request_must_carry_it() {
        let token = AdminToken::parse("  s3cret-token-0123456789\n").unwrap();
        let access = AdminAccess {
            token: Some(token),
            ..AdminAccess::default()
        };
        let local: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        for m in [Method::GET, Method::PUT] {
            assert_eq!(status(access.check(local, &m, &headers(&[]))), Some(401));
            let wrong = headers(&[("authorization", "Bearer s3cret-token-0123456788")]);
            assert_eq!(status(access.check(local, &m, &wrong)), Some(401));
            let short = headers(&[("authorization", "Bearer s3cret")]);
            assert_eq!(status(access.check(local, &m, &short)), Some(401));
            let right = headers(&[("authorization", "bearer s3cret-token-0123456789")]);
            assert_eq!(status(access.check(local, &m, &right)), None);
        }
    }

    #[test]
    fn a_token_is_long_enough_and_of_the_bearer_alphabet() {
        assert!(
            AdminToken::parse("short")
                .unwrap_err()
                .contains("16 to 512")
        );
        let bad = AdminToken::parse("abcdefghijklmnop qrs").unwrap_err();
        assert!(bad.contains("character 17"), "{bad}");
        assert_eq!(
            format!("{:?}", AdminToken::parse("abcdefghijklmnopqrs").unwrap()),
            "AdminToken(…)"
        );
    }
}
