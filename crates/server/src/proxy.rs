//! The reverse proxy behind the limiter (`--upstream URL`): an admitted request is forwarded
//! to the upstream — method, path and query, headers, body streamed — and the upstream's
//! answer comes back with the RateLimit fields added (by the limiting layer in front). A
//! denied request never reaches it.
//!
//! Hop-by-hop headers (RFC 9110 §7.6.1: `Connection` and the headers it names,
//! `Keep-Alive`, `Proxy-Connection`, `TE`, `Trailer`, `Transfer-Encoding`, `Upgrade`, and
//! `Proxy-Authorization` / `Proxy-Authenticate`) are dropped in both directions; `Host` is
//! the upstream's; `X-Forwarded-For` gains the client address and `X-Forwarded-Proto` /
//! `X-Forwarded-Host` say what the client asked for. An upstream that cannot be reached is a
//! 502 with a body that says why, one that does not answer in time a 504.

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Response, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Where admitted requests go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upstream {
    /// `http://host:port`.
    authority: String,
    /// The path prefix every forwarded path is put under (no trailing `/`).
    base: String,
    /// How long the upstream has to start answering.
    timeout: Duration,
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
        if uri.query().is_some() {
            return Err(format!("upstream {url:?}: expected no query"));
        }
        Ok(Upstream {
            authority: authority.to_string(),
            base: uri.path().trim_end_matches('/').to_owned(),
            timeout,
        })
    }

    /// The upstream's URL.
    pub fn url(&self) -> String {
        format!("http://{}{}", self.authority, self.base)
    }
}

/// The proxy's state: the upstream and a pooled client.
#[derive(Clone, Debug)]
pub struct Proxy {
    upstream: Arc<Upstream>,
    client: Client<HttpConnector, Body>,
}

impl Proxy {
    /// A proxy to `upstream`.
    pub fn new(upstream: Upstream) -> Proxy {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(upstream.timeout));
        Proxy {
            upstream: Arc::new(upstream),
            client: Client::builder(TokioExecutor::new()).build(connector),
        }
    }

    /// The router that forwards every request: the inner service of the limiting layer.
    pub fn router(self) -> axum::Router {
        axum::Router::new().fallback(forward).with_state(self)
    }
}

/// The hop-by-hop headers, always dropped.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

/// Drops the hop-by-hop headers, and those `Connection` names, from `headers`.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(&HOP_BY_HOP).chain([&header::UPGRADE]) {
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

/// Forwards one admitted request and streams the upstream's answer back.
async fn forward(
    State(proxy): State<Proxy>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
) -> Response<Body> {
    let (mut parts, body) = req.into_parts();
    let up = &proxy.upstream;
    let path_and_query = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let uri = match format!("http://{}{}{path_and_query}", up.authority, up.base).parse::<Uri>() {
        Ok(u) => u,
        Err(e) => {
            return text(
                StatusCode::BAD_REQUEST,
                format!("cannot forward this path: {e}\n"),
            );
        }
    };
    let client_host = parts.headers.get(header::HOST).cloned();
    strip_hop_by_hop(&mut parts.headers);
    parts.headers.remove(header::HOST);
    let forwarded_for = match parts
        .headers
        .get("x-forwarded-for")
        .and_then(|v| v.to_str().ok())
    {
        Some(earlier) => format!("{earlier}, {}", peer.ip()),
        None => peer.ip().to_string(),
    };
    if let Ok(v) = HeaderValue::from_str(&forwarded_for) {
        parts.headers.insert("x-forwarded-for", v);
    }
    parts
        .headers
        .insert("x-forwarded-proto", HeaderValue::from_static("http"));
    if let Some(h) = client_host {
        parts.headers.insert("x-forwarded-host", h);
    }
    parts.uri = uri;
    // HTTP/1.1 to the upstream whatever the client spoke: the pooled client's own framing.
    parts.version = http::Version::HTTP_11;
    let call = proxy.client.request(http::Request::from_parts(parts, body));
    match tokio::time::timeout(up.timeout, call).await {
        Ok(Ok(resp)) => {
            let (mut parts, body) = resp.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            Response::from_parts(parts, Body::new(body))
        }
        Ok(Err(e)) => text(
            StatusCode::BAD_GATEWAY,
            format!("upstream {} unreachable: {e}\n", up.url()),
        ),
        Err(_) => text(
            StatusCode::GATEWAY_TIMEOUT,
            format!(
                "upstream {} did not answer within {} ms\n",
                up.url(),
                up.timeout.as_millis()
            ),
        ),
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
