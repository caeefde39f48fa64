//! The admin plane: the metrics and the switches, served on a listener of their own, never on
//! the data plane.
//!
//! - `GET /metrics`: Prometheus text (requests by decision, fail-open by reason and limit,
//!   kill switch, breaker transitions, store latency histogram, connections);
//! - `GET /admin/kill-switch` (`on` / `off`), and `PUT` with `Content-Type:
//!   application/json` and a body of `"on"` or `"off"` (or `true` / `false`);
//! - `/admin/shadow`, the same for the global shadow switch: while it is on, every limit is
//!   evaluated and counted (`ratelab_shadow_denied_total`), and nothing is denied.
//!
//! Who may do what ([`AdminAccess`]):
//!
//! - every request must name the listener in `Host`: its IP address (any IP literal),
//!   `localhost`, or a name given with `--admin-host`, and the listener's port (421
//!   otherwise). A page whose DNS name was rebound to loopback sends its own name, and is
//!   refused, reads included;
//! - with a token configured, every request must carry `Authorization: Bearer <token>`
//!   (401 otherwise), reads included;
//! - a change must be a `PUT` with a JSON body: what a cross-site HTML form cannot send
//!   (forms send `GET` and `POST` with three content types), and what a cross-site script
//!   cannot send without a CORS preflight, which this listener never grants. A change that
//!   carries an `Origin` must come from the listener's own origin, and one that carries
//!   `Sec-Fetch-Site` must say `same-origin` or `none`;
//! - a change must also come straight from an admin address (the TCP peer, canonical;
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
/// be told from a local client: the admin listener must not be where a proxy forwards to):
/// those naming the client's address, and these.
const RELAYED: [&str; 3] = ["x-forwarded-host", "x-forwarded-proto", "via"];

/// Every header that says a proxy relayed the request.
fn forwarding() -> impl Iterator<Item = &'static str> {
    crate::ip::CLIENT_ADDRESS_HEADERS.into_iter().chain(RELAYED)
}

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
    /// Names `Host` may give besides an IP literal and `localhost` (lower case).
    pub hosts: Vec<String>,
    /// The port `Host` must give (the listener's; `None`: any port, for an app that does not
    /// know its listener).
    pub port: Option<u16>,
}

impl Default for AdminAccess {
    /// Changes from loopback only, no token, no names but IP literals and `localhost`.
    fn default() -> Self {
        AdminAccess {
            from: vec![
                "127.0.0.0/8".parse().expect("a literal range"),
                "::1".parse().expect("a literal address"),
            ],
            token: None,
            hosts: Vec::new(),
            port: None,
        }
    }
}

/// The longest body a switch's change may have (`"off"` with room for whitespace).
const MAX_SWITCH_BODY: usize = 64;

/// A change's content type: one no cross-site form can send.
const CHANGE_TYPE: &str = "application/json";

impl AdminAccess {
    /// `Err` when `Host` does not name this listener.
    fn check_host(&self, headers: &HeaderMap) -> Result<(), String> {
        let Some(host) = headers
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
        else {
            return Err("a request must name the admin listener in Host".into());
        };
        let (name, port) = split_host(host).ok_or_else(|| format!("Host {host:?} is malformed"))?;
        let named = name.parse::<std::net::IpAddr>().is_ok()
            || name.eq_ignore_ascii_case("localhost")
            || self.hosts.iter().any(|h| h.eq_ignore_ascii_case(name));
        if !named {
            return Err(format!(
                "Host {host:?} does not name the admin listener (its IP address, localhost, or \
                 an --admin-host name)"
            ));
        }
        match self.port {
            Some(want) if port.unwrap_or(80) != want => Err(format!(
                "Host {host:?} names another port than the admin listener's ({want})"
            )),
            _ => Ok(()),
        }
    }

    /// `Err` when a change was not sent as only a same-origin script or a non-browser client
    /// can send it.
    fn check_change(&self, method: &Method, headers: &HeaderMap) -> Result<(), String> {
        if method != Method::PUT {
            return Err(format!(
                "a change is a PUT with Content-Type: {CHANGE_TYPE} (not {method}): what a \
                 cross-site form cannot send"
            ));
        }
        let json = headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|t| t.trim().eq_ignore_ascii_case(CHANGE_TYPE));
        if !json {
            return Err(format!("a change needs Content-Type: {CHANGE_TYPE}"));
        }
        if let Some(origin) = headers.get(http::header::ORIGIN) {
            let host = headers.get(http::header::HOST).map(HeaderValue::as_bytes);
            let same = origin
                .as_bytes()
                .strip_prefix(b"http://")
                .is_some_and(|o| Some(o) == host);
            if !same {
                return Err(format!(
                    "a change from another origin ({}) is refused",
                    String::from_utf8_lossy(origin.as_bytes())
                ));
            }
        }
        if let Some(site) = headers.get("sec-fetch-site")
            && !matches!(site.as_bytes(), b"same-origin" | b"none")
        {
            return Err("a change from another site (Sec-Fetch-Site) is refused".into());
        }
        Ok(())
    }

    /// `None` when the request may go on; else the refusal.
    fn check(
        &self,
        peer: SocketAddr,
        method: &Method,
        headers: &HeaderMap,
    ) -> Option<Response<Body>> {
        if let Err(e) = self.check_host(headers) {
            return Some(text(StatusCode::MISDIRECTED_REQUEST, e + "\n"));
        }
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
        if let Err(e) = self.check_change(method, headers) {
            let status = if method == Method::PUT {
                StatusCode::UNSUPPORTED_MEDIA_TYPE
            } else {
                StatusCode::METHOD_NOT_ALLOWED
            };
            if headers.contains_key(http::header::ORIGIN) || headers.contains_key("sec-fetch-site")
            {
                return Some(text(StatusCode::FORBIDDEN, e + "\n"));
            }
            return Some(text(status, e + "\n"));
        }
        if let Some(h) = forwarding().find(|h| headers.contains_key(*h)) {
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

/// A `Host` value's name and port (`[::1]:9901`, `127.0.0.1`, `name:80`).
fn split_host(host: &str) -> Option<(&str, Option<u16>)> {
    let port = |p: &str| p.parse::<u16>().ok();
    if let Some(rest) = host.strip_prefix('[') {
        let (name, after) = rest.split_once(']')?;
        return match after {
            "" => Some((name, None)),
            a => Some((name, Some(port(a.strip_prefix(':')?)?))),
        };
    }
    match host.rsplit_once(':') {
        Some((name, p)) => Some((name, Some(port(p)?))),
        None => Some((host, None)),
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

/// The routes that read (`GET`) and turn (`PUT` with a JSON `"on"` or `"off"`) `switch`; a `POST`
/// is routed only to be refused with 405 and a reason.
fn switch_routes<C, E>(switch: Switch) -> axum::routing::MethodRouter<Arc<AdminState<C, E>>>
where
    C: StoreClient + 'static,
    E: Env + 'static,
{
    let set = move |State(s): State<Arc<AdminState<C, E>>>,
                    ConnectInfo(peer): ConnectInfo<SocketAddr>,
                    method: Method,
                    headers: HeaderMap,
                    body: Body| async move {
        if let Some(refused) = s.access.check(peer, &method, &headers) {
            return refused;
        }
        // Read only once the request may change the switch, and only as much as a switch's
        // body can be.
        let declared = headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|n| n > MAX_SWITCH_BODY as u64) {
            return text(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("expected a body of at most {MAX_SWITCH_BODY} bytes\n"),
            );
        }
        match axum::body::to_bytes(body, MAX_SWITCH_BODY).await {
            Ok(bytes) => switch_set(&s.gateway, &String::from_utf8_lossy(&bytes), switch),
            Err(e) => text(
                StatusCode::BAD_REQUEST,
                format!(
                    "the body could not be read whole (at most {MAX_SWITCH_BODY} bytes): {e}\n"
                ),
            ),
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
    match serde_json::from_str::<serde_json::Value>(body) {
        Ok(serde_json::Value::String(s)) if s == "on" => switch.set(gateway, true),
        Ok(serde_json::Value::String(s)) if s == "off" => switch.set(gateway, false),
        Ok(serde_json::Value::Bool(on)) => switch.set(gateway, on),
        _ => {
            return text(
                StatusCode::BAD_REQUEST,
                format!(
                    "expected a JSON body of \"on\", \"off\", true or false, got {:?}\n",
                    body.trim().chars().take(32).collect::<String>()
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

    const HOST: (&str, &str) = ("host", "127.0.0.1:9901");
    const JSON: (&str, &str) = ("content-type", "application/json");

    fn access() -> AdminAccess {
        AdminAccess {
            port: Some(9901),
            ..AdminAccess::default()
        }
    }

    #[test]
    fn a_relayed_change_is_refused_even_from_loopback() {
        let access = access();
        let local: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        assert_eq!(
            status(access.check(local, &Method::PUT, &headers(&[HOST, JSON]))),
            None
        );
        for h in forwarding() {
            let relayed = headers(&[HOST, JSON, (h, "203.0.113.9")]);
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
            status(access.check(remote, &Method::PUT, &headers(&[HOST, JSON]))),
            Some(403)
        );
        // Canonical: a `[::]` listener's IPv4 peer is an admin address.
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:5000".parse().unwrap();
        assert_eq!(
            status(access.check(mapped, &Method::PUT, &headers(&[HOST, JSON]))),
            None
        );
    }

    #[test]
    fn what_a_browser_can_send_cross_site_changes_nothing() {
        let access = access();
        let local: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let check = |m: Method, h: &[(&str, &str)]| status(access.check(local, &m, &headers(h)));
        // A cross-site form: POST, one of three content types.
        for ty in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data",
        ] {
            let form = [
                HOST,
                ("content-type", ty),
                ("origin", "http://evil.example"),
            ];
            assert_eq!(check(Method::POST, &form), Some(403), "{ty}");
            assert_eq!(
                check(Method::POST, &[HOST, ("content-type", ty)]),
                Some(405)
            );
            assert_eq!(check(Method::PUT, &[HOST, ("content-type", ty)]), Some(415));
        }
        // A cross-site script's PUT (had a preflight let it through).
        let script = [HOST, JSON, ("origin", "http://evil.example")];
        assert_eq!(check(Method::PUT, &script), Some(403));
        let site = [HOST, JSON, ("sec-fetch-site", "cross-site")];
        assert_eq!(check(Method::PUT, &site), Some(403));
        // The listener's own page, and a client that is no browser.
        let own = [
            HOST,
            JSON,
            ("origin", "http://127.0.0.1:9901"),
            ("sec-fetch-site", "same-origin"),
        ];
        assert_eq!(check(Method::PUT, &own), None);
        assert_eq!(check(Method::PUT, &[HOST, JSON]), None);
        // DNS rebinding: a foreign name in Host, reads included; another port too.
        for host in [
            "evil.example:9901",
            "evil.example",
            "127.0.0.1:80",
            "127.0.0.1",
        ] {
            assert_eq!(check(Method::GET, &[("host", host)]), Some(421), "{host}");
            assert_eq!(
                check(Method::PUT, &[("host", host), JSON]),
                Some(421),
                "{host}"
            );
        }
        assert_eq!(check(Method::GET, &[]), Some(421));
        for host in [
            "localhost:9901",
            "LOCALHOST:9901",
            "[::1]:9901",
            "10.1.2.3:9901",
        ] {
            assert_eq!(check(Method::GET, &[("host", host)]), None, "{host}");
        }
        let named = AdminAccess {
            hosts: vec!["admin.internal".into()],
            ..access.clone()
        };
        let h = headers(&[("host", "admin.internal:9901")]);
        assert_eq!(status(named.check(local, &Method::GET, &h)), None);
    }

    #[test]
    fn with_a_token_every_request_must_carry_it() {
        let token = AdminToken::parse("  s3cret-token-0123456789\n").unwrap();
        let access = AdminAccess {
            token: Some(token),
            ..access()
        };
        let local: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        for m in [Method::GET, Method::PUT] {
            assert_eq!(
                status(access.check(local, &m, &headers(&[HOST, JSON]))),
                Some(401)
            );
            let wrong = headers(&[
                HOST,
                JSON,
                ("authorization", "Bearer s3cret-token-0123456788"),
            ]);
            assert_eq!(status(access.check(local, &m, &wrong)), Some(401));
            let short = headers(&[HOST, JSON, ("authorization", "Bearer s3cret")]);
            assert_eq!(status(access.check(local, &m, &short)), Some(401));
            let right = headers(&[
                HOST,
                JSON,
                ("authorization", "bearer s3cret-token-0123456789"),
            ]);
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
