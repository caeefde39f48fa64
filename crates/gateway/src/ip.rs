//! Which address a request comes from, by one rule:
//!
//! - addresses are canonical before any comparison: an IPv4-mapped IPv6 address
//!   (`::ffff:127.0.0.1`, as a `[::]` listener reports IPv4 peers) is its IPv4 address, in
//!   the trusted-proxy check, the admin check and every key;
//! - the client is the connection's peer, unless the peer is a trusted proxy;
//! - then it is the **rightmost** entry, across every line of the one forwarding header the
//!   deployment names ([`ClientIpHeader`]: `X-Forwarded-For` by default, `Forwarded` or
//!   `X-Real-IP`), that is not itself a trusted proxy. Every other forwarding header is
//!   ignored: a client that sends its own `Forwarded` through a proxy that only appends to
//!   `X-Forwarded-For` chooses nothing.
//!
//! Entries to the left of the first untrusted one were written by whoever sent them — the
//! client included — so they are never read: a proxy appends the address it saw, and only
//! what trusted proxies appended is believed.

use crate::request::{Headers, same_when_folded};
use core::fmt;
use std::net::IpAddr;

/// The request headers through which proxies and CDNs name the client's address. Any client
/// can send them itself: only the one a deployment names ([`ClientIpHeader`]) is read, from a
/// trusted proxy; a proxy in front of an application drops every one (`ratelab-server
/// --upstream`), lest the application read an address the limiter did not count.
pub const CLIENT_ADDRESS_HEADERS: [&str; 9] = [
    "forwarded",
    "x-forwarded-for",
    "x-real-ip",
    "x-original-forwarded-for",
    "x-client-ip",
    "x-cluster-client-ip",
    "true-client-ip",
    "cf-connecting-ip",
    "fastly-client-ip",
];

/// Whether the header `name` is one of [`CLIENT_ADDRESS_HEADERS`], in any case, or spelled
/// with `_` for `-` (which CGI and WSGI read as the real one).
pub fn names_client_address(name: &str) -> bool {
    CLIENT_ADDRESS_HEADERS
        .iter()
        .any(|h| same_when_folded(h, name))
}

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
        // An IPv4-mapped range is the IPv4 range: addresses are compared canonical.
        match addr {
            IpAddr::V6(v6) if prefix >= 96 && v6.to_ipv4_mapped().is_some() => Ok(IpNet {
                addr: addr.to_canonical(),
                prefix: prefix - 96,
            }),
            _ => Ok(IpNet { addr, prefix }),
        }
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

    /// Whether `ip` (canonical or not: `::ffff:10.0.0.1` is `10.0.0.1`) is inside the range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
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

/// The one forwarding header a deployment believes its proxies on
/// (`--client-ip-header`); every other forwarding header is ignored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClientIpHeader {
    /// `X-Forwarded-For`: comma-separated addresses, nearest hop last (the default).
    #[default]
    XForwardedFor,
    /// `Forwarded` (RFC 7239): the `for=` parameter of each element, nearest hop last.
    Forwarded,
    /// `X-Real-IP`: one address per line.
    XRealIp,
    /// None: the client is the connection's peer, whatever it sends.
    None,
}

impl ClientIpHeader {
    /// Every choice, as the flag spells it.
    pub const NAMES: [&'static str; 4] = ["x-forwarded-for", "forwarded", "x-real-ip", "none"];

    /// The header's name (lower case), or `None` for [`ClientIpHeader::None`].
    pub fn header(self) -> Option<&'static str> {
        match self {
            ClientIpHeader::XForwardedFor => Some("x-forwarded-for"),
            ClientIpHeader::Forwarded => Some("forwarded"),
            ClientIpHeader::XRealIp => Some("x-real-ip"),
            ClientIpHeader::None => None,
        }
    }

    /// The choice as the flag spells it.
    pub fn name(self) -> &'static str {
        self.header().unwrap_or("none")
    }
}

impl std::str::FromStr for ClientIpHeader {
    type Err = String;

    fn from_str(s: &str) -> Result<ClientIpHeader, String> {
        match s.to_ascii_lowercase().as_str() {
            "x-forwarded-for" => Ok(ClientIpHeader::XForwardedFor),
            "forwarded" => Ok(ClientIpHeader::Forwarded),
            "x-real-ip" => Ok(ClientIpHeader::XRealIp),
            "none" => Ok(ClientIpHeader::None),
            _ => Err(format!(
                "{s:?}: expected one of {}",
                ClientIpHeader::NAMES.join(", ")
            )),
        }
    }
}

/// One entry of a forwarding chain: an address, or a hop a proxy would not name (RFC 7239's
/// `unknown` and obfuscated `_identifiers`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hop {
    /// A named address (canonical: an IPv4-mapped IPv6 address is its IPv4 address).
    Addr(IpAddr),
    /// A hop without an address.
    Unnamed,
}

/// The entries of every line of `header` in `headers`, in order (the nearest hop last); an
/// entry that is not an address is an error that names it. Empty for
/// [`ClientIpHeader::None`] or when the header is absent.
pub fn forwarding_chain(header: ClientIpHeader, headers: &dyn Headers) -> Result<Vec<Hop>, String> {
    let Some(name) = header.header() else {
        return Ok(Vec::new());
    };
    let mut hops = Vec::new();
    let mut error = None;
    headers.each(name, &mut |line| {
        if error.is_none()
            && let Err(e) = parse_line(header, name, line, &mut hops)
        {
            error = Some(e);
        }
    });
    error.map_or(Ok(hops), Err)
}

/// The entries of one line of the forwarding header `name`, appended to `hops`.
fn parse_line(
    header: ClientIpHeader,
    name: &str,
    line: &[u8],
    hops: &mut Vec<Hop>,
) -> Result<(), String> {
    let line = std::str::from_utf8(line)
        .ok()
        .filter(|l| l.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b)))
        .ok_or_else(|| format!("{name} is not visible ASCII"))?;
    match header {
        ClientIpHeader::XForwardedFor => {
            for entry in line.split(',') {
                let e = entry.trim();
                // An empty list element is allowed by the list syntax (RFC 9110 §5.6.1).
                if e.is_empty() {
                    continue;
                }
                hops.push(
                    parse_hop(e, false)
                        .ok_or_else(|| format!("malformed X-Forwarded-For entry {e:?}"))?,
                );
            }
        }
        ClientIpHeader::Forwarded => parse_forwarded(line, hops)?,
        ClientIpHeader::XRealIp => {
            let e = line.trim();
            hops.push(parse_hop(e, false).ok_or_else(|| format!("malformed X-Real-IP {e:?}"))?);
        }
        ClientIpHeader::None => {}
    }
    Ok(())
}

/// Resolves the client address, canonical: the peer's, unless the peer is a trusted proxy;
/// then the rightmost entry, across every line of `header`, that is not a trusted proxy
/// (every entry trusted: the leftmost). An entry without an address stops the walk: the
/// trusted hop that reported it stands for the client. A malformed header from a trusted
/// proxy is an error (a broken proxy must not silently become the client); headers from any
/// other peer are not read.
pub fn client_ip(
    peer: IpAddr,
    header: ClientIpHeader,
    headers: &dyn Headers,
    trusted: &[IpNet],
) -> Result<IpAddr, String> {
    let peer = peer.to_canonical();
    if !is_trusted(trusted, peer) {
        return Ok(peer);
    }
    let hops = forwarding_chain(header, headers)?;
    let mut client = peer;
    for hop in hops.iter().rev() {
        match *hop {
            Hop::Unnamed => return Ok(client),
            Hop::Addr(ip) => {
                client = ip;
                if !is_trusted(trusted, ip) {
                    return Ok(ip);
                }
            }
        }
    }
    Ok(client)
}

/// Whether `ip` is in one of the `trusted` ranges.
pub fn is_trusted(trusted: &[IpNet], ip: IpAddr) -> bool {
    trusted.iter().any(|n| n.contains(ip))
}

/// One hop: an IPv4 or IPv6 address, optionally quoted and with a port (`1.2.3.4:80`,
/// `"[::1]:80"`; in `Forwarded` (`rfc7239`) an obfuscated one too), canonical; `unknown` and
/// `_obfuscated` are [`Hop::Unnamed`].
fn parse_hop(h: &str, rfc7239: bool) -> Option<Hop> {
    let is_port = |p: &str| p.parse::<u16>().is_ok() || (rfc7239 && is_obfuscated(p));
    let h = h.trim();
    let h = h
        .strip_prefix('"')
        .and_then(|x| x.strip_suffix('"'))
        .unwrap_or(h);
    // RFC 7239's node: a name (`unknown`, an obfuscated one) may carry a port as an address
    // may.
    let unnamed = |n: &str| n.eq_ignore_ascii_case("unknown") || is_obfuscated(n);
    if unnamed(h)
        || h.rsplit_once(':')
            .is_some_and(|(n, p)| unnamed(n) && is_port(p))
    {
        return Some(Hop::Unnamed);
    }
    let ip: IpAddr = if let Ok(ip) = h.parse() {
        ip
    } else if let Some(rest) = h.strip_prefix('[') {
        let (ip, after) = rest.split_once(']')?;
        if !(after.is_empty() || is_port(after.strip_prefix(':')?)) {
            return None;
        }
        ip.parse().ok()?
    } else {
        let (ip, port) = h.rsplit_once(':')?;
        if !is_port(port) {
            return None;
        }
        IpAddr::V4(ip.parse().ok()?)
    };
    Some(Hop::Addr(ip.to_canonical()))
}

/// `s` split at each `sep` outside a quoted string (RFC 9110 §5.6.4: `"…"`, with `\`
/// escaping the next character). A quoted string may only be a whole parameter value (right
/// after `=`, followed by nothing but spaces up to a separator), and must be closed: a stray
/// or unclosed quote is an error, never a way to swallow the entries a proxy appended.
fn split_unquoted(s: &str, sep: u8) -> Result<Vec<&str>, String> {
    let bytes = s.as_bytes();
    let (mut parts, mut start, mut i) = (Vec::new(), 0, 0);
    let stray = || format!("malformed Forwarded header: a quote out of place in {s:?}");
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                let after_eq = s[..i].trim_end().ends_with('=');
                if !after_eq {
                    return Err(stray());
                }
                i += 1;
                loop {
                    match bytes.get(i) {
                        None => {
                            return Err(format!(
                                "malformed Forwarded header: an unclosed quote in {s:?}"
                            ));
                        }
                        Some(b'\\') => i += 2,
                        Some(b'"') => break,
                        Some(_) => i += 1,
                    }
                }
                i += 1;
                // Only spaces may follow, up to a separator or the end.
                while bytes.get(i).is_some_and(|b| *b == b' ' || *b == b'\t') {
                    i += 1;
                }
                if !matches!(bytes.get(i), None | Some(b',') | Some(b';')) {
                    return Err(stray());
                }
            }
            b if b == sep => {
                parts.push(&s[start..i]);
                start = i + 1;
                i += 1;
            }
            _ => i += 1,
        }
    }
    parts.push(&s[start..]);
    Ok(parts)
}

/// RFC 7239's obfuscated node or port (`_` and letters, digits, `.`, `_`, `-`).
fn is_obfuscated(p: &str) -> bool {
    p.len() > 1
        && p.starts_with('_')
        && p.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// The `for=` hops of one `Forwarded` line, appended in order.
fn parse_forwarded(f: &str, out: &mut Vec<Hop>) -> Result<(), String> {
    for element in split_unquoted(f, b',')? {
        if element.trim().is_empty() {
            continue;
        }
        let mut found = false;
        for pair in split_unquoted(element, b';')? {
            let Some((k, v)) = pair.split_once('=') else {
                if pair.trim().is_empty() {
                    continue;
                }
                return Err(format!("malformed Forwarded pair {:?}", pair.trim()));
            };
            if k.trim().eq_ignore_ascii_case("for") {
                if found {
                    return Err(format!(
                        "Forwarded element {:?} has two for= parameters",
                        element.trim()
                    ));
                }
                found = true;
                let v = v.trim();
                out.push(
                    parse_hop(v, true)
                        .ok_or_else(|| format!("malformed Forwarded for= value {v:?}"))?,
                );
            }
        }
        if !found {
            // A proxy that does not say whom it heard from (only `by=`, `proto=`…).
            out.push(Hop::Unnamed);
        }
    }
    Ok(())
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

    /// Resolves with `headers` (name, value; a name may repeat) and `header` believed from
    /// `trusted`.
    fn resolve(
        peer: &str,
        header: ClientIpHeader,
        headers: &[(&str, &str)],
        trusted: &[&str],
    ) -> Result<IpAddr, String> {
        let h: Vec<(&str, &[u8])> = headers.iter().map(|(n, v)| (*n, v.as_bytes())).collect();
        client_ip(ip(peer), header, &h, &nets(trusted))
    }

    const XFF: ClientIpHeader = ClientIpHeader::XForwardedFor;

    #[test]
    fn forwarding_headers_from_untrusted_peers_are_ignored() {
        let spoof = [("x-forwarded-for", "1.1.1.1"), ("forwarded", "for=2.2.2.2")];
        for header in [XFF, ClientIpHeader::Forwarded, ClientIpHeader::XRealIp] {
            assert_eq!(
                resolve("203.0.113.9", header, &spoof, &["10.0.0.0/8"]),
                Ok(ip("203.0.113.9"))
            );
            assert_eq!(
                resolve("203.0.113.9", header, &spoof, &[]),
                Ok(ip("203.0.113.9"))
            );
        }
    }

    #[test]
    fn the_client_is_the_rightmost_untrusted_entry_of_the_named_header_only() {
        let t = ["10.0.0.0/8"];
        // The client prepended a fake address; our proxy appended the real one it saw.
        let xff = [("x-forwarded-for", "6.6.6.6, 198.51.100.7")];
        assert_eq!(resolve("10.1.2.3", XFF, &xff, &t), Ok(ip("198.51.100.7")));
        // Two trusted proxies in a row are walked over.
        let chain = [("x-forwarded-for", "198.51.100.7, 10.9.9.9")];
        assert_eq!(resolve("10.1.2.3", XFF, &chain, &t), Ok(ip("198.51.100.7")));
        // A forged `Forwarded` passed through untouched is not read when X-Forwarded-For is
        // the header named, and the other way round.
        let both = [
            (
                "forwarded",
                "for=\"[2001:db8::1]:4711\";proto=https, for=10.0.0.5",
            ),
            ("x-forwarded-for", "9.9.9.9"),
        ];
        assert_eq!(resolve("10.1.2.3", XFF, &both, &t), Ok(ip("9.9.9.9")));
        assert_eq!(
            resolve("10.1.2.3", ClientIpHeader::Forwarded, &both, &t),
            Ok(ip("2001:db8::1"))
        );
        assert_eq!(
            resolve("10.1.2.3", ClientIpHeader::None, &both, &t),
            Ok(ip("10.1.2.3"))
        );
        // Every line counts, in order: the proxy's own line comes after the client's.
        let lines = [
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-for", "198.51.100.7"),
        ];
        assert_eq!(resolve("10.1.2.3", XFF, &lines, &t), Ok(ip("198.51.100.7")));
        let real = [("x-real-ip", "7.7.7.7"), ("x-real-ip", "198.51.100.8")];
        assert_eq!(
            resolve("10.1.2.3", ClientIpHeader::XRealIp, &real, &t),
            Ok(ip("198.51.100.8"))
        );
        // Every entry trusted: the leftmost; none: the peer.
        let inner = [("x-forwarded-for", "10.0.0.9, 10.0.0.8")];
        assert_eq!(resolve("10.1.2.3", XFF, &inner, &t), Ok(ip("10.0.0.9")));
        assert_eq!(resolve("10.1.2.3", XFF, &[], &t), Ok(ip("10.1.2.3")));
        // A hop a proxy would not name: the trusted hop that reported it stands for it.
        let hidden = [("forwarded", "for=unknown, for=10.0.0.7")];
        assert_eq!(
            resolve("10.1.2.3", ClientIpHeader::Forwarded, &hidden, &t),
            Ok(ip("10.0.0.7"))
        );
    }

    #[test]
    fn addresses_are_canonical_before_any_comparison() {
        // A `[::]` listener sees IPv4 peers as IPv4-mapped IPv6 addresses.
        let xff = [("x-forwarded-for", "::ffff:198.51.100.7, ::ffff:127.0.0.2")];
        assert_eq!(
            resolve("::ffff:127.0.0.1", XFF, &xff, &["127.0.0.0/8"]),
            Ok(ip("198.51.100.7"))
        );
        assert_eq!(
            resolve("::ffff:127.0.0.1", XFF, &xff, &["::ffff:127.0.0.0/104"]),
            Ok(ip("198.51.100.7"))
        );
        assert_eq!(
            resolve("::ffff:203.0.113.9", XFF, &xff, &["127.0.0.1"]),
            Ok(ip("203.0.113.9"))
        );
        let mapped: IpNet = "::ffff:10.0.0.0/104".parse().unwrap();
        assert_eq!(mapped.to_string(), "10.0.0.0/8");
    }

    #[test]
    fn quoted_forwarded_values_and_obfuscated_ports_are_read() {
        let t = ["10.0.0.0/8"];
        let fwd = [(
            "forwarded",
            "for=198.51.100.9;by=\"a,b;c\", for=\"[2001:db8::7]:_port\";proto=\"h\\\"s\"",
        )];
        assert_eq!(
            resolve("10.1.2.3", ClientIpHeader::Forwarded, &fwd, &t),
            Ok(ip("2001:db8::7"))
        );
        // Obfuscated ports are RFC 7239's alone.
        let xff = [("x-forwarded-for", "198.51.100.9:_p, 10.0.0.1")];
        assert!(resolve("10.1.2.3", XFF, &xff, &t).is_err());
        // An obfuscated node stands for the proxy that reported it; one or a port outside
        // RFC 7239's grammar is malformed.
        for node in ["_hidden-1.x", "\"_h:8080\"", "\"_h:_p\"", "\"unknown:80\""] {
            let hidden = format!("for=198.51.100.9, for={node}");
            let hidden = [("forwarded", hidden.as_str())];
            let got = resolve("10.1.2.3", ClientIpHeader::Forwarded, &hidden, &t);
            assert_eq!(got, Ok(ip("10.1.2.3")), "{node}");
        }
        for bad in [
            "for=_",
            "for=\"_a b\"",
            "for=\"198.51.100.9:ab\"",
            "for=\"_a:_\"",
        ] {
            let fwd = [("forwarded", bad)];
            let got = resolve("10.1.2.3", ClientIpHeader::Forwarded, &fwd, &t);
            assert!(got.is_err(), "{bad}: {got:?}");
        }
    }

    #[test]
    fn a_quote_cannot_swallow_the_entry_a_proxy_appended() {
        let t = ["10.0.0.0/8"];
        // The client's own line, to which its proxy appended the address it saw.
        for sent in [
            "for=198.51.100.1;by=\", for=203.0.113.5",
            "for=198.51.100.1;by=\"x, for=203.0.113.5",
            "for=\"198.51.100.1, for=\"203.0.113.5\"",
            "for=198.51.100.1;by=x\"y\", for=203.0.113.5",
        ] {
            let fwd = [("forwarded", sent)];
            let got = resolve("10.1.2.3", ClientIpHeader::Forwarded, &fwd, &t);
            assert!(
                got.is_err() || got == Ok(ip("203.0.113.5")),
                "{sent}: {got:?}"
            );
            assert!(got.is_err(), "{sent}: a stray quote is malformed");
        }
    }

    #[test]
    fn malformed_headers_from_a_trusted_proxy_are_errors() {
        let t = ["127.0.0.1"];
        let bad = [("x-forwarded-for", "not-an-ip")];
        assert!(
            resolve("127.0.0.1", XFF, &bad, &t)
                .unwrap_err()
                .contains("X-Forwarded-For")
        );
        let bad = [("x-forwarded-for", "1.2.3.4:99999")];
        assert!(resolve("127.0.0.1", XFF, &bad, &t).is_err());
        let bad = [("forwarded", "for=1.2.3.4;for=5.6.7.8")];
        assert!(resolve("127.0.0.1", ClientIpHeader::Forwarded, &bad, &t).is_err());
        let bad = [("x-real-ip", "1.2.3.4, 5.6.7.8")];
        assert!(resolve("127.0.0.1", ClientIpHeader::XRealIp, &bad, &t).is_err());
    }

    #[test]
    fn the_header_is_named_as_the_flag_spells_it() {
        for name in ClientIpHeader::NAMES {
            assert_eq!(name.parse::<ClientIpHeader>().unwrap().name(), name);
        }
        assert!(
            "via"
                .parse::<ClientIpHeader>()
                .unwrap_err()
                .contains("x-real-ip")
        );
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
