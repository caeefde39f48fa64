//! The gateway behind a real HTTP server on a loopback port, driven by a real HTTP client.

use ratelab_core::{Nanos, Policy, TokenBucket};
use ratelab_gateway::admin::{AdminAccess, admin_app};
use ratelab_gateway::http::{TokioEnv, app};
use ratelab_gateway::{Env, Gateway, GatewayConfig};
use ratelab_store::{LocalClient, MemoryStore};
use reqwest::StatusCode;
use std::net::SocketAddr;
use std::sync::Arc;

type Clock = fn() -> Nanos;
type Local = LocalClient<Policy, Clock>;

fn wall() -> Nanos {
    TokioEnv.now()
}

fn client_of(capacity: u64, per_sec: u64) -> Local {
    client_with(TokenBucket::per_second(capacity, per_sec).unwrap())
}

/// A client of a store of its own, running `bucket`.
fn client_with(bucket: TokenBucket) -> Local {
    LocalClient::new(
        Arc::new(MemoryStore::new(Policy::TokenBucket(bucket))),
        wall as Clock,
    )
}

/// Starts a server with the given limits; returns its base URL and gateway.
async fn start(
    per_ip: (u64, u64),
    per_key: (u64, u64),
    config: GatewayConfig,
) -> (String, Arc<Gateway<Local, TokioEnv>>) {
    let gw = Arc::new(Gateway::new(
        config,
        Some(client_of(per_ip.0, per_ip.1)),
        Some(client_of(per_key.0, per_key.1)),
        TokioEnv,
    ));
    let url = serve(gw.clone()).await;
    (url, gw)
}

/// Serves `gw`'s demo app on a free loopback port; returns its base URL.
async fn serve<C: ratelab_store::StoreClient + 'static>(gw: Arc<Gateway<C, TokioEnv>>) -> String {
    serve_router(app(gw, None)).await
}

/// Serves `gw`'s admin plane (changes from loopback) on a free loopback port of its own;
/// returns its base URL.
async fn serve_admin<C: ratelab_store::StoreClient + 'static>(
    gw: Arc<Gateway<C, TokioEnv>>,
) -> String {
    serve_router(admin_app(gw, AdminAccess::default())).await
}

/// Serves `router` with connection info on a free loopback port; returns its base URL.
async fn serve_router(router: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            router.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    format!("http://{addr}")
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .unwrap()
}

fn header(r: &reqwest::Response, name: &str) -> Option<String> {
    r.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
}

/// Parses a RateLimit field into (name, r, t) per item, with an RFC 9651 parser.
fn ratelimit_items(value: &str) -> Vec<(String, i64, i64)> {
    let list: sfv::List = sfv::Parser::new(value)
        .parse()
        .expect("RateLimit parses as an sf-list");
    list.iter()
        .map(|e| {
            let sfv::ListEntry::Item(item) = e else {
                panic!("inner list")
            };
            let get = |k: &str| {
                item.params
                    .iter()
                    .find(|(key, _)| key.as_str() == k)
                    .and_then(|(_, v)| v.as_integer())
                    .map(i64::from)
                    .unwrap_or_else(|| panic!("{k} missing in {value}"))
            };
            (
                item.bare_item.as_string().unwrap().as_str().to_owned(),
                get("r"),
                get("t"),
            )
        })
        .collect()
}

#[tokio::test]
async fn denies_after_capacity_and_admits_after_retry_after() {
    let (url, _) = start((1000, 1000), (3, 1), GatewayConfig::default()).await;
    let c = http();
    let get = || {
        c.get(format!("{url}/api/thing"))
            .header("x-api-key", "alice")
            .send()
    };
    for i in 0..3 {
        let r = get().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "request {i}");
        let items = ratelimit_items(&header(&r, "ratelimit").unwrap());
        let key = items.iter().find(|i| i.0 == "per-key").unwrap();
        assert_eq!(key.1, 2 - i, "remaining counts down");
        let policy = header(&r, "ratelimit-policy").unwrap();
        let parsed: sfv::List = sfv::Parser::new(&policy).parse().unwrap();
        assert_eq!(parsed.len(), 2, "per-ip and per-key policies: {policy}");
        assert!(header(&r, "x-request-id").is_some());
    }
    let denied = get().await.unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = header(&denied, "retry-after").unwrap().parse().unwrap();
    assert!(retry >= 1);
    let items = ratelimit_items(&header(&denied, "ratelimit").unwrap());
    let key = items.iter().find(|i| i.0 == "per-key").unwrap();
    assert_eq!(key.1, 0);
    assert!(
        retry as i64 >= key.2,
        "Retry-After {retry} is not earlier than t = {}",
        key.2
    );
    assert_eq!(
        problem(denied).await["violated-policies"],
        serde_json::json!(["per-key"]),
        "{items:?}"
    );
    tokio::time::sleep(std::time::Duration::from_secs(retry)).await;
    let again = get().await.unwrap();
    assert_eq!(
        again.status(),
        StatusCode::OK,
        "waiting Retry-After admits the retry"
    );
}

#[tokio::test]
async fn edge_denials_do_not_spend_per_key_quota() {
    // Per-IP allows 2, per-key 5: the third request is stopped at the edge.
    let (url, gw) = start((2, 1), (5, 1), GatewayConfig::default()).await;
    let c = http();
    for _ in 0..2 {
        assert_eq!(
            c.get(&url)
                .header("x-api-key", "bob")
                .send()
                .await
                .unwrap()
                .status(),
            200
        );
    }
    let r = c.get(&url).header("x-api-key", "bob").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let items = ratelimit_items(&header(&r, "ratelimit").unwrap());
    assert_eq!(items.len(), 1, "only the edge layer answered: {items:?}");
    assert_eq!(items[0].0, "per-ip");
    assert_eq!(gw.stats().snapshot().denied, 1);
    assert_eq!(
        problem(r).await["violated-policies"],
        serde_json::json!(["per-ip"])
    );
}

/// A 429's body as the RFC 9457 problem it must be: its media type, the draft's
/// quota-exceeded type, status 429; returns the parsed object.
async fn problem(r: reqwest::Response) -> serde_json::Value {
    assert_eq!(
        header(&r, "content-type").as_deref(),
        Some("application/problem+json")
    );
    let body: serde_json::Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(
        body["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(body["status"], 429);
    body
}

/// Statuses of three requests claiming three different clients in `X-Forwarded-For`.
async fn statuses_from_three_forwarded_clients(c: &reqwest::Client, url: &str) -> Vec<u16> {
    let mut codes = Vec::new();
    for i in 0..3 {
        let r = c
            .get(url)
            .header("x-forwarded-for", format!("203.0.113.{i}"))
            .send()
            .await
            .unwrap();
        codes.push(r.status().as_u16());
    }
    codes
}

#[tokio::test]
async fn spoofed_forwarding_headers_are_ignored_unless_from_a_trusted_proxy() {
    let (url, _) = start((2, 1), (100, 1), GatewayConfig::default()).await;
    let c = http();
    // Untrusted peer (127.0.0.1 is not configured as a proxy): a new X-Forwarded-For per
    // request does not buy a new bucket.
    let codes = statuses_from_three_forwarded_clients(&c, &url).await;
    assert_eq!(codes, [200, 200, 429]);

    let trusted = GatewayConfig {
        trusted_proxies: vec!["127.0.0.1".parse().unwrap()],
        ..GatewayConfig::default()
    };
    let (url, _) = start((2, 1), (100, 1), trusted).await;
    let codes = statuses_from_three_forwarded_clients(&c, &url).await;
    assert_eq!(
        codes,
        [200, 200, 200],
        "from a trusted proxy, each client has its own bucket"
    );
    let r = c
        .get(&url)
        .header("x-forwarded-for", "not an address")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r.text().await.unwrap().contains("X-Forwarded-For"));
}

#[tokio::test]
async fn ipv6_clients_behind_a_trusted_proxy_share_a_bucket_per_64() {
    let trusted = GatewayConfig {
        trusted_proxies: vec!["127.0.0.1".parse().unwrap()],
        ..GatewayConfig::default()
    };
    let (url, _) = start((2, 1), (100, 1), trusted).await;
    let c = http();
    let status = |addr: &'static str| {
        let (c, url) = (c.clone(), url.clone());
        async move {
            c.get(&url)
                .header("x-forwarded-for", addr)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    // Three addresses in 2001:db8:1:2::/64: one bucket of 2. Another /64: a bucket of its own.
    let mut codes = Vec::new();
    for addr in ["2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2:ffff::3"] {
        codes.push(status(addr).await);
    }
    assert_eq!(codes, [200, 200, 429], "rotating addresses in one /64");
    assert_eq!(status("2001:db8:1:3::1").await, 200, "the next /64");
}

#[tokio::test]
async fn malformed_keys_get_400_with_a_reason() {
    let (url, gw) = start((1000, 1000), (10, 1), GatewayConfig::default()).await;
    let c = http();
    let long = "k".repeat(300);
    let r = c.get(&url).header("x-api-key", long).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r.text().await.unwrap().contains("expected at most 256"));
    let binary = reqwest::header::HeaderValue::from_bytes(&[0xff, 0xfe, b'a']).unwrap();
    let r = c
        .get(&url)
        .header("x-api-key", binary)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r.text().await.unwrap().contains("not valid UTF-8"));
    assert_eq!(gw.stats().snapshot().bad_request, 2);
    // The server is still serving.
    assert_eq!(c.get(&url).send().await.unwrap().status(), StatusCode::OK);
}

fn counter(metrics: &str, name: &str, label: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(name) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn kill_switch_bypasses_limiting_and_metrics_count_it() {
    let (url, gw) = start((1000, 1000), (1, 1), GatewayConfig::default()).await;
    let admin = serve_admin(gw.clone()).await;
    let c = http();
    let scrape = || async {
        c.get(format!("{admin}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    let before = scrape().await;
    let get = || c.get(&url).header("x-api-key", "carol").send();
    assert_eq!(get().await.unwrap().status(), 200);
    assert_eq!(get().await.unwrap().status(), 429);

    let r = c
        .put(format!("{admin}/admin/kill-switch"))
        .header("content-type", "application/json")
        .body("\"on\"")
        .send()
        .await
        .unwrap();
    assert_eq!(
        (r.status().as_u16(), r.text().await.unwrap()),
        (200, "on\n".into())
    );
    assert!(gw.kill_switch());
    for _ in 0..3 {
        let r = get().await.unwrap();
        assert_eq!(r.status(), 200, "limiting is off");
        assert!(header(&r, "ratelimit").is_none(), "no limit was consulted");
    }
    assert_eq!(gw.stats().snapshot().bypassed, 3);
    let r = c
        .put(format!("{admin}/admin/kill-switch"))
        .header("content-type", "application/json")
        .body("\"maybe\"")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    c.put(format!("{admin}/admin/kill-switch"))
        .header("content-type", "application/json")
        .body("\"off\"")
        .send()
        .await
        .unwrap();
    assert_eq!(get().await.unwrap().status(), 429, "limiting is back");

    // The recorder is process-wide and other tests run alongside: counters only grow, so
    // check they grew by at least what this test did.
    let after = scrape().await;
    let grew = |name, label| counter(&after, name, label) - counter(&before, name, label);
    assert!(
        grew("ratelab_requests_total", "decision=\"bypassed\"") >= 3.0,
        "{after}"
    );
    assert!(grew("ratelab_requests_total", "decision=\"denied\"") >= 2.0);
    assert!(grew("ratelab_requests_total", "decision=\"allowed\"") >= 1.0);
    assert!(
        after.contains("ratelab_store_latency_seconds"),
        "store latency histogram: {after}"
    );
}

/// A store that fails every call: ordinary routes fail open (allowed, counted by reason),
/// a fail-closed route answers 503.
#[tokio::test]
async fn failing_store_fails_open_except_on_fail_closed_routes() {
    use ratelab_store::faulty::{FaultPlan, FaultyClient};
    let broken = |cap| {
        let plan = FaultPlan {
            error: 1.0,
            ..FaultPlan::default()
        };
        FaultyClient::new(client_of(cap, 1), plan, 1)
    };
    let config = GatewayConfig {
        fail_closed_routes: vec!["/payments".into()],
        ..GatewayConfig::default()
    };
    let gw = Arc::new(Gateway::new(
        config,
        Some(broken(100)),
        Some(broken(1)),
        TokioEnv,
    ));
    let url = serve(gw.clone()).await;
    let admin = serve_admin(gw.clone()).await;
    let c = http();
    for _ in 0..3 {
        let r = c
            .get(format!("{url}/orders"))
            .header("x-api-key", "erin")
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status(),
            200,
            "failed open, even beyond the per-key capacity of 1"
        );
    }
    let r = c
        .get(format!("{url}/payments/new"))
        .header("x-api-key", "erin")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(&r, "retry-after").as_deref(), Some("1"));
    // However the route is spelled, it fails closed.
    for spelled in [
        "//payments/new",
        "/%70ayments/new",
        "/PAYMENTS/new",
        "/./payments",
    ] {
        let r = c
            .get(format!("{url}{spelled}"))
            .header("x-api-key", "erin")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE, "{spelled}");
    }
    let s = gw.stats().snapshot();
    // Three requests, two layers each, all failing open; the fail-closed route stops at the
    // edge, in each of its five spellings.
    assert_eq!((s.fail_open_error, s.fail_closed), (6, 5));
    let metrics = c
        .get(format!("{admin}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        counter(&metrics, "ratelab_fail_open_total", "reason=\"error\"") >= 6.0,
        "{metrics}"
    );
}

/// Serves `gw` on the server's own front (not axum's) on a free loopback port; returns its
/// base URL.
async fn serve_front<C: ratelab_store::StoreClient + 'static>(
    gw: Arc<Gateway<C, TokioEnv>>,
) -> String {
    use ratelab_gateway::conns::{ConnLimits, Connections};
    use ratelab_gateway::front::{FrontEnd, Writes, serve};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let front = FrontEnd::new(gw, None, ratelab_gateway::http::answer_ok());
    tokio::spawn(async move {
        let forever = std::future::pending::<()>();
        let conns = Connections::new("data", ConnLimits::default());
        serve(
            listener,
            Writes::Flat,
            conns,
            |peer, phase| front.connection(peer, phase),
            forever,
        )
        .await;
    });
    format!("http://{addr}")
}

/// The front decides a request over an in-process store in the call itself (its calls
/// complete at once), and over any other store in a future it awaits. The two ways answer
/// the same requests alike: status, body and every field but the date and the request id
/// (present in both), with the RateLimit items' `t` allowed one second apart (each request
/// reaches the two servers one round trip apart). The buckets refill one token an hour, so a
/// stalled machine cannot refill one between the two.
#[tokio::test]
async fn the_front_answers_alike_whether_it_decides_in_place_or_awaits_its_store() {
    use ratelab_store::StoreClient;
    use ratelab_store::faulty::{FaultPlan, FaultyClient};
    let hourly =
        |capacity| client_with(TokenBucket::new(capacity, 1, Nanos::from_secs(3600)).unwrap());
    // A fault-free FaultyClient is the same store reached through a client that may wait.
    let awaited = |cap| FaultyClient::new(hourly(cap), FaultPlan::default(), 1);
    const {
        assert!(
            Local::IMMEDIATE,
            "the in-process client is decided in place"
        );
        assert!(
            !FaultyClient::<Local>::IMMEDIATE,
            "a client that may wait is awaited"
        );
    }
    let config = GatewayConfig {
        trusted_proxies: vec!["127.0.0.0/8".parse().unwrap()],
        ..GatewayConfig::default()
    };
    let in_place = serve_front(Arc::new(Gateway::new(
        config.clone(),
        Some(hourly(4)),
        Some(hourly(2)),
        TokioEnv,
    )))
    .await;
    let through_future = serve_front(Arc::new(Gateway::new(
        config,
        Some(awaited(4)),
        Some(awaited(2)),
        TokioEnv,
    )))
    .await;
    // Admitted, admitted, denied by the key's limit; another key denied by the address's;
    // an unreadable key; an unreadable forwarding header from a trusted proxy.
    let long = "k".repeat(300);
    let requests: Vec<(&str, &[u8])> = vec![
        ("x-api-key", b"ana"),
        ("x-api-key", b"ana"),
        ("x-api-key", b"ana"),
        ("x-api-key", b"ben"),
        ("x-api-key", b"ben"),
        ("x-api-key", long.as_bytes()),
        ("x-forwarded-for", b"\xff"),
    ];
    let statuses = answered_alike(&[&in_place, &through_future], &requests).await;
    // The sequence meant what it says: both ways admitted, denied and refused alike.
    assert_eq!(statuses, [200, 200, 429, 200, 429, 400, 400]);
}

/// Sends each of `requests` (one header each) to every front at `urls` in turn, and checks
/// that they answer alike: status, body and every field but the date and the request id
/// (present in all), with the RateLimit items' `t` and `Retry-After` allowed one second
/// apart (each request reaches the servers one round trip apart). Returns the statuses.
async fn answered_alike(urls: &[&str], requests: &[(&str, &[u8])]) -> Vec<u16> {
    let c = http();
    let mut statuses = Vec::new();
    for &(name, value) in requests {
        let value = reqwest::header::HeaderValue::from_bytes(value).unwrap();
        let mut answers = Vec::new();
        for url in urls {
            let r = c
                .get(format!("{url}/orders"))
                .header(name, value.clone())
                .send()
                .await
                .unwrap();
            assert!(header(&r, "x-request-id").is_some(), "{name}: {value:?}");
            let mut fields: Vec<(String, String)> = r
                .headers()
                .iter()
                .filter(|(n, _)| !["date", "x-request-id"].contains(&n.as_str()))
                .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
                .collect();
            fields.sort();
            answers.push((r.status(), fields, r.text().await.unwrap()));
        }
        let a = &answers[0];
        for b in &answers[1..] {
            assert_eq!((a.0, &a.2), (b.0, &b.2), "{name}: {value:?}");
            let names =
                |f: &[(String, String)]| f.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
            assert_eq!(names(&a.1), names(&b.1), "{name}: {value:?}");
            for ((n, va), (_, vb)) in a.1.iter().zip(&b.1) {
                if n == "ratelimit" {
                    let (ia, ib) = (ratelimit_items(va), ratelimit_items(vb));
                    assert_eq!(ia.len(), ib.len(), "{va} / {vb}");
                    for ((na, ra, ta), (nb, rb, tb)) in ia.iter().zip(&ib) {
                        assert_eq!((na, ra), (nb, rb), "{va} / {vb}");
                        assert!((ta - tb).abs() <= 1, "{va} / {vb}");
                    }
                } else if n == "retry-after" {
                    let (ta, tb): (i64, i64) = (va.parse().unwrap(), vb.parse().unwrap());
                    assert!((ta - tb).abs() <= 1, "{va} / {vb}");
                } else {
                    assert_eq!(va, vb, "{n}");
                }
            }
        }
        statuses.push(a.0.as_u16());
    }
    statuses
}

/// At two limits together (per client address and per API key), the front answers a request
/// decided in one all-or-nothing step alike whether the step is taken in the call (two
/// limits of one in-process store) or sent to Redis at once and held by name
/// (`StoreClient::send_all`): the limits script for limits of two families, the bucket's own
/// script for two buckets. A request the per-key limit denies spends nothing at the
/// per-address one: the next key is still admitted there. The limits refill once an hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
async fn at_two_limits_the_front_answers_alike_in_place_or_sent_together() {
    use ratelab_core::SlidingWindow;
    use ratelab_store::SharedClient;
    use ratelab_store::redis_policy::RedisPolicy;
    use ratelab_store::redis_store::{RedisOptions, RedisStore};
    let Some(redis) = ratelab_testkit::redis_server::RedisServer::start("front_sent_together")
    else {
        return;
    };
    let options = RedisOptions {
        prefix: "unused:".into(),
        timeout: std::time::Duration::from_secs(2),
    };
    let base = RedisStore::connect(
        &redis.url(),
        TokenBucket::per_second(1, 1).unwrap(),
        options,
    )
    .await
    .unwrap();
    let hour = Nanos::from_secs(3600);
    let per_key = Policy::TokenBucket(TokenBucket::new(2, 1, hour).unwrap());
    let per_ip = [
        Policy::SlidingWindow(SlidingWindow::new(3, hour).unwrap()),
        Policy::TokenBucket(TokenBucket::new(3, 1, hour).unwrap()),
    ];
    let requests: Vec<(&str, &[u8])> = vec![
        ("x-api-key", b"ana"),
        ("x-api-key", b"ana"),
        ("x-api-key", b"ana"),
        ("x-api-key", b"ben"),
        ("x-api-key", b"cid"),
        ("x-api-key", b"\xff"),
    ];
    for (n, per_ip) in per_ip.into_iter().enumerate() {
        let config = GatewayConfig::default;
        let store = Arc::new(MemoryStore::new(per_ip));
        let shared =
            |policy, prefix| SharedClient::new(store.clone(), policy, prefix, wall as Clock);
        let in_place = Gateway::new(
            config(),
            Some(shared(per_ip, "ip:").unwrap()),
            Some(shared(per_key, "key:").unwrap()),
            TokioEnv,
        );
        let on_redis =
            |policy, prefix: &str| RedisPolicy::new(&base, policy, &format!("{n}{prefix}"));
        let sent = Gateway::new(
            config(),
            Some(on_redis(per_ip, "ip:").unwrap()),
            Some(on_redis(per_key, "key:").unwrap()),
            TokioEnv,
        );
        let urls = [
            serve_front(Arc::new(in_place)).await,
            serve_front(Arc::new(sent)).await,
        ];
        let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
        let statuses = answered_alike(&urls, &requests).await;
        assert_eq!(statuses, [200, 200, 429, 200, 429, 400], "{per_ip:?}");
        // The per-address state spoilt on Redis: the step cannot read it and writes nothing,
        // and the limits are decided one by one: the per-address one fails open, and the
        // per-key one still limits.
        let mut conn = redis::Client::open(redis.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{n}ip:*"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(keys.len(), 1, "{keys:?}");
        let _: () = redis::cmd("SET")
            .arg(&keys[0])
            .arg("not a state")
            .query_async(&mut conn)
            .await
            .unwrap();
        let c = http();
        let mut spoilt = Vec::new();
        for _ in 0..3 {
            let r = c
                .get(format!("{}/orders", urls[1]))
                .header("x-api-key", "dan")
                .send()
                .await
                .unwrap();
            spoilt.push(r.status().as_u16());
        }
        assert_eq!(spoilt, [200, 200, 429], "{per_ip:?}");
    }
}

/// At one limit, the front's three ways answer alike: decided in the call (the in-process
/// store), decided in two halves around a call sent at once and held by name (a Redis
/// store's lane, `StoreClient::send`), and decided around a call awaited through the
/// client (a client that does not send). The buckets refill one token an hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
async fn at_one_limit_the_front_answers_alike_in_place_sent_or_awaited() {
    use ratelab_store::faulty::{FaultPlan, FaultyClient};
    use ratelab_store::redis_store::{RedisOptions, RedisStore};
    let Some(redis) = ratelab_testkit::redis_server::RedisServer::start("front_sent_or_awaited")
    else {
        return;
    };
    let bucket = TokenBucket::new(2, 1, Nanos::from_secs(3600)).unwrap();
    let options = RedisOptions {
        prefix: "sent:".into(),
        timeout: std::time::Duration::from_secs(2),
    };
    let sent = RedisStore::connect(&redis.url(), bucket, options)
        .await
        .unwrap();
    let key = ratelab_store::Key::new("probe").unwrap();
    assert!(
        ratelab_store::StoreClient::send(&sent, &key, None, 1).is_some(),
        "a store on one Redis server sends its calls"
    );
    let awaited = FaultyClient::new(client_with(bucket), FaultPlan::default(), 1);
    let config = GatewayConfig::default;
    let one = |c| Arc::new(Gateway::new(config(), None, Some(c), TokioEnv));
    let urls = [
        serve_front(one(client_with(bucket))).await,
        serve_front(Arc::new(Gateway::new(config(), None, Some(sent), TokioEnv))).await,
        serve_front(Arc::new(Gateway::new(
            config(),
            None,
            Some(awaited),
            TokioEnv,
        )))
        .await,
    ];
    let requests: Vec<(&str, &[u8])> = vec![
        ("x-api-key", b"ana"),
        ("x-api-key", b"ana"),
        ("x-api-key", b"ana"),
        ("x-api-key", b"ben"),
        ("x-api-key", b"\xff"),
        ("x-other", b"no key"),
    ];
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let statuses = answered_alike(&urls, &requests).await;
    assert_eq!(statuses, [200, 200, 429, 200, 400, 200]);
}

/// A request at two limits of one store is decided in one step at the time its clock gives:
/// the store's own, or the gateway's (`TimeSource::Caller`, which the step is handed). On
/// either clock, through axum's app and the server's own front, a retry after the per-key
/// limit's wait is admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn at_two_limits_a_retry_after_the_wait_is_admitted_on_either_clock() {
    use ratelab_store::{SharedClient, TimeSource};
    let per_key = Policy::TokenBucket(TokenBucket::new(1, 1, Nanos::from_millis(300)).unwrap());
    let per_ip = Policy::TokenBucket(TokenBucket::per_second(1000, 1000).unwrap());
    for source in [TimeSource::Store, TimeSource::Caller] {
        for front in [false, true] {
            let store = Arc::new(MemoryStore::new(per_ip));
            let shared = |policy, prefix| {
                SharedClient::new(store.clone(), policy, prefix, wall as Clock).unwrap()
            };
            let config = GatewayConfig {
                time_source: source,
                ..GatewayConfig::default()
            };
            let gw = Arc::new(Gateway::new(
                config,
                Some(shared(per_ip, "ip:")),
                Some(shared(per_key, "key:")),
                TokioEnv,
            ));
            let url = match front {
                true => serve_front(gw).await,
                false => serve(gw).await,
            };
            let c = http();
            let get = || c.get(format!("{url}/x")).header("x-api-key", "k").send();
            let mut statuses = Vec::new();
            for _ in 0..2 {
                statuses.push(get().await.unwrap().status().as_u16());
            }
            tokio::time::sleep(std::time::Duration::from_millis(400)).await;
            statuses.push(get().await.unwrap().status().as_u16());
            assert_eq!(statuses, [200, 429, 200], "{source:?}, front {front}");
        }
    }
}
