//! An HTTP limiter as a probe target: one real request per decision, over pooled real
//! connections.
//!
//! The key goes into a header (`--key-header x-api-key`) or the URL's `{key}` placeholder
//! (`http://127.0.0.1:8080/items/{key}`). A status in the denial list (429 by default) is a
//! denial; any other 2xx or 3xx an admission (redirects are not followed: each request is one
//! decision); anything else, or no answer, a request without a decision.

use super::{Target, fields};
use ratelab_check::probe::{Fields, Outcome};
use reqwest::header::{HeaderName, HeaderValue};
use std::sync::Arc;
use std::time::Duration;

/// How to reach the limiter.
#[derive(Clone, Debug)]
pub struct HttpSpec {
    /// The URL, with `{key}` where the key goes in the path, if it goes there.
    pub url: String,
    /// The method.
    pub method: String,
    /// The header that carries the key, if any.
    pub key_header: Option<String>,
    /// Extra headers, `Name: value`.
    pub headers: Vec<String>,
    /// Statuses that mean "denied".
    pub deny_statuses: Vec<u16>,
    /// The `RateLimit` item to read, when the limiter sends several.
    pub policy_name: Option<String>,
    /// Per-request timeout.
    pub timeout: Duration,
}

/// A probe target over HTTP.
#[derive(Clone, Debug)]
pub struct HttpTarget {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: reqwest::Client,
    url: String,
    method: reqwest::Method,
    key_header: Option<HeaderName>,
    headers: Vec<(HeaderName, HeaderValue)>,
    deny: Vec<u16>,
    policy_name: Option<String>,
}

impl HttpTarget {
    /// Validates `spec` and builds the client; `max_connections` bounds the idle pool.
    pub fn new(spec: &HttpSpec, max_connections: usize) -> Result<HttpTarget, String> {
        let probe_url = spec.url.replace("{key}", "k");
        let parsed =
            reqwest::Url::parse(&probe_url).map_err(|e| format!("URL {:?}: {e}", spec.url))?;
        if parsed.scheme() != "http" {
            return Err(format!(
                "URL {:?}: only http:// is supported (the probe speaks plain HTTP/1.1)",
                spec.url
            ));
        }
        let method = reqwest::Method::from_bytes(spec.method.as_bytes())
            .map_err(|_| format!("--method {:?}: not an HTTP method", spec.method))?;
        let key_header = spec
            .key_header
            .as_deref()
            .map(|h| {
                HeaderName::from_bytes(h.as_bytes())
                    .map_err(|_| format!("--key-header {h:?}: not a header name"))
            })
            .transpose()?;
        let headers = spec
            .headers
            .iter()
            .map(|h| {
                let (name, value) = h
                    .split_once(':')
                    .ok_or_else(|| format!("--header {h:?}: expected Name: value"))?;
                Ok((
                    HeaderName::from_bytes(name.trim().as_bytes())
                        .map_err(|_| format!("--header {h:?}: bad name"))?,
                    HeaderValue::from_str(value.trim())
                        .map_err(|_| format!("--header {h:?}: bad value"))?,
                ))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let client = reqwest::Client::builder()
            .timeout(spec.timeout)
            .pool_max_idle_per_host(max_connections)
            .tcp_nodelay(true)
            // A redirect followed would be a second decision behind one observation.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("HTTP client: {e}"))?;
        Ok(HttpTarget {
            inner: Arc::new(Inner {
                client,
                url: spec.url.clone(),
                method,
                key_header,
                headers,
                deny: spec.deny_statuses.clone(),
                policy_name: spec.policy_name.clone(),
            }),
        })
    }

    async fn request(&self, key: &str) -> Result<reqwest::Response, reqwest::Error> {
        let i = &self.inner;
        let mut req = i
            .client
            .request(i.method.clone(), i.url.replace("{key}", key));
        if let Some(h) = &i.key_header {
            req = req.header(h, key);
        }
        for (k, v) in &i.headers {
            req = req.header(k, v);
        }
        req.send().await
    }

    /// One request on a key of its own, before the probe: whether the limiter answers at
    /// all (the outer error), and the policy it announces (`RateLimit-Policy`'s `q` and `w`,
    /// or why that field cannot be read).
    pub async fn preflight(&self, key: &str) -> Result<Result<Option<(u64, u64)>, String>, String> {
        let resp = self
            .request(key)
            .await
            .map_err(|e| format!("{}: {}", self.inner.url, error_chain(&e)))?;
        let get = getter(resp.headers().clone());
        Ok(fields::announced(&get, self.inner.policy_name.as_deref()))
    }
}

/// A response's fields by name, as the field readers take them.
fn getter(headers: reqwest::header::HeaderMap) -> impl Fn(&str) -> Option<String> {
    move |k: &str| {
        headers
            .get(k)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }
}

/// An error with its causes (reqwest's own message names only the outermost).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

impl Target for HttpTarget {
    async fn send(&self, _id: u64, key: &str, _cost: u64) -> (Outcome, Fields) {
        let resp = match self.request(key).await {
            Ok(r) => r,
            Err(e) => return (Outcome::Failed(error_chain(&e)), Fields::default()),
        };
        let status = resp.status().as_u16();
        let get = getter(resp.headers().clone());
        let fields = fields::read(&get, self.inner.policy_name.as_deref());
        // Read the body so the connection goes back to the pool.
        let _ = resp.bytes().await;
        let outcome = if self.inner.deny.contains(&status) {
            Outcome::Denied
        } else if (200..400).contains(&status) {
            Outcome::Allowed
        } else {
            Outcome::Failed(format!("status {status}"))
        };
        (outcome, fields)
    }
}
