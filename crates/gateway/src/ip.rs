//! Which address a request comes from: the peer, or — only when the peer is a trusted proxy —
//! the address that proxy reports in `Forwarded` (RFC 7239) or `X-Forwarded-For`.
//!
//! Forwarding headers are trivially spoofed, so they are believed only from configured
//! proxies, and only up to the first hop that is not itself a trusted proxy (walking the list
//! from the right, the hop nearest to us).

use core::fmt;
use std::net::IpAddr;

/// An address range: an IP and a prefix length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

/// A rejected address or range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpNetError(pub String);

impl fmt::Display for IpNetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid address or range {:?}: expected an IP, or IP/prefix",
            self.0
        )
    }
}

impl std::error::Error for IpNetError {}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl std::str::FromStr for IpNet {
    type Err = IpNetError;

    fn from_str(s: &str) -> Result<IpNet, IpNetError> {
        let err = || IpNetError(s.to_owned());
        let (ip, prefix) = match s.split_once('/') {
            Some((ip, p)) => (ip, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = ip.trim().parse().map_err(|_| err())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|&p| p <= max)
                .ok_or_else(err)?,
            None => max,
        };
        Ok(IpNet { addr, prefix })
    }
}

/// Default prefix the edge limit aggregates IPv6 clients to: one /64 is one subscriber's
/// network, and a client that owns one can rotate through 2^64 addresses.
pub const DEFAULT_IPV6_PREFIX: u8 = 64;

/// The network an edge limit counts `ip` under: an IPv4 address (or IPv4-mapped IPv6 one)
/// alone; an IPv6 address masked to its first `v6_prefix` bits (clamped to 1–128).
pub fn edge_network(ip: IpAddr, v6_prefix: u8) -> IpNet {
    match ip.to_canonical() {
        IpAddr::V4(v4) => IpNet {
            addr: IpAddr::V4(v4),
            prefix: 32,
        },
        IpAddr::V6(v6) => {
            let prefix = v6_prefix.clamp(1, 128);
            let mask = u128::MAX << (128 - u32::from(prefix));
            IpNet {
                addr: IpAddr::V6((u128::from(v6) & mask).into()),
                prefix,
            }
        }
    }
}

impl IpNet {
    /// The range's first address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `ip` is inside the range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        fn masked(bits: u128, width: u32, prefix: u8) -> u128 {
            if prefix == 0 {
                0
            } else {
                bits >> (width - u32::from(prefix))
            }
        }
        match (self.addr, ip) {
            (IpAddr::V4(a), IpAddr::V4(b)) => {
                masked(u32::from(a).into(), 32, self.prefix)
                    == masked(u32::from(b).into(), 32, self.prefix)
            }
            (IpAddr::V6(a), IpAddr::V6(b)) => {
                masked(u128::from(a), 128, self.prefix) == masked(u128::from(b), 128, self.prefix)
            }
            _ => false,
        }
    }
}

/// The forwarding headers of a request, as received (absent when not sent).
#[derive(Clone, Copy, Debug, Default)]
pub struct Forwarding<'a> {
    /// `Forwarded` (RFC 7239); preferred when present.
    pub forwarded: Option<&'a str>,
    /// `X-Forwarded-For`.
    pub x_forwarded_for: Option<&'a str>,
}

/// Resolves the client address. Headers from an untrusted peer are ignored; a malformed
/// header from a trusted proxy is an error (a broken proxy must not silently become the client).
pub fn client_ip(peer: IpAddr, fwd: Forwarding<'_>, trusted: &[IpNet]) -> Result<IpAddr, String> {
    let is_trusted = |ip: IpAddr| trusted.iter().any(|n| n.contains(ip));
    if !is_trusted(peer) {
        return Ok(peer);
    }
    let hops: Vec<IpAddr> = if let Some(f) = fwd.forwarded {
        parse_forwarded(f)?
    } else if let Some(x) = fwd.x_forwarded_for {
        x.split(',')
            .map(|h| {
                parse_hop(h.trim())
                    .ok_or_else(|| format!("malformed X-Forwarded-For entry {:?}", h.trim()))
            })
            .collect::<Result<_, _>>()?
    } else {
        return Ok(peer);
    };
    // Nearest hop last: walk back over trusted proxies to the first address that is not one.
    Ok(hops
        .iter()
        .rev()
        .copied()
        .find(|&ip| !is_trusted(ip))
        .or(hops.first().copied())
        .unwrap_or(peer))
}

/// One hop: an IPv4 or IPv6 address, optionally with a port (`1.2.3.4:80`, `[::1]:80`).
fn parse_hop(h: &str) -> Option<IpAddr> {
    let h = h.trim_matches('"');
    if let Ok(ip) = h.parse() {
        return Some(ip);
    }
    if let Some(rest) = h.strip_prefix('[') {
        return rest.split(']').next()?.parse().ok();
    }
    let (ip, port) = h.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    ip.parse().ok()
}

/// The `for=` addresses of a `Forwarded` header, in order.
fn parse_forwarded(f: &str) -> Result<Vec<IpAddr>, String> {
    let mut out = Vec::new();
    for element in f.split(',') {
        for pair in element.split(';') {
            let Some((k, v)) = pair.split_once('=') else {
                if pair.trim().is_empty() {
                    continue;
                }
                return Err(format!("malformed Forwarded pair {:?}", pair.trim()));
            };
            if k.trim().eq_ignore_ascii_case("for") {
                let v = v.trim();
                out.push(
                    parse_hop(v).ok_or_else(|| format!("malformed Forwarded for= value {v:?}"))?,
                );
            }
        }
    }
    if out.is_empty() {
        return Err("Forwarded header without a for= address".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_edge_counts_an_ipv6_client_by_its_prefix_and_ipv4_alone() {
        let net = |s: &str, p: u8| edge_network(ip(s), p).to_string();
        assert_eq!(net("2001:db8:1:2:aaaa::1", 64), "2001:db8:1:2::/64");
        assert_eq!(
            net("2001:db8:1:2:aaaa::1", 64),
            net("2001:db8:1:2:ffff:ffff:ffff:ffff", 64),
            "one /64, any interface id"
        );
        assert_ne!(net("2001:db8:1:2::1", 64), net("2001:db8:1:3::1", 64));
        assert_eq!(net("2001:db8::1", 128), "2001:db8::1/128");
        assert_eq!(net("2001:db8::1", 0), "::/1", "clamped to at least 1 bit");
        assert_eq!(net("192.0.2.7", 64), "192.0.2.7/32");
        assert_eq!(net("::ffff:192.0.2.7", 64), "192.0.2.7/32", "IPv4-mapped");
    }

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn forwarding_headers_from_untrusted_peers_are_ignored() {
        let spoof = Forwarding {
            x_forwarded_for: Some("1.1.1.1"),
            forwarded: Some("for=2.2.2.2"),
        };
        assert_eq!(
            client_ip(ip("203.0.113.9"), spoof, &nets(&["10.0.0.0/8"])),
            Ok(ip("203.0.113.9"))
        );
        assert_eq!(
            client_ip(ip("203.0.113.9"), spoof, &[]),
            Ok(ip("203.0.113.9"))
        );
    }

    #[test]
    fn trusted_proxy_reports_the_client_and_spoofed_prefixes_are_skipped() {
        let t = nets(&["10.0.0.0/8"]);
        // The client prepended a fake address; our proxy appended the real one it saw.
        let xff = Forwarding {
            x_forwarded_for: Some("6.6.6.6, 198.51.100.7"),
            forwarded: None,
        };
        assert_eq!(client_ip(ip("10.1.2.3"), xff, &t), Ok(ip("198.51.100.7")));
        // Two trusted proxies in a row are walked over.
        let chain = Forwarding {
            x_forwarded_for: Some("198.51.100.7, 10.9.9.9"),
            forwarded: None,
        };
        assert_eq!(client_ip(ip("10.1.2.3"), chain, &t), Ok(ip("198.51.100.7")));
        let fwd = Forwarding {
            forwarded: Some("for=\"[2001:db8::1]:4711\";proto=https, for=10.0.0.5"),
            x_forwarded_for: Some("9.9.9.9"),
        };
        assert_eq!(client_ip(ip("10.1.2.3"), fwd, &t), Ok(ip("2001:db8::1")));
    }

    #[test]
    fn malformed_headers_from_a_trusted_proxy_are_errors() {
        let t = nets(&["127.0.0.1"]);
        let bad = Forwarding {
            x_forwarded_for: Some("not-an-ip"),
            forwarded: None,
        };
        assert!(
            client_ip(ip("127.0.0.1"), bad, &t)
                .unwrap_err()
                .contains("X-Forwarded-For")
        );
        let bad = Forwarding {
            forwarded: Some("proto=http"),
            x_forwarded_for: None,
        };
        assert!(client_ip(ip("127.0.0.1"), bad, &t).is_err());
    }

    #[test]
    fn ranges_parse_and_match() {
        let n: IpNet = "192.168.0.0/16".parse().unwrap();
        assert!(n.contains(ip("192.168.44.1")) && !n.contains(ip("192.169.0.1")));
        assert!(!n.contains(ip("::1")));
        assert!("::1/129".parse::<IpNet>().is_err() && "x".parse::<IpNet>().is_err());
        assert!(
            "0.0.0.0/0"
                .parse::<IpNet>()
                .unwrap()
                .contains(ip("8.8.8.8"))
        );
    }
}
