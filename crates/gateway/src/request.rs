//! One request as the pipeline sees it: its peer, key, route, method, headers (the
//! forwarding header among them) and cost; and the guard that may reject it before any limit
//! is consulted.

use std::net::IpAddr;

/// One request, as the pipeline sees it.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The connection's peer address.
    pub peer: IpAddr,
    /// The raw `x-api-key` header, if present.
    pub api_key: Option<&'a [u8]>,
    /// The request path (for fail-closed routes and limit selectors), normalised by the HTTP
    /// front end ([`crate::path`]).
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

/// A request's headers, by lower-case name.
pub trait Headers: Sync + std::fmt::Debug {
    /// The raw value of `name`, if sent (the first, when it repeats).
    fn get(&self, name: &str) -> Option<&[u8]>;

    /// Every value of `name`, in the order sent.
    fn each(&self, name: &str, f: &mut dyn FnMut(&[u8])) {
        if let Some(v) = self.get(name) {
            f(v);
        }
    }

    /// Every distinct header name sent, lower case.
    fn each_name(&self, f: &mut dyn FnMut(&str));

    /// Whether no header at all was sent: nothing to look up, nothing sent twice. An
    /// implementation answers from the same headers [`Headers::get`] reads.
    fn none_sent(&self) -> bool {
        false
    }

    /// Whether no name was sent more than once (`false` when not known): then no name needs
    /// its values counted. An implementation answers from the same headers
    /// [`Headers::each`] reads.
    fn none_repeated(&self) -> bool {
        self.none_sent()
    }
}

/// No headers (a simulated request).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoHeaders;

impl Headers for NoHeaders {
    fn get(&self, _: &str) -> Option<&[u8]> {
        None
    }

    fn each_name(&self, _: &mut dyn FnMut(&str)) {}

    fn none_sent(&self) -> bool {
        true
    }
}

impl<'a> Headers for [(&'a str, &'a [u8])] {
    fn get(&self, name: &str) -> Option<&[u8]> {
        self.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    }

    fn each(&self, name: &str, f: &mut dyn FnMut(&[u8])) {
        self.iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .for_each(|(_, v)| f(v));
    }

    fn each_name(&self, f: &mut dyn FnMut(&str)) {
        for (i, (n, _)) in self.iter().enumerate() {
            if !self[..i].iter().any(|(m, _)| m.eq_ignore_ascii_case(n)) {
                f(&n.to_ascii_lowercase());
            }
        }
    }

    fn none_sent(&self) -> bool {
        self.is_empty()
    }
}

/// A pre-limit check (the bloom-filter guard slot): `Some(reason)` rejects the request before
/// any limit is consulted.
pub trait Guard: Send + Sync {
    /// Checks the request's API key, if any.
    fn reject(&self, api_key: Option<&str>) -> Option<String>;
}

impl<'a> Headers for Vec<(&'a str, &'a [u8])> {
    fn get(&self, name: &str) -> Option<&[u8]> {
        Headers::get(self.as_slice(), name)
    }

    fn each(&self, name: &str, f: &mut dyn FnMut(&[u8])) {
        self.as_slice().each(name, f);
    }

    fn each_name(&self, f: &mut dyn FnMut(&str)) {
        self.as_slice().each_name(f);
    }

    fn none_sent(&self) -> bool {
        self.is_empty()
    }
}

/// Whether two header names are one name to a framework that folds `_` into `-` and ignores
/// case (CGI and WSGI read both `x-api-key` and `x_api_key` as `HTTP_X_API_KEY`).
pub fn same_when_folded(a: &str, b: &str) -> bool {
    let fold = |c: u8| {
        if c == b'_' {
            b'-'
        } else {
            c.to_ascii_lowercase()
        }
    };
    a.len() == b.len() && a.bytes().zip(b.bytes()).all(|(x, y)| fold(x) == fold(y))
}
