//! The gateway over HTTP: a `tower::Layer` to put in front of any axum app, the demo app that
//! `ratelab-server` (and `ratelab serve`) runs, and the tokio [`Env`].
//!
//! The demo app answers any path with 200 when allowed and 429 when denied; it reserves no
//! path. The metrics and the switches are the admin plane's ([`crate::admin::admin_app`]),
//! served apart.
//!
//! Every answer carries `x-request-id`, the request's UUIDv7 from the gateway, which its
//! request log line carries too: ids sort by the time the requests were decided.

use crate::answer::{Answer, Verdict};
use crate::env::Env;
use crate::limits::Headers;
use crate::pipeline::Gateway;
use crate::pipeline::halves::Begun;
use crate::request::{Guard, Request};
use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use core::future::Future;
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use ratelab_core::Nanos;
use ratelab_store::StoreClient;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

/// The tokio environment: wall-clock time since the Unix epoch, and timeouts bounded by one
/// tokio timer per thread (the `deadlines` module).
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioEnv;

/// Unix time minus the monotonic reading, nanoseconds, as last read off the wall clock; and
/// the monotonic reading it was read at (0: never).
static UNIX_OFFSET: AtomicU64 = AtomicU64::new(0);
static ANCHORED_AT: AtomicU64 = AtomicU64::new(0);

/// How often [`TokioEnv::unix_at`] reads the wall clock again, so that a clock corrected
/// since (by NTP, say) is followed within this long.
const REANCHOR_NS: u64 = 1_000_000_000;

impl Env for TokioEnv {
    // `timeout` polls the call first, and a call that completes then needs no timer.
    const POLLS_FIRST: bool = true;

    fn now(&self) -> Nanos {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(Nanos::from)
            .unwrap_or(Nanos::ZERO)
    }

    fn monotonic(&self) -> Nanos {
        Nanos::from(crate::deadlines::epoch().elapsed())
    }

    /// The reading plus the wall clock's offset from the monotonic clock, read again at most
    /// once a second: one wall-clock read a second rather than one a request. (Ids stay in
    /// order across a corrected clock: the id generator never goes back.)
    fn unix_at(&self, monotonic: Nanos) -> Nanos {
        let m = monotonic.as_u64();
        let anchored = ANCHORED_AT.load(Ordering::Relaxed);
        if anchored == 0 || m.saturating_sub(anchored) >= REANCHOR_NS {
            let (wall, mono) = (self.now(), self.monotonic());
            UNIX_OFFSET.store(wall.saturating_sub(mono).as_u64(), Ordering::Relaxed);
            ANCHORED_AT.store(mono.as_u64().max(1), Ordering::Relaxed);
        }
        let offset = UNIX_OFFSET.load(Ordering::Relaxed);
        Nanos::from(Duration::from_nanos(offset.saturating_add(m)))
    }

    /// Bounded by the thread's one timer, as [`TokioEnv::timeout_from`] bounds a call.
    fn bound_sent(
        &self,
        started: Nanos,
        after: Duration,
        sent: ratelab_store::Sent,
    ) -> Result<crate::deadlines::BoundedSent, ratelab_store::Sent> {
        Ok(crate::deadlines::BoundedSent::new(started, after, sent))
    }

    fn timeout<F: Future + Send>(
        &self,
        after: Duration,
        fut: F,
    ) -> impl Future<Output = Option<F::Output>> + Send
    where
        F::Output: Send,
    {
        // A call that completes on its first poll (the in-memory store's) needs no timer: no
        // clock read, no deadline registered. Anything else is bounded by its thread's one
        // timer (`crate::deadlines`).
        crate::deadlines::within(after, fut)
    }

    /// Bounded from `started`, a reading of [`TokioEnv::monotonic`]: no clock read for the
    /// deadline.
    fn timeout_from<F: Future + Send>(
        &self,
        started: Nanos,
        after: Duration,
        fut: F,
    ) -> impl Future<Output = Option<F::Output>> + Send
    where
        F::Output: Send,
    {
        crate::deadlines::within_from(started, after, fut)
    }
}

impl Headers for HeaderMap {
    fn get(&self, name: &str) -> Option<&[u8]> {
        HeaderMap::get(self, name).map(HeaderValue::as_bytes)
    }

    fn each(&self, name: &str, f: &mut dyn FnMut(&[u8])) {
        // The API key's, looked up on every request, by its name made once: a name given as
        // text is checked and folded byte by byte at each lookup.
        let values = if name == crate::limits::API_KEY {
            self.get_all(X_API_KEY)
        } else {
            self.get_all(name)
        };
        values.iter().for_each(|v| f(v.as_bytes()));
    }

    fn each_name(&self, f: &mut dyn FnMut(&str)) {
        self.keys().for_each(|n| f(n.as_str()));
    }

    fn none_sent(&self) -> bool {
        self.is_empty()
    }

    /// As many values as names: each name once (both counts are kept by the map).
    fn none_repeated(&self) -> bool {
        self.len() == self.keys_len()
    }
}

/// The process-wide Prometheus recorder, installed on first use.
pub fn prometheus() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            // Store latency, a histogram (aggregable across gateways, unlike a summary's
            // quantiles), is counted and rendered apart ([`crate::latency`]).
            let recorder = PrometheusBuilder::new().build_recorder();
            let handle = recorder.handle();
            // Another recorder may already be installed (an embedding app's); then this handle
            // renders only what it sees, which is nothing, and says so in /metrics.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}

/// Puts a [`Gateway`] in front of an inner service.
pub struct RateLimitLayer<C, E> {
    gateway: Arc<Gateway<C, E>>,
    guard: Option<Arc<dyn Guard>>,
    /// Numbers requests for the store calls' trace ids.
    sequence: Arc<std::sync::atomic::AtomicU64>,
}

impl<C, E> Clone for RateLimitLayer<C, E> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            gateway: self.gateway.clone(),
            guard: self.guard.clone(),
            sequence: self.sequence.clone(),
        }
    }
}

impl<C, E> std::fmt::Debug for RateLimitLayer<C, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitLayer").finish_non_exhaustive()
    }
}

impl<C, E> RateLimitLayer<C, E> {
    /// A layer for `gateway`, with an optional guard.
    pub fn new(gateway: Arc<Gateway<C, E>>, guard: Option<Arc<dyn Guard>>) -> Self {
        RateLimitLayer {
            gateway,
            guard,
            sequence: Default::default(),
        }
    }
}

impl<S, C, E> tower::Layer<S> for RateLimitLayer<C, E> {
    type Service = RateLimitService<S, C, E>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimitService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`RateLimitLayer`] produces.
pub struct RateLimitService<S, C, E> {
    inner: S,
    layer: RateLimitLayer<C, E>,
}

impl<S: Clone, C, E> Clone for RateLimitService<S, C, E> {
    fn clone(&self) -> Self {
        RateLimitService {
            inner: self.inner.clone(),
            layer: self.layer.clone(),
        }
    }
}

impl<S, C, E> std::fmt::Debug for RateLimitService<S, C, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitService").finish_non_exhaustive()
    }
}

/// A plain-text answer.
pub(crate) fn text(status: StatusCode, body: String) -> Response<Body> {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(http::header::CONTENT_TYPE, TEXT_PLAIN);
    r
}

// Content types, made at compile time rather than checked byte by byte at every answer.
const TEXT_PLAIN: HeaderValue = HeaderValue::from_static("text/plain; charset=utf-8");
const PROBLEM_JSON: HeaderValue = HeaderValue::from_static("application/problem+json");

const X_REQUEST_ID: http::HeaderName = http::HeaderName::from_static("x-request-id");
// The request headers the gateway reads on every request, parsed once.
const X_API_KEY: http::HeaderName = http::HeaderName::from_static("x-api-key");

/// The header names the gateway answers with, made once: a name from the pipeline is
/// otherwise parsed again at every insertion.
fn header_name(name: &'static str) -> http::HeaderName {
    const POLICY: http::HeaderName = http::HeaderName::from_static("ratelimit-policy");
    const RATELIMIT: http::HeaderName = http::HeaderName::from_static("ratelimit");
    match name {
        "ratelimit-policy" => POLICY,
        "ratelimit" => RATELIMIT,
        "retry-after" => http::header::RETRY_AFTER,
        other => http::HeaderName::from_static(other),
    }
}

/// The type URI of the ratelimit-headers draft's problem type for a request over its quota.
pub const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";

/// A 429 whose body is an RFC 9457 problem: the draft's quota-exceeded type, with the
/// policies that were exceeded in its `violated-policies` member.
fn quota_exceeded(violated: &[&str]) -> Response<Body> {
    let mut body = serde_json::json!({
        "type": QUOTA_EXCEEDED,
        "title": "Quota Exceeded",
        "status": 429,
        "violated-policies": violated,
    });
    if violated.is_empty() {
        // Denied without a decision: the limiter's store had no room for a new key.
        body["detail"] = "the rate limiter has no room for a new key".into();
    }
    let mut r = Response::new(Body::from(format!("{body}\n")));
    *r.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    r.headers_mut()
        .insert(http::header::CONTENT_TYPE, PROBLEM_JSON);
    r
}

impl<S, C, E> tower::Service<http::Request<Body>> for RateLimitService<S, C, E>
where
    S: tower::Service<http::Request<Body>, Response = Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    C: StoreClient + 'static,
    E: Env + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        // The ready clone serves this call; the fresh clone waits for the next poll_ready.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let layer = self.layer.clone();
        let peer = req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip());
        crate::in_place::boxed(move || async move { layer.limited(peer, req, inner).await })
    }
}

impl<C, E> RateLimitLayer<C, E>
where
    C: StoreClient + 'static,
    E: Env + 'static,
{
    /// Decides `req` from the client at `peer` and answers it: `inner`'s answer when it is
    /// admitted (`inner` comes ready: polled ready by its caller), the refusal otherwise, with
    /// the request id and the RateLimit fields. With no `peer` (a server started without
    /// connection info) the answer is a 500 that says so.
    pub(crate) async fn limited<B, S>(
        &self,
        peer: Option<IpAddr>,
        req: http::Request<B>,
        mut inner: S,
    ) -> Result<Response<Body>, S::Error>
    where
        S: tower::Service<http::Request<B>, Response = Response<Body>>,
    {
        let Some(peer) = peer else {
            return Ok(text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the server was started without connection info (into_make_service_with_connect_info)\n".into(),
            ));
        };
        // The body is not borrowed while the request is decided: only the head is.
        let (mut parts, body) = req.into_parts();
        let answer = match self.head(peer, &mut parts) {
            Head::Decide(request) => self.gateway.check(request, self.guard.as_deref()).await,
            Head::Refused(refusal) => return Ok(refusal),
        };
        let resp = match refusal(&answer) {
            Some(refusal) => refusal,
            None => inner.call(http::Request::from_parts(parts, body)).await?,
        };
        Ok(finish(resp, answer))
    }

    /// Decides the request whose head is `parts`, from the client at `peer`, in this call: for
    /// a store whose calls complete at once under an environment whose timeouts poll first
    /// ([`StoreClient::IMMEDIATE`], [`Env::POLLS_FIRST`]), where the decision completes in one
    /// poll and needs no future of its own.
    pub(crate) fn decide_now(&self, peer: IpAddr, parts: &mut http::request::Parts) -> Decided {
        let request = match self.head(peer, parts) {
            Head::Decide(request) => request,
            Head::Refused(refusal) => return Decided::Refused(refusal),
        };
        let check = std::pin::pin!(self.gateway.check(request, self.guard.as_deref()));
        match check.poll(&mut Context::from_waker(std::task::Waker::noop())) {
            Poll::Ready(answer) => Decided::Answered(answer),
            // Ruled out by the two contracts above: nothing in a decision waits but the
            // store's calls, each under the environment's timeout. A store that breaks its
            // contract loses this decision half made; it is reported.
            Poll::Pending => {
                debug_assert!(false, "a decision over an immediate store waited");
                eprintln!(
                    "a store client that declares its calls complete at once \
                     (StoreClient::IMMEDIATE) waited: the request was answered 500"
                );
                Decided::Refused(text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the rate limiter's decision did not complete at once\n".into(),
                ))
            }
        }
    }

    /// The request the gateway decides for the head `parts` from `peer`, numbered for the
    /// store calls' trace ids; or the 400 (counted and logged) of a path or method the
    /// limiter would read otherwise than the application behind it ([`crate::path`]). The
    /// path is normalised in place first: the inner service forwards the path matched.
    fn head<'a>(&self, peer: IpAddr, parts: &'a mut http::request::Parts) -> Head<'a> {
        let spelled = canonical_target(parts);
        let request = self.request(peer, parts);
        match spelled {
            Ok(()) => Head::Decide(request),
            Err(e) => {
                let answer = self.gateway.refuse(request, e.0.clone());
                Head::Refused(with_id(
                    text(StatusCode::BAD_REQUEST, e.0 + "\n"),
                    answer.id,
                ))
            }
        }
    }
}

impl<C, E> RateLimitLayer<C, E>
where
    C: StoreClient + 'static,
    E: Env + 'static,
{
    /// The request the gateway sees in the head `parts` from `peer`, numbered for the store
    /// calls' trace ids.
    fn request<'a>(&self, peer: IpAddr, parts: &'a http::request::Parts) -> Request<'a> {
        request_numbered(peer, parts, self.sequence.fetch_add(1, Ordering::Relaxed))
    }

    /// The gateway.
    pub(crate) fn gateway(&self) -> &Gateway<C, E> {
        &self.gateway
    }

    /// The first half of the decision on the request whose head is `parts`, from `peer`
    /// ([`Gateway::begin`]); or the 400 of a path or method the limiter would read otherwise
    /// than the application behind it, as [`RateLimitLayer::limited`] refuses it.
    #[allow(
        clippy::result_large_err,
        reason = "matched at once by its one caller, the front; a refusal boxed would cost an allocation"
    )]
    pub(crate) fn begin(
        &self,
        peer: IpAddr,
        parts: &mut http::request::Parts,
    ) -> Result<Begun<C>, Response<Body>> {
        match self.head(peer, parts) {
            Head::Decide(request) => Ok(self.gateway.begin(&request, self.guard.as_deref())),
            Head::Refused(refusal) => Err(refusal),
        }
    }
}

/// The request the gateway sees in the head `parts` from `peer`, numbered `trace`: the
/// same request again for the second half of its decision ([`Gateway::complete`]).
pub(crate) fn request_numbered(
    peer: IpAddr,
    parts: &http::request::Parts,
    trace: u64,
) -> Request<'_> {
    let h = &parts.headers;
    Request {
        peer,
        api_key: h.get(X_API_KEY).map(HeaderValue::as_bytes),
        route: parts.uri.path(),
        method: parts.method.as_str(),
        headers: h,
        cost: 1,
        trace,
    }
}

impl<C, E> RateLimitLayer<C, E>
where
    C: StoreClient + 'static,
    E: Env + 'static,
{
    /// Refuses the request whose head is `parts`, from `peer`, with `status` and `reason`,
    /// counted and logged like any refusal (the front's 431 for a head past its bound).
    pub(crate) fn refuse_head(
        &self,
        peer: IpAddr,
        parts: &http::request::Parts,
        status: StatusCode,
        reason: String,
    ) -> Response<Body> {
        let answer =
            self.gateway
                .refuse_with(self.request(peer, parts), reason.clone(), status.as_u16());
        with_id(text(status, reason + "\n"), answer.id)
    }
}

/// Normalises `parts`' path in place ([`crate::path::normalize`]) and checks its method;
/// the query is kept as sent.
fn canonical_target(parts: &mut http::request::Parts) -> Result<(), crate::path::PathError> {
    crate::path::check_method(parts.method.as_str())?;
    // RFC 9112 §3.2: an HTTP/1.1 request has exactly one Host (or its target's authority);
    // a server must refuse it otherwise, and a proxy would be left to guess.
    let h = &parts.headers;
    let hosts = if Headers::none_repeated(h) {
        usize::from(h.contains_key(http::header::HOST))
    } else {
        h.get_all(http::header::HOST).iter().count()
    };
    if hosts > 1
        || (hosts == 0
            && parts.version == http::Version::HTTP_11
            && parts.uri.authority().is_none())
    {
        return Err(crate::path::PathError(
            "an HTTP/1.1 request needs exactly one Host header (RFC 9112 §3.2)".into(),
        ));
    }
    let path = match crate::path::normalize(parts.uri.path())? {
        std::borrow::Cow::Borrowed(_) => return Ok(()),
        std::borrow::Cow::Owned(p) => p,
    };
    let target = match parts.uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path,
    };
    let mut uri = std::mem::take(&mut parts.uri).into_parts();
    uri.path_and_query = Some(target.parse().map_err(|e| {
        crate::path::PathError(format!("the normalised path is not a valid target: {e}"))
    })?);
    parts.uri = http::Uri::from_parts(uri)
        .map_err(|e| crate::path::PathError(format!("the normalised target: {e}")))?;
    Ok(())
}

/// A request decided in the call ([`RateLimitLayer::decide_now`]).
pub(crate) enum Decided {
    /// The gateway's answer: the response is still to make.
    Answered(Answer),
    /// The response already made: a path or method refused (400), or a decision that did
    /// not complete at once (500, when a store breaks its contract).
    Refused(Response<Body>),
}

/// What the gateway makes of a request's head ([`RateLimitLayer::head`]).
enum Head<'a> {
    /// The request to decide.
    Decide(Request<'a>),
    /// The answer already made.
    Refused(Response<Body>),
}

/// The gateway's own answer to a request it did not admit; `None` when admitted (the inner
/// service answers).
pub(crate) fn refusal(answer: &Answer) -> Option<Response<Body>> {
    Some(match &answer.verdict {
        Verdict::Allow => return None,
        Verdict::Deny => quota_exceeded(&answer.violated_policies()),
        Verdict::Unavailable => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "rate limiter unavailable\n".into(),
        ),
        Verdict::BadRequest(reason) => text(StatusCode::BAD_REQUEST, format!("{reason}\n")),
        Verdict::Rejected(reason) => text(StatusCode::FORBIDDEN, format!("{reason}\n")),
    })
}

/// `resp` with the answer's fields and its request id.
pub(crate) fn finish(mut resp: Response<Body>, answer: Answer) -> Response<Body> {
    for (name, value) in answer.headers {
        if let Ok(v) = HeaderValue::try_from(value) {
            resp.headers_mut().insert(header_name(name), v);
        }
    }
    with_id(resp, answer.id)
}

/// `r` with the request id `id`.
fn with_id(mut r: Response<Body>, id: uuid::Uuid) -> Response<Body> {
    let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
    let text = id.hyphenated().encode_lower(&mut buf);
    if let Ok(v) = HeaderValue::from_str(text) {
        r.headers_mut().insert(X_REQUEST_ID, v);
    }
    r
}

/// The demo app: every path answers 200 through the limiter. Serve it with
/// `into_make_service_with_connect_info::<SocketAddr>()`; installs the metrics recorder and
/// exports the gateway's counters at zero.
pub fn app<C, E>(gateway: Arc<Gateway<C, E>>, guard: Option<Arc<dyn Guard>>) -> Router
where
    C: StoreClient + 'static,
    E: Env + 'static,
{
    let ok = answer_ok();
    app_with(gateway, guard, ok)
}

/// The demo app's inner service: 200, `ok`, whatever the request.
pub fn answer_ok<B>() -> impl tower::Service<
    http::Request<B>,
    Response = Response<Body>,
    Error = std::convert::Infallible,
    Future = impl Future<Output = Result<Response<Body>, std::convert::Infallible>> + Send + 'static,
> + Clone
+ Send
+ Sync
+ 'static {
    tower::service_fn(|_: http::Request<B>| async {
        let mut r = Response::new(Body::from("ok\n"));
        r.headers_mut()
            .insert(http::header::CONTENT_TYPE, TEXT_PLAIN);
        Ok::<_, std::convert::Infallible>(r)
    })
}

/// [`app`] with `inner` behind the limiter instead of the 200 answer (a reverse proxy, say):
/// `inner` sees only admitted requests. A service that is cheap to clone (a
/// `tower::service_fn` over shared state) costs least: the limiter clones it per request.
pub fn app_with<C, E, S>(
    gateway: Arc<Gateway<C, E>>,
    guard: Option<Arc<dyn Guard>>,
    inner: S,
) -> Router
where
    C: StoreClient + 'static,
    E: Env + 'static,
    S: tower::Service<
            http::Request<Body>,
            Response = Response<Body>,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    prometheus();
    gateway.export_zeros();
    let limited = tower::Layer::layer(&RateLimitLayer::new(gateway, guard), inner);
    Router::new().fallback_service(limited)
}

#[cfg(test)]
mod clock_tests {
    use super::*;

    #[test]
    fn unix_time_at_a_monotonic_reading_is_the_wall_clock_then() {
        let env = TokioEnv;
        for _ in 0..3 {
            let (before, at, after) = (env.now(), env.monotonic(), env.now());
            let unix = env.unix_at(at);
            let slack = Nanos::from_millis(50);
            assert!(
                unix.saturating_add(slack) >= before,
                "{unix:?} < {before:?}"
            );
            assert!(unix <= after.saturating_add(slack), "{unix:?} > {after:?}");
        }
    }
}

#[cfg(test)]
mod problem_tests {
    use super::*;

    async fn body(r: Response<Body>) -> serde_json::Value {
        let bytes = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn a_denial_names_its_policies_and_a_full_store_says_why_instead() {
        let r = quota_exceeded(&["per-key"]);
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers()["content-type"], "application/problem+json");
        let b = body(r).await;
        assert_eq!(b["type"], QUOTA_EXCEEDED);
        assert_eq!(b["violated-policies"], serde_json::json!(["per-key"]));
        assert!(b.get("detail").is_none());
        let b = body(quota_exceeded(&[])).await;
        assert_eq!(b["violated-policies"], serde_json::json!([]));
        assert!(b["detail"].as_str().unwrap().contains("no room"));
    }
}

#[cfg(test)]
mod header_tests {
    use super::*;

    /// A name sent twice, in any case, is told apart from names each sent once; the API
    /// key's values are counted however it is spelled in the lookup.
    #[test]
    fn a_repeated_name_is_seen_and_the_api_key_counted() {
        let mut h = HeaderMap::new();
        h.insert(http::header::HOST, HeaderValue::from_static("a"));
        h.insert(X_API_KEY, HeaderValue::from_static("k"));
        assert!(Headers::none_repeated(&h));
        let mut n = 0;
        Headers::each(&h, crate::limits::API_KEY, &mut |_| n += 1);
        assert_eq!(n, 1);
        h.append(
            http::HeaderName::from_static("x-api-key"),
            HeaderValue::from_static("j"),
        );
        assert!(!Headers::none_repeated(&h));
        n = 0;
        Headers::each(&h, crate::limits::API_KEY, &mut |_| n += 1);
        assert_eq!(n, 2);
        h.remove(X_API_KEY);
        h.append(http::header::HOST, HeaderValue::from_static("b"));
        let (mut parts, ()) = http::Request::new(()).into_parts();
        parts.headers = h;
        assert!(canonical_target(&mut parts).is_err(), "two Host headers");
    }
}
