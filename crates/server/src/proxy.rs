//! The reverse proxy behind the limiter (`--upstream URL`): an admitted request is forwarded
//! to the upstream — method, path and query, headers, body streamed — and the upstream's
//! answer comes back with the RateLimit fields added (by the limiting layer in front). A
//! denied request never reaches it.
//!
//! Hop-by-hop headers (RFC 9110 §7.6.1: `Connection` and the headers it names,
//! `Keep-Alive`, `Proxy-Connection`, `TE`, `Trailer`, `Transfer-Encoding`, `Upgrade`, and
//! `Proxy-Authorization` / `Proxy-Authenticate`) are dropped in both directions; `Host` is
//! the upstream's. What the upstream learns of the client follows the gateway's one rule
//! ([`ratelab_gateway::ip`]): every header naming the client's address that the client sent
//! (`Forwarded`, `X-Forwarded-For`, `X-Real-IP`, `True-Client-IP` and the others of
//! [`ratelab_gateway::ip::CLIENT_ADDRESS_HEADERS`], in any spelling with `_` for `-`) is dropped, and
//! `X-Forwarded-For` is set to the chain the
//! limiter read — from a trusted proxy, the entries of the header named by
//! `--client-ip-header`, all its lines; from any other peer, none — followed by the peer's
//! address. From a trusted proxy its `X-Forwarded-Proto` / `-Host` are kept; from any other
//! peer they are replaced by `http` and the `Host` it asked for. So the rightmost entry the
//! upstream sees that is not a trusted proxy is the client the limiter counted, and a client
//! cannot choose the address the upstream sees. An upstream that cannot be reached is a 502, one that does not
//! send its headers in time a 504; their bodies do not name the upstream (its address stays
//! internal), and the detail goes to stderr.
//!
//! Sockets to the upstream are bounded, idle ones in the pool included
//! ([`crate::upstream_conns`]): at the bound a request waits up to the connect timeout for
//! one, then is answered 503 with `Retry-After: 1`.
//!
//! A request body is read under bounds ([`crate::body`]): one declared or found longer than
//! `--max-body-bytes` is a 413, one that stops arriving for the header-read timeout (shorter
//! by default than the upstream's own timeout, which covers the upload too) a 408, and the
//! upstream sees that request cut short.

use crate::body::{BodyLimits, Bounded, Tripped};
use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Response, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use ratelab_gateway::conns::Phase;
use ratelab_gateway::ip::{Hop, forwarding_chain, is_trusted, names_client_address};
use ratelab_gateway::same_when_folded;
use ratelab_gateway::{ClientIpHeader, IpNet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// The default bound on a forwarded request's body: 10 MiB.
pub const DEFAULT_MAX_BODY_BYTES: u64 = 10 << 20;
/// The default bound on sockets to the upstream, when the open-file limit does not set one
/// ([`crate::config`]).
pub const DEFAULT_UPSTREAM_SOCKETS: usize = 10_032;
/// The most idle sockets the pool keeps to the upstream: the rest are closed when their
/// request is answered. The budget counts them: a data listener of D connections has
/// D + UPSTREAM_IDLE upstream sockets.
pub const UPSTREAM_IDLE: usize = 32;

/// Where admitted requests go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upstream {
    /// `http://host:port`.
    authority: String,
    /// The path prefix every forwarded path is put under (no trailing `/`).
    base: String,
    /// How long the upstream has to start answering.
    timeout: Duration,
    /// The bounds on a forwarded request's body.
    body: BodyLimits,
    /// The most sockets open to the upstream at once, in use or idle
    /// ([`crate::upstream_conns`]).
    sockets: usize,
}

impl Upstream {
    /// Parses `http://host[:port][/base]`; the upstream has `timeout` to send its headers.
    pub fn parse(url: &str, timeout: Duration) -> Result<Upstream, String> {
        let uri: Uri = url
            .parse()
            .map_err(|e| format!("upstream {url:?}: {e}: expected http://host[:port][/path]"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => {
                return Err(format!(
                    "upstream {url:?}: https upstreams are not supported: expected http:// (put TLS in front of the upstream's network, not in ratelab)"
                ));
            }
            _ => {
                return Err(format!(
                    "upstream {url:?}: expected http://host[:port][/path]"
                ));
            }
        }
        let Some(authority) = uri.authority() else {
            return Err(format!("upstream {url:?}: expected a host"));
        };
        if authority.as_str().contains('@') {
            return Err(format!(
                "upstream {url:?}: expected no user or password in the URL"
            ));
        }
        if uri.query().is_some() {
            return Err(format!("upstream {url:?}: expected no query"));
        }
        Ok(Upstream {
            authority: authority.to_string(),
            base: uri.path().trim_end_matches('/').to_owned(),
            timeout,
            body: BodyLimits {
                max_bytes: DEFAULT_MAX_BODY_BYTES,
                gap: ratelab_gateway::conns::ConnLimits::HEADER_READ_TIMEOUT,
            },
            sockets: DEFAULT_UPSTREAM_SOCKETS,
        })
    }

    /// The same upstream, with at most `sockets` sockets open to it at once.
    pub fn with_max_sockets(mut self, sockets: usize) -> Upstream {
        self.sockets = sockets.max(1);
        self
    }

    /// The most sockets open to it at once.
    pub fn max_sockets(&self) -> usize {
        self.sockets
    }

    /// The same upstream, its requests' bodies read under `body`.
    pub fn with_body_limits(mut self, body: BodyLimits) -> Upstream {
        self.body = body;
        self
    }

    /// The upstream's URL.
    pub fn url(&self) -> String {
        format!("http://{}{}", self.authority, self.base)
    }
}

/// The proxy's state: the upstream, a pooled client, and the peers whose forwarding
/// headers are believed.
#[derive(Clone, Debug)]
pub struct Proxy {
    upstream: Arc<Upstream>,
    client: Client<crate::upstream_conns::Bounded, Body>,
    trusted: Arc<[IpNet]>,
    header: ClientIpHeader,
}

/// The longest the proxy waits to connect: an upstream that does not accept is a 502 soon,
/// not a 504 at the whole timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

impl Proxy {
    /// A proxy to `upstream`, believing `header` from `trusted` peers only.
    pub fn new(upstream: Upstream, trusted: Vec<IpNet>, header: ClientIpHeader) -> Proxy {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let connect_timeout = upstream.timeout.min(CONNECT_TIMEOUT);
        connector.set_connect_timeout(Some(connect_timeout));
        let connector =
            crate::upstream_conns::Bounded::new(connector, upstream.sockets, connect_timeout);
        Proxy {
            client: Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(UPSTREAM_IDLE)
                .build(connector),
            upstream: Arc::new(upstream),
            trusted: trusted.into(),
            header,
        }
    }

    /// The service that forwards every request (its body streamed as hyper reads it): the
    /// inner service of the server's front, cloned per request as cheaply as the proxy
    /// itself. Admitted requests reach it with the client's address as `ConnectInfo`.
    pub fn service(
        self,
    ) -> impl tower::Service<
        http::Request<hyper::body::Incoming>,
        Response = Response<Body>,
        Error = std::convert::Infallible,
        Future = impl Send + 'static,
    > + Clone
    + Send
    + Sync
    + 'static {
        tower::service_fn(move |req: http::Request<hyper::body::Incoming>| {
            let proxy = self.clone();
            async move { Ok(forward(proxy, req.map(Body::new)).await) }
        })
    }
}

/// The hop-by-hop headers (RFC 9110 §7.6.1), always dropped: a limit may not read one.
pub(crate) const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Drops the hop-by-hop headers, and those every `Connection` field names, from `headers`.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b','))
        .filter_map(|n| HeaderName::from_bytes(n.trim_ascii()).ok())
        .collect();
    for name in &named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

fn text(status: StatusCode, body: String) -> Response<Body> {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// The forwarding headers kept from a trusted proxy, replaced from any other peer.
const PROTO_AND_HOST: [&str; 2] = ["x-forwarded-proto", "x-forwarded-host"];

/// Whether `name` names the client's address in any spelling, or is one of
/// [`PROTO_AND_HOST`] spelled with `_` for `-` (CGI and WSGI read `x_real_ip` as `X-Real-IP`).
fn client_written(name: &HeaderName) -> bool {
    let name = name.as_str();
    names_client_address(name)
        || (name.contains('_') && PROTO_AND_HOST.iter().any(|h| same_when_folded(h, name)))
}

/// Sets what the upstream learns of the client (see the module docs): `earlier`, the chain
/// the limiter read (empty unless the peer is `trusted`), then the peer.
fn forwarding_headers(headers: &mut HeaderMap, peer: SocketAddr, earlier: &[Hop], trusted: bool) {
    let host = headers.get(header::HOST).cloned();
    let written: Vec<HeaderName> = headers
        .keys()
        .filter(|n| client_written(n))
        .cloned()
        .collect();
    for name in written {
        headers.remove(name);
    }
    if !trusted {
        for name in PROTO_AND_HOST {
            headers.remove(name);
        }
    }
    let chain = earlier
        .iter()
        .map(|h| match h {
            Hop::Addr(ip) => ip.to_string(),
            Hop::Unnamed => "unknown".to_owned(),
        })
        .chain([peer.ip().to_canonical().to_string()])
        .collect::<Vec<_>>()
        .join(", ");
    if let Ok(v) = HeaderValue::from_str(&chain) {
        headers.insert("x-forwarded-for", v);
    }
    if !headers.contains_key("x-forwarded-proto") {
        headers.insert("x-forwarded-proto", HeaderValue::from_static("http"));
    }
    if let (false, Some(h)) = (headers.contains_key("x-forwarded-host"), host) {
        headers.insert("x-forwarded-host", h);
    }
    headers.remove(header::HOST);
}

/// The answer to a body longer than `max` bytes.
fn too_large(max: u64) -> Response<Body> {
    text(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the request body is larger than {max} bytes\n"),
    )
}

/// Forwards one admitted request and streams the upstream's answer back.
async fn forward(proxy: Proxy, req: Request) -> Response<Body> {
    let Some(peer) = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0)
    else {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the server was started without connection info\n".into(),
        );
    };
    let (mut parts, body) = req.into_parts();
    let up = &proxy.upstream;
    let path_and_query = match parts.uri.path_and_query().map(|p| p.as_str()) {
        Some(p) if p.starts_with('/') => p,
        // `OPTIONS *` and other non-path targets are not forwarded.
        _ => return text(StatusCode::BAD_REQUEST, "expected a path\n".into()),
    };
    let uri = match format!("http://{}{}{path_and_query}", up.authority, up.base).parse::<Uri>() {
        Ok(u) => u,
        Err(e) => {
            return text(
                StatusCode::BAD_REQUEST,
                format!("cannot forward this path: {e}\n"),
            );
        }
    };
    let trusted = is_trusted(&proxy.trusted, peer.ip());
    // The chain the limiter read, read before the hop-by-hop headers go: a `Connection`
    // field naming the forwarding header must not erase it.
    let earlier = match trusted {
        true => forwarding_chain(proxy.header, &parts.headers).unwrap_or_default(),
        false => Vec::new(),
    };
    strip_hop_by_hop(&mut parts.headers);
    forwarding_headers(&mut parts.headers, peer, &earlier, trusted);
    parts.uri = uri;
    // HTTP/1.1 to the upstream whatever the client spoke: the pooled client's own framing.
    parts.version = http::Version::HTTP_11;
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > up.body.max_bytes) {
        return too_large(up.body.max_bytes);
    }
    let tripped = Tripped::default();
    let phase = parts.extensions.get::<Phase>().cloned();
    let body = Body::new(Bounded::new(body, up.body, tripped.clone()).marking(phase));
    let call = proxy.client.request(http::Request::from_parts(parts, body));
    match tokio::time::timeout(up.timeout, call).await {
        Ok(Ok(resp)) => {
            let (mut parts, body) = resp.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            Response::from_parts(parts, Body::new(body))
        }
        Ok(Err(e)) => {
            if tripped.too_large() {
                return too_large(up.body.max_bytes);
            }
            if tripped.too_slow() {
                return text(
                    StatusCode::REQUEST_TIMEOUT,
                    "the request body stopped arriving\n".into(),
                );
            }
            if crate::upstream_conns::is_full(&e) {
                let mut r = text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the upstream is busy: every connection to it is in use\n".into(),
                );
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                return r;
            }
            if tripped.malformed() {
                return text(
                    StatusCode::BAD_REQUEST,
                    "the request body is malformed (its chunked framing could not be read)\n"
                        .into(),
                );
            }
            eprintln!("ratelab-server: upstream {} unreachable: {e}", up.url());
            text(StatusCode::BAD_GATEWAY, "upstream unreachable\n".into())
        }
        Err(_) => {
            eprintln!(
                "ratelab-server: upstream {} sent no answer within {} ms",
                up.url(),
                up.timeout.as_millis()
            );
            text(
                StatusCode::GATEWAY_TIMEOUT,
                "upstream did not answer in time\n".into(),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_urls_are_checked() {
        let t = Duration::from_secs(1);
        let u = Upstream::parse("http://127.0.0.1:9000/base/", t).unwrap();
        assert_eq!(u.url(), "http://127.0.0.1:9000/base");
        assert!(
            Upstream::parse("https://example.com", t)
                .unwrap_err()
                .contains("https")
        );
        assert!(Upstream::parse("ftp://x", t).is_err());
        assert!(
            Upstream::parse("http://x/?a=b", t)
                .unwrap_err()
                .contains("no query")
        );
        assert!(Upstream::parse("not a url", t).is_err());
        assert!(
            Upstream::parse("http://u:p@x", t)
                .unwrap_err()
                .contains("no user")
        );
    }

    #[test]
    fn hop_by_hop_headers_and_those_connection_names_are_dropped() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("close, x-secret"),
        );
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(header::TE, HeaderValue::from_static("trailers"));
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert("x-kept", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1, "{h:?}");
        assert!(h.contains_key("x-kept"));
    }
}
