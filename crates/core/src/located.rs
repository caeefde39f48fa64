//! Errors located in a file a person wrote: the file, the 1-based line and column, the path of
//! the offending value (`limit[2].capacity`), and what was expected there.
//!
//! A parser reports where a *syntax or type* error is; a rule that spans fields (a window that
//! ends before it starts, a name given twice) is checked after parsing, and is pointed at the
//! offending value by its path. Finding a path's position is format-specific: [`locate`] does
//! it for JSON; a reader of another format finds the position its own way and still reports a
//! [`Located`] error, so every message has the same shape. Needs no feature: plain text
//! handling, no I/O.

use std::fmt;

/// One step of a path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathSeg {
    /// An object member (a table's key).
    Key(String),
    /// An array element.
    Index(usize),
}

/// Renders a path as `clients[0].arrival.rate_per_sec` (`.` for the root).
pub fn render(path: &[PathSeg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            PathSeg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            PathSeg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    if out.is_empty() { ".".into() } else { out }
}

/// Parses a path as [`render`] writes it (`limit[2].capacity`; `.` or an empty text is the
/// root). Keys are taken as written: a key holding `.` or `[` cannot be told apart.
pub fn parse_path(path: &str) -> Vec<PathSeg> {
    let mut out = Vec::new();
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let mut pieces = part.split('[');
        if let Some(key) = pieces.next().filter(|k| !k.is_empty()) {
            out.push(PathSeg::Key(key.to_owned()));
        }
        for index in pieces {
            if let Ok(i) = index.trim_end_matches(']').parse() {
                out.push(PathSeg::Index(i));
            }
        }
    }
    out
}

/// The 1-based line and column (counted in characters) of byte `offset` in `text`; an offset
/// beyond the text, or inside a character, counts from the character boundary before it.
pub fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..text.floor_char_boundary(offset.min(text.len()))];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// An error at a place in a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located {
    /// The file, as the user named it.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// The path of the value, as [`render`] writes it (`.` for the whole file).
    pub path: String,
    /// What is wrong, and what was expected.
    pub message: String,
}

impl Located {
    /// The error `message` at `(line, column)` of `file`, about the value at `path` (an empty
    /// path is the whole file).
    pub fn new(
        file: impl Into<String>,
        (line, column): (usize, usize),
        path: &str,
        message: impl Into<String>,
    ) -> Located {
        Located {
            file: file.into(),
            line,
            column,
            path: if path.is_empty() {
                ".".into()
            } else {
                path.into()
            },
            message: message.into(),
        }
    }
}

impl fmt::Display for Located {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: at {}: {}",
            self.file, self.line, self.column, self.path, self.message
        )
    }
}

impl std::error::Error for Located {}

impl From<Located> for String {
    fn from(l: Located) -> String {
        l.to_string()
    }
}

/// The 1-based line and column of the value at `path` in `text` (valid JSON), or of its
/// deepest ancestor present in the text.
pub fn locate(text: &str, path: &[PathSeg]) -> Option<(usize, usize)> {
    let mut s = Scanner {
        b: text.as_bytes(),
        pos: 0,
    };
    s.ws();
    let at = s.find(path)?;
    Some(line_column(text, at))
}

struct Scanner<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        self.ws();
        (self.peek()? == c).then(|| self.pos += 1)
    }

    /// Reads a string's raw content (escapes kept as written; the keys looked for have none).
    fn string(&mut self) -> Option<&[u8]> {
        self.eat(b'"')?;
        let start = self.pos;
        loop {
            match self.peek()? {
                b'\\' => self.pos += 2,
                b'"' => break,
                _ => self.pos += 1,
            }
        }
        let s = &self.b[start..self.pos];
        self.pos += 1;
        Some(s)
    }

    fn skip_value(&mut self) -> Option<()> {
        self.ws();
        match self.peek()? {
            b'"' => self.string().map(|_| ()),
            b'{' => self
                .members(|s, _| s.skip_value().map(|_| false))
                .map(|_| ()),
            b'[' => self
                .elements(|s, _| s.skip_value().map(|_| false))
                .map(|_| ()),
            _ => {
                while !matches!(
                    self.peek(),
                    None | Some(b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t')
                ) {
                    self.pos += 1;
                }
                Some(())
            }
        }
    }

    /// Walks an object's members; `f` reads the value and returns true to stop there.
    fn members(&mut self, mut f: impl FnMut(&mut Self, &[u8]) -> Option<bool>) -> Option<bool> {
        self.eat(b'{')?;
        self.ws();
        if self.peek()? == b'}' {
            self.pos += 1;
            return Some(false);
        }
        loop {
            let key = self.string()?.to_vec();
            self.eat(b':')?;
            self.ws();
            if f(self, &key)? {
                return Some(true);
            }
            self.ws();
            match self.peek()? {
                b',' => self.pos += 1,
                b'}' => {
                    self.pos += 1;
                    return Some(false);
                }
                _ => return None,
            }
            self.ws();
        }
    }

    fn elements(&mut self, mut f: impl FnMut(&mut Self, usize) -> Option<bool>) -> Option<bool> {
        self.eat(b'[')?;
        self.ws();
        if self.peek()? == b']' {
            self.pos += 1;
            return Some(false);
        }
        let mut i = 0;
        loop {
            self.ws();
            if f(self, i)? {
                return Some(true);
            }
            self.ws();
            match self.peek()? {
                b',' => self.pos += 1,
                b']' => {
                    self.pos += 1;
                    return Some(false);
                }
                _ => return None,
            }
            i += 1;
        }
    }

    /// At a value: the offset of the value at `path` below it, or of the deepest ancestor found.
    fn find(&mut self, path: &[PathSeg]) -> Option<usize> {
        self.ws();
        let here = self.pos;
        let Some((first, rest)) = path.split_first() else {
            return Some(here);
        };
        let mut found = None;
        let hit = match first {
            PathSeg::Key(k) if self.peek() == Some(b'{') => self.members(|s, key| {
                if key == k.as_bytes() {
                    found = s.find(rest);
                    Some(true)
                } else {
                    s.skip_value().map(|_| false)
                }
            }),
            PathSeg::Index(n) if self.peek() == Some(b'[') => self.elements(|s, i| {
                if i == *n {
                    found = s.find(rest);
                    Some(true)
                } else {
                    s.skip_value().map(|_| false)
                }
            }),
            _ => Some(false),
        };
        match (hit, found) {
            (Some(true), Some(at)) => Some(at),
            _ => Some(here),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> PathSeg {
        PathSeg::Key(k.into())
    }

    #[test]
    fn finds_nested_json_values_and_falls_back_to_ancestors() {
        let text = "{\n  \"a\": [1, {\"b\": 22}],\n  \"c\": \"x\"\n}";
        assert_eq!(locate(text, &[key("c")]), Some((3, 8)));
        assert_eq!(
            locate(text, &[key("a"), PathSeg::Index(1), key("b")]),
            Some((2, 18))
        );
        assert_eq!(locate(text, &[key("a"), PathSeg::Index(7)]), Some((2, 8)));
        assert_eq!(locate(text, &[key("zz")]), Some((1, 1)));
        assert_eq!(render(&[key("a"), PathSeg::Index(1), key("b")]), "a[1].b");
    }

    #[test]
    fn a_rendered_path_parses_back() {
        for path in [
            vec![key("a"), PathSeg::Index(1), key("b")],
            vec![PathSeg::Index(0), key("descriptors"), PathSeg::Index(2)],
            vec![key("m"), PathSeg::Index(1), PathSeg::Index(3)],
            vec![],
        ] {
            assert_eq!(parse_path(&render(&path)), path, "{}", render(&path));
        }
        assert_eq!(parse_path(""), []);
    }

    #[test]
    fn columns_count_characters() {
        assert_eq!(line_column("ab\ncé=x", 7), (2, 4));
        assert_eq!(line_column("é", 1), (1, 1));
        assert_eq!(line_column("ab", 99), (1, 3));
    }

    #[test]
    fn a_located_error_names_file_line_column_and_path() {
        let e = Located::new(
            "limits.toml",
            (5, 12),
            "limit[0].capacity",
            "expected 1 to 10",
        );
        assert_eq!(
            e.to_string(),
            "limits.toml:5:12: at limit[0].capacity: expected 1 to 10"
        );
        assert_eq!(Located::new("f", (1, 1), "", "bad").path, ".");
    }
}
