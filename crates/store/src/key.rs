//! Validated bucket keys.

use core::fmt;

/// Longest key, in bytes.
pub const MAX_KEY_LEN: usize = 256;
/// Longest key-space prefix ([`Key::prefixed`]), in bytes.
pub const MAX_PREFIX_LEN: usize = 96;

/// A bucket key: 1 to [`MAX_KEY_LEN`] bytes of UTF-8 without control characters.
///
/// Keys are chosen by clients, so whatever hashes them must be keyed (std's `RandomState`,
/// or the in-memory store's seeded SipHash): a key carries no hash of its own. Equality,
/// order and hashing are those of the text.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    text: Box<str>,
}

/// Why a key was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyError {
    /// The key was empty.
    Empty,
    /// The key was longer than [`MAX_KEY_LEN`] bytes.
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The key contained a control character.
    ControlCharacter {
        /// Byte offset of the first one.
        at: usize,
    },
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::Empty => write!(f, "invalid key: empty (expected 1 to {MAX_KEY_LEN} bytes)"),
            KeyError::TooLong { len } => {
                write!(
                    f,
                    "invalid key: {len} bytes (expected at most {MAX_KEY_LEN})"
                )
            }
            KeyError::ControlCharacter { at } => {
                write!(f, "invalid key: control character at byte {at}")
            }
        }
    }
}

impl std::error::Error for KeyError {}

impl Key {
    /// Validates `key`.
    pub fn new(key: &str) -> Result<Key, KeyError> {
        Key::check(key)?;
        Ok(Key { text: key.into() })
    }

    /// [`Key::new`] on a key already in a `String` of its own, which becomes the key's.
    pub fn from_string(key: String) -> Result<Key, KeyError> {
        Key::check(&key)?;
        Ok(Key {
            text: key.into_boxed_str(),
        })
    }

    /// Whether `key` would make a valid key (its length and control characters, as
    /// [`Key::new`] checks them), without making one.
    pub fn check(key: &str) -> Result<(), KeyError> {
        if key.is_empty() {
            return Err(KeyError::Empty);
        }
        if key.len() > MAX_KEY_LEN {
            return Err(KeyError::TooLong { len: key.len() });
        }
        control_at(key).map_or(Ok(()), |at| Err(KeyError::ControlCharacter { at }))
    }

    /// `key` in the key space `prefix` names (a store shared by several limits gives each
    /// its own): `prefix` is the operator's, so it is bounded separately, to
    /// [`MAX_PREFIX_LEN`] bytes without control characters.
    pub fn prefixed(prefix: &str, key: &Key) -> Result<Key, KeyError> {
        Key::check_prefix(prefix)?;
        Ok(Key::joined(prefix, key))
    }

    /// [`Key::prefixed`] of `Key::new(value)`, made in one allocation: `value` is checked as
    /// [`Key::new`] checks a key, `prefix` as [`Key::prefixed`] checks one.
    pub fn tagged(prefix: &str, value: &str) -> Result<Key, KeyError> {
        Key::check(value)?;
        Key::check_prefix(prefix)?;
        Ok(Key::join(prefix, value))
    }

    /// A prefix's bounds, as [`Key::prefixed`] documents them.
    fn check_prefix(prefix: &str) -> Result<(), KeyError> {
        if prefix.len() > MAX_PREFIX_LEN {
            return Err(KeyError::TooLong { len: prefix.len() });
        }
        control_at(prefix).map_or(Ok(()), |at| Err(KeyError::ControlCharacter { at }))
    }

    /// `key` under a `prefix` that [`Key::prefixed`] already accepted.
    pub(crate) fn joined(prefix: &str, key: &Key) -> Key {
        Key::join(prefix, &key.text)
    }

    /// `text`, a key checked already (a store's copy of one).
    pub(crate) fn stored(text: &str) -> Key {
        Key { text: text.into() }
    }

    /// `prefix` and then `text`, checked already, as one key.
    fn join(prefix: &str, text: &str) -> Key {
        let mut joined = String::with_capacity(prefix.len() + text.len());
        joined.push_str(prefix);
        joined.push_str(text);
        Key {
            text: joined.into(),
        }
    }

    /// The key text.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

/// The byte offset of the first control character in `s` (`char::is_control`), if any. Text
/// of printable ASCII, the usual key, is told by one pass over its bytes.
fn control_at(s: &str) -> Option<usize> {
    if s.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return None;
    }
    s.char_indices()
        .find(|(_, c)| c.is_control())
        .map(|(at, _)| at)
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.text, f)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key and a prefix at their bounds are taken; a byte more, an empty key or a control
    /// character is refused.
    #[test]
    fn keys_and_prefixes_are_bounded_at_their_limits() {
        let k = Key::new("k").unwrap();
        assert!(Key::prefixed(&"p".repeat(MAX_PREFIX_LEN), &k).is_ok());
        assert!(Key::prefixed(&"p".repeat(MAX_PREFIX_LEN + 1), &k).is_err());
        assert!(Key::tagged(&"p".repeat(MAX_PREFIX_LEN + 1), "k").is_err());
        assert_eq!(Key::check(&"k".repeat(MAX_KEY_LEN)), Ok(()));
        let long = "k".repeat(MAX_KEY_LEN + 1);
        assert_eq!(
            Key::check(&long),
            Err(KeyError::TooLong {
                len: MAX_KEY_LEN + 1
            })
        );
        assert_eq!(Key::check(""), Err(KeyError::Empty));
        assert!(Key::check("a\tb").is_err());
        assert!(Key::tagged("p:", "a\u{7f}").is_err());
    }
}
