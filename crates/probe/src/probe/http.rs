//! An HTTP limiter as a probe target: one real request per decision, over pooled real
//! connections.
//!
//! The key goes into a header (`--key-header x-api-key`) or the URL's `{key}` placeholder
//! (`http://127.0.0.1:8080/items/{key}`). A status in the denial list (429 by default) is a
//! denial; any other 2xx or 3xx an admission (redirects are not followed: each request is one
//! decision); anything else, or no answer, a request without a decision.
//!
//! Several instances of one limiter (processes sharing a store) are several URLs: each
//! request goes to one of them as the [`Spread`] says, and the history records which.

use super::{Spread, Target, fields};
use ratelab_check::probe::{Fields, Outcome};
use reqwest::header::{HeaderName, HeaderValue};
use std::sync::Arc;
use std::time::Duration;

/// How to reach the limiter.
#[derive(Clone, Debug)]
pub struct HttpSpec {
    /// The URL of each instance, with `{key}` where the key goes in the path, if it goes
    /// there.
    pub urls: Vec<String>,
    /// How requests are spread over the instances.
    pub spread: Spread,
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
    /// How to read `X-RateLimit-Reset`.
    pub reset: fields::ResetReading,
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
    urls: Vec<String>,
    spread: Spread,
    method: reqwest::Method,
    key_header: Option<HeaderName>,
    headers: Vec<(HeaderName, HeaderValue)>,
    deny: Vec<u16>,
    policy_name: Option<String>,
    reset: fields::ResetReading,
}

impl HttpTarget {
    /// Validates `spec` and builds the client; `max_connections` bounds the idle pool.
    pub fn new(spec: &HttpSpec, max_connections: usize) -> Result<HttpTarget, String> {
        if spec.urls.is_empty() || spec.urls.len() > 64 {
            return Err(format!("{} URLs: give 1 to 64", spec.urls.len()));
        }
        for url in &spec.urls {
            let parsed = reqwest::Url::parse(&url.replace("{key}", "k"))
                .map_err(|e| format!("URL {url:?}: {e}"))?;
            if parsed.scheme() != "http" {
                return Err(format!(
                    "URL {url:?}: only http:// is supported (the probe speaks plain HTTP/1.1)"
                ));
            }
        }
        let keyed = |u: &String| u.contains("{key}");
        if spec.urls.iter().any(keyed) && !spec.urls.iter().all(keyed) {
            return Err("{key} must be in every URL or in none".into());
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
            // Shorter than the keep-alive of the servers probed (Node's and Varnish's are 5 s):
            // a connection the server closes while idle must not be the one a request reuses.
            .pool_idle_timeout(Duration::from_secs(2))
            .tcp_nodelay(true)
            // A redirect followed would be a second decision behind one observation.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("HTTP client: {e}"))?;
        Ok(HttpTarget {
            inner: Arc::new(Inner {
                client,
                urls: spec.urls.clone(),
                spread: spec.spread,
                method,
                key_header,
                headers,
                deny: spec.deny_statuses.clone(),
                policy_name: spec.policy_name.clone(),
                reset: spec.reset,
            }),
        })
    }

    async fn request(&self, instance: u32, key: &str) -> Result<reqwest::Response, reqwest::Error> {
        let i = &self.inner;
        let url = &i.urls[instance as usize % i.urls.len()];
        let mut req = i
            .client
            .request(i.method.clone(), url.replace("{key}", key));
        if let Some(h) = &i.key_header {
            req = req.header(h, key);
        }
        for (k, v) in &i.headers {
            req = req.header(k, v);
        }
        req.send().await
    }

    /// One request to each instance on a key of its own, before the probe: whether every
    /// instance answers at all (the outer error), and the policy they announce
    /// (`RateLimit-Policy`'s `q` and `w`, or why that field cannot be read or why the
    /// instances disagree on it).
    pub async fn preflight(&self, key: &str) -> Result<Result<Option<(u64, u64)>, String>, String> {
        let mut announced = Vec::new();
        for (n, url) in self.inner.urls.iter().enumerate() {
            let resp = self
                .request(n as u32, key)
                .await
                .map_err(|e| format!("{url}: {}", error_chain(&e)))?;
            let get = getter(resp.headers().clone());
            announced.push(fields::announced(&get, self.inner.policy_name.as_deref()));
        }
        let first = announced.remove(0);
        if let Some(other) = announced.into_iter().find(|a| *a != first) {
            return Ok(Err(format!(
                "the instances announce different policies: {first:?} and {other:?}"
            )));
        }
        Ok(first)
    }

    /// The instances' URLs.
    pub fn urls(&self) -> &[String] {
        &self.inner.urls
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
    fn instance(&self, id: u64) -> u32 {
        self.inner.spread.pick(id, self.inner.urls.len() as u32)
    }

    async fn send(&self, id: u64, key: &str, _cost: u64) -> (Outcome, Fields) {
        self.send_to(self.instance(id), key).await
    }
}

impl HttpTarget {
    /// One request on `key` to instance `instance` (modulo the instances): its decision, or
    /// [`Outcome::Failed`], and the fields it carried.
    pub async fn send_to(&self, instance: u32, key: &str) -> (Outcome, Fields) {
        let resp = match self.request(instance, key).await {
            Ok(r) => r,
            Err(e) => return (Outcome::Failed(error_chain(&e)), Fields::default()),
        };
        let status = resp.status().as_u16();
        let get = getter(resp.headers().clone());
        let fields = fields::read(
            &get,
            &fields::Reading {
                policy: self.inner.policy_name.as_deref(),
                reset: self.inner.reset,
                now: std::time::SystemTime::now(),
            },
        );
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
