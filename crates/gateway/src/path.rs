//! A request path as the limiter matches it: one spelling per route, made once, before any
//! limit's selector or fail-closed route is matched, and the path the request is then
//! forwarded with, so the limiter and the application behind it read the same route.
//!
//! [`normalize`] follows RFC 3986 §6.2.2: percent-encoded unreserved characters are decoded
//! (`/%61pi` is `/api`), other escapes are written in upper case, dot segments are removed
//! (`/a/../api` is `/api`), and repeated slashes are merged (`//api` is `/api`, as nginx's
//! `merge_slashes` and Envoy's `merge_slashes` do). What an application might read as another
//! route than the limiter does is refused instead ([`PathError`]):
//!
//! - an encoded `/` or `\` (`%2F`, `%5C`), which some servers decode into a separator
//!   (Envoy's `path_with_escaped_slashes_action: REJECT_REQUEST`);
//! - a raw `\`, which some servers read as `/`;
//! - an encoded NUL or control character, and a malformed escape;
//! - a `;` parameter before a later `/` (`/api;x/y`), which servlet containers strip
//!   (`/api/y`).
//!
//! Route prefixes are matched without regard to ASCII case by the selectors: an application
//! that routes case-insensitively (Express's default) must not see `/API/` escape `/api/`'s
//! limit, and one that does not answers that path 404 anyway.

use std::borrow::Cow;

/// Why a path was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathError(pub String);

impl std::fmt::Display for PathError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The unreserved characters other than letters and digits (RFC 3986 §2.3).
const UNRESERVED: &[u8] = b"-._~";

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || UNRESERVED.contains(&b)
}

/// Whether `path` may need work: a cheap scan so that the common path is borrowed as sent.
fn may_change(path: &[u8]) -> bool {
    path.iter()
        .zip(path.iter().skip(1))
        .any(|(&a, &b)| (a == b'/' && (b == b'/' || b == b'.')) || a == b'%' || b == b'%')
        || path.contains(&b'\\')
        || path.contains(&b';')
        || path.first() == Some(&b'%')
}

/// The path `path` (an origin-form path, without its query) as the limiter matches it and
/// forwards it; a path that does not start with `/` (`*`) is returned as it is.
pub fn normalize(path: &str) -> Result<Cow<'_, str>, PathError> {
    let bytes = path.as_bytes();
    if !bytes.starts_with(b"/") || !may_change(bytes) {
        return Ok(Cow::Borrowed(path));
    }
    let decoded = decode(bytes)?;
    // Dot segments and empty segments removed; the last segment's emptiness (a trailing
    // slash) kept, as is a directory that a dot segment names (`/a/.` is `/a/`).
    let mut out: Vec<&[u8]> = Vec::new();
    let mut trailing = false;
    let segments: Vec<&[u8]> = decoded[1..].split(|&b| b == b'/').collect();
    for (i, seg) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        match *seg {
            b"" => trailing = last,
            b"." => trailing = last,
            b".." => {
                out.pop();
                trailing = last;
            }
            s => {
                if let Some(at) = s.iter().position(|&b| b == b';')
                    && !last
                {
                    return Err(PathError(format!(
                        "path parameter {:?} before a later segment: servlet containers strip it and \
                         read another route; send the path without it",
                        String::from_utf8_lossy(&s[at..])
                    )));
                }
                out.push(s);
                trailing = false;
            }
        }
    }
    let mut path = Vec::with_capacity(decoded.len());
    for seg in &out {
        path.push(b'/');
        path.extend_from_slice(seg);
    }
    if trailing || out.is_empty() {
        path.push(b'/');
    }
    // Only ASCII went in and only ASCII was written.
    String::from_utf8(path)
        .map(Cow::Owned)
        .map_err(|_| PathError("the path is not ASCII".into()))
}

/// `path` with unreserved escapes decoded and the others in upper case; refuses the escapes
/// and characters the module docs list.
fn decode(path: &[u8]) -> Result<Vec<u8>, PathError> {
    let mut out = Vec::with_capacity(path.len());
    let mut i = 0;
    while i < path.len() {
        match path[i] {
            b'%' => {
                let hex = |b: u8| (b as char).to_digit(16);
                let (Some(hi), Some(lo)) = (
                    path.get(i + 1).copied().and_then(hex),
                    path.get(i + 2).copied().and_then(hex),
                ) else {
                    return Err(PathError(format!(
                        "malformed percent-encoding at byte {} of the path",
                        i + 1
                    )));
                };
                let b = (hi * 16 + lo) as u8;
                if is_unreserved(b) {
                    out.push(b);
                } else if b == b'/' || b == b'\\' {
                    return Err(PathError(format!(
                        "an encoded {:?} (%{:02X}) in the path: some servers decode it into a \
                         separator and read another route; send it unencoded or not at all",
                        b as char, b
                    )));
                } else if b < 0x20 || b == 0x7f {
                    return Err(PathError(format!(
                        "an encoded control character (%{b:02X}) in the path"
                    )));
                } else {
                    out.extend_from_slice(format!("%{b:02X}").as_bytes());
                }
                i += 3;
            }
            b'\\' => {
                return Err(PathError(
                    "a backslash in the path: some servers read it as `/`; send `/`".into(),
                ));
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Ok(out)
}

/// `Err` for a method the limiter and the application could read differently: one with
/// lower-case letters. Method names are case-sensitive (RFC 9110 §9.1) and every registered
/// one is upper case, yet many frameworks upper-case what they are sent: `post` would be
/// POST to them and not to a selector, so it is refused rather than guessed at.
pub fn check_method(method: &str) -> Result<(), PathError> {
    if method.bytes().any(|b| b.is_ascii_lowercase()) {
        return Err(PathError(format!(
            "method {method:?}: method names are case-sensitive (RFC 9110 §9.1); send {:?}",
            method.to_ascii_uppercase()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(p: &str) -> String {
        normalize(p)
            .map(Cow::into_owned)
            .unwrap_or_else(|e| format!("ERR {e}"))
    }

    #[test]
    fn one_spelling_per_route() {
        for (sent, want) in [
            ("/api/x", "/api/x"),
            ("//api/x", "/api/x"),
            ("/api//x", "/api/x"),
            ("/%61pi/x", "/api/x"),
            ("/%61%70%69/x", "/api/x"),
            ("/./api/x", "/api/x"),
            ("/a/../api/x", "/api/x"),
            ("/../../api/x", "/api/x"),
            ("/api/%2e%2e/closed", "/closed"),
            ("/api/.%2E/closed", "/closed"),
            ("/api/", "/api/"),
            ("/api/.", "/api/"),
            ("/api/x/..", "/api/"),
            ("/", "/"),
            ("//", "/"),
            ("/a%20b", "/a%20b"),
            ("/a%c3%a9", "/a%C3%A9"),
            ("/.well-known/x", "/.well-known/x"),
            ("/api/x;v=1", "/api/x;v=1"),
            ("*", "*"),
        ] {
            assert_eq!(n(sent), want, "{sent}");
        }
    }

    #[test]
    fn spellings_an_application_could_read_as_another_route_are_refused() {
        for sent in [
            "/api%2Fx", "/api%2fx", "/api%5Cx", "/api\\x", "/api%00", "/api%0a", "/api%", "/api%4",
            "/api%zz", "/api;x/y",
        ] {
            assert!(normalize(sent).is_err(), "{sent}");
        }
    }

    #[test]
    fn lower_case_methods_are_refused_and_upper_case_ones_pass() {
        for m in ["GET", "POST", "PROPFIND", "M-SEARCH"] {
            assert_eq!(check_method(m), Ok(()));
        }
        for m in ["post", "Post", "gEt"] {
            assert!(check_method(m).unwrap_err().0.contains("case-sensitive"));
        }
    }
}
