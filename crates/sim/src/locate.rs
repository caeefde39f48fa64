//! Finding a JSON path's line and column in a scenario's text.
//!
//! serde reports where a *syntax or type* error is; a rule that spans fields (a window that
//! ends before it starts, a gateway index beyond the cluster) is checked after parsing, and
//! this module points such errors at the offending value in the original text.

/// One step of a JSON path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathSeg {
    /// An object member.
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

/// The 1-based line and column of the value at `path` in `text` (valid JSON), or of its
/// deepest ancestor present in the text.
pub fn locate(text: &str, path: &[PathSeg]) -> Option<(usize, usize)> {
    let mut s = Scanner {
        b: text.as_bytes(),
        pos: 0,
    };
    s.ws();
    let at = s.find(path)?;
    let before = &text.as_bytes()[..at];
    let line = before.iter().filter(|&&c| c == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|&c| c == b'\n')
        .map_or(0, |i| i + 1);
    let column = text[line_start..at].chars().count() + 1;
    Some((line, column))
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

    /// Reads a string's raw content (escapes kept as written; scenario keys have none).
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

    #[test]
    fn finds_nested_values_and_falls_back_to_ancestors() {
        let text = "{\n  \"a\": [1, {\"b\": 22}],\n  \"c\": \"x\"\n}";
        let key = |k: &str| PathSeg::Key(k.into());
        assert_eq!(locate(text, &[key("c")]), Some((3, 8)));
        assert_eq!(
            locate(text, &[key("a"), PathSeg::Index(1), key("b")]),
            Some((2, 18))
        );
        assert_eq!(locate(text, &[key("a"), PathSeg::Index(7)]), Some((2, 8)));
        assert_eq!(locate(text, &[key("zz")]), Some((1, 1)));
        assert_eq!(render(&[key("a"), PathSeg::Index(1), key("b")]), "a[1].b");
    }
}
