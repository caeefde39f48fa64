//! The gateway's settings.

use crate::breaker::BreakerConfig;
use crate::ip::{ClientIpHeader, DEFAULT_IPV6_PREFIX, IpNet};
use ratelab_core::headers::FieldsDraft;
use ratelab_store::{Path, TimeSource};
use std::time::Duration;

/// Gateway settings.
#[derive(Clone, Debug)]
pub struct GatewayConfig {
    /// Store access path (production: atomic).
    pub path: Path,
    /// Whose clock transitions read.
    pub time_source: TimeSource,
    /// Per-call timeout.
    pub timeout: Duration,
    /// Circuit breaker, per limit.
    pub breaker: BreakerConfig,
    /// Proxies whose forwarding header is believed.
    pub trusted_proxies: Vec<IpNet>,
    /// The one forwarding header believed from them ([`crate::ip`]).
    pub client_ip_header: ClientIpHeader,
    /// Route prefixes that fail closed.
    pub fail_closed_routes: Vec<String>,
    /// Whether store trouble fails open (the default) on routes not listed as fail-closed.
    pub fail_open: bool,
    /// This gateway's name in the request log.
    pub name: String,
    /// Seed of the request ids' random bits; `None` draws one from the OS.
    pub id_seed: Option<u64>,
    /// The edge limit counts IPv6 clients by this prefix length (1–128; default 64).
    pub ipv6_prefix: u8,
    /// Keys each limit's local denial cache holds (0, the default: no cache). A key the store
    /// denied is then answered 429 by the gateway until the store's wait is over, without a
    /// store call ([`crate::denial_cache`]).
    pub denial_cache: usize,
    /// Whether answers carry the `RateLimit-Policy`, `RateLimit` and `Retry-After` headers
    /// (default true). A caller that never reads them (a simulation whose clients ignore them)
    /// can skip rendering them; decisions and counters are the same either way.
    pub headers: bool,
    /// Which draft the RateLimit fields follow (default draft-11;
    /// [`ratelab_core::headers`]).
    pub ratelimit_fields: FieldsDraft,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            path: Path::Atomic,
            time_source: TimeSource::Store,
            timeout: Duration::from_millis(50),
            breaker: BreakerConfig::default(),
            trusted_proxies: Vec::new(),
            client_ip_header: ClientIpHeader::default(),
            fail_closed_routes: Vec::new(),
            fail_open: true,
            name: "gateway".into(),
            id_seed: None,
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
            denial_cache: 0,
            headers: true,
            ratelimit_fields: FieldsDraft::default(),
        }
    }
}
