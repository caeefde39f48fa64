//! Validated bucket keys.

use core::fmt;

/// Longest key, in bytes.
pub const MAX_KEY_LEN: usize = 256;

/// A bucket key: 1 to [`MAX_KEY_LEN`] bytes of UTF-8 without control characters.
///
/// A key carries its FNV-1a hash, computed once when it is validated: stores pick a shard and
/// a map slot from it without hashing the text again. Equality and order are those of the text.
#[derive(Clone)]
pub struct Key {
    hash: u64,
    text: Box<str>,
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.hash == other.hash && self.text == other.text
    }
}

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Key) -> core::cmp::Ordering {
        self.text.cmp(&other.text)
    }
}

impl core::hash::Hash for Key {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// FNV-1a over `bytes`: deterministic (no per-process seed) and cheap for short keys.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
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
        if key.is_empty() {
            return Err(KeyError::Empty);
        }
        if key.len() > MAX_KEY_LEN {
            return Err(KeyError::TooLong { len: key.len() });
        }
        if let Some((at, _)) = key.char_indices().find(|(_, c)| c.is_control()) {
            return Err(KeyError::ControlCharacter { at });
        }
        Ok(Key {
            hash: fnv1a(key.as_bytes()),
            text: key.into(),
        })
    }

    /// The key text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The key's FNV-1a hash.
    pub fn hash_u64(&self) -> u64 {
        self.hash
    }
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
