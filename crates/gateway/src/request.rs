//! One request as the pipeline sees it: its peer, forwarding headers, key, route, method,
//! headers and cost; and the guard that may reject it before any limit is consulted.

use crate::ip::Forwarding;
use std::net::IpAddr;

/// One request, as the pipeline sees it.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The connection's peer address.
    pub peer: IpAddr,
    /// Forwarding headers, believed only from trusted proxies.
    pub forwarding: Forwarding<'a>,
    /// The raw `x-api-key` header, if present.
    pub api_key: Option<&'a [u8]>,
    /// The request path (for fail-closed routes and limit selectors).
    pub route: &'a str,
    /// The request method, upper case (for limit selectors).
    pub method: &'a str,
    /// The request's headers (for limit selectors, keys and costs).
    pub headers: &'a dyn Headers,
    /// Cost in quota units (1 for an HTTP request).
    pub cost: u64,
    /// Trace id carried by every store call for this request.
    pub trace: u64,
}

/// A request's headers, by lower-case name; the first value when a header repeats.
pub trait Headers: Sync + std::fmt::Debug {
    /// The raw value of `name`, if sent.
    fn get(&self, name: &str) -> Option<&[u8]>;
}

/// No headers (a simulated request).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoHeaders;

impl Headers for NoHeaders {
    fn get(&self, _: &str) -> Option<&[u8]> {
        None
    }
}

impl<'a> Headers for [(&'a str, &'a [u8])] {
    fn get(&self, name: &str) -> Option<&[u8]> {
        self.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    }
}

/// A pre-limit check (the bloom-filter guard slot): `Some(reason)` rejects the request before
/// any limit is consulted.
pub trait Guard: Send + Sync {
    /// Checks the request's API key, if any.
    fn reject(&self, api_key: Option<&str>) -> Option<String>;
}
