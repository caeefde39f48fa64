//! tower_governor's GovernorLayer in front of one axum route, as its README configures it,
//! with a key extractor reading the x-key header (the README's custom-key pattern). BURST
//! requests at once, one more every PERIOD_MS milliseconds; x-ratelimit-* headers on.

use axum::{Router, routing::get};
use std::net::SocketAddr;
use tower_governor::{
    GovernorError, GovernorLayer, governor::GovernorConfigBuilder, key_extractor::KeyExtractor,
};

#[derive(Clone, Debug)]
struct HeaderKey;

impl KeyExtractor for HeaderKey {
    type Key = String;

    fn extract<T>(&self, req: &axum::http::Request<T>) -> Result<String, GovernorError> {
        req.headers()
            .get("x-key")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .ok_or(GovernorError::UnableToExtractKey)
    }
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() {
    let config = GovernorConfigBuilder::default()
        .per_millisecond(env("PERIOD_MS", 100))
        .burst_size(env("BURST", 10) as u32)
        .key_extractor(HeaderKey)
        .use_headers()
        .finish()
        .expect("a valid quota");
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(GovernorLayer::new(config));
    let port = env("PORT", 3000) as u16;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("the port is free");
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await
    .expect("serves");
}
