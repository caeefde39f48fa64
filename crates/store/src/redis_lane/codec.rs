//! The lane's codec, apart from its connection: a command encoded as a RESP array of bulk
//! strings in one pass over its arguments, and a RESP2 reply read by the shapes the scripts
//! answer with (an array of integers, or an error), every other reply skipped whole. Bounded:
//! a line, an array and their nesting longer or deeper than a limiter's replies are errors.

use ratelab_core::headers::decimal;

/// Longest reply the lane reads (bulk string or error line), in bytes.
const MAX_LINE: usize = 64 * 1024;
/// Longest array reply the lane reads.
const MAX_ARRAY: usize = 1 << 16;
/// Deepest nesting of arrays the lane reads.
const MAX_DEPTH: usize = 8;

/// A reply, by the shapes the scripts answer with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// An array of integers.
    Ints(Vec<i64>),
    /// An error reply, its text (`NOSCRIPT No matching script…`, `CORRUPT …`).
    Error(String),
    /// Any other well-formed reply (a status, a bulk string, nil, a mixed array).
    Other,
}

impl Reply {
    /// An error reply's code: its first word (`NOSCRIPT`, `CORRUPT`, `ERR`).
    pub fn error_code(&self) -> Option<&str> {
        match self {
            Reply::Error(text) => text.split(' ').next(),
            _ => None,
        }
    }
}

/// One argument of a command, written straight into the connection's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arg<'a> {
    /// Bytes.
    Bytes(&'a [u8]),
    /// Two byte strings sent as one argument (a key prefix and a key).
    Joined(&'a [u8], &'a [u8]),
    /// An integer, in decimal.
    Int(u64),
    /// Arguments encoded once ([`Encoded`]): a limit's parameters, sent with every call.
    Encoded(&'a Encoded),
}

/// Arguments encoded once, for the commands that send them on every call (a script's name
/// and a limit's parameters): a command takes them with one copy of their bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoded {
    /// The arguments as bulk strings, one after the other.
    resp: Box<[u8]>,
    /// Where each argument's bytes are in `resp`.
    args: Box<[(usize, usize)]>,
}

impl Encoded {
    /// `args`, encoded.
    pub fn new<'a>(args: impl IntoIterator<Item = Arg<'a>>) -> Encoded {
        let mut resp = Vec::new();
        let mut at = Vec::new();
        for arg in args {
            match arg {
                Arg::Encoded(e) => {
                    let base = resp.len();
                    resp.extend_from_slice(&e.resp);
                    at.extend(e.args.iter().map(|&(a, b)| (base + a, base + b)));
                }
                arg => {
                    let mut digits = [0u8; 20];
                    let (a, b) = arg.parts(&mut digits);
                    resp.push(b'$');
                    push_decimal(&mut resp, (a.len() + b.len()) as u64);
                    resp.extend_from_slice(b"\r\n");
                    let start = resp.len();
                    resp.extend_from_slice(a);
                    resp.extend_from_slice(b);
                    at.push((start, resp.len()));
                    resp.extend_from_slice(b"\r\n");
                }
            }
        }
        Encoded {
            resp: resp.into(),
            args: at.into(),
        }
    }

    /// Each argument's bytes.
    pub fn args(&self) -> impl Iterator<Item = &[u8]> {
        self.args.iter().map(|&(a, b)| &self.resp[a..b])
    }
}

impl<'a> Arg<'a> {
    /// A plain argument's bytes, in two parts (the second empty but for [`Arg::Joined`]);
    /// an integer's digits are written into `digits`. Nothing for [`Arg::Encoded`].
    fn parts<'b>(&self, digits: &'b mut [u8; 20]) -> (&'b [u8], &'b [u8])
    where
        'a: 'b,
    {
        match *self {
            Arg::Bytes(b) => (b, &[]),
            Arg::Joined(a, b) => (a, b),
            Arg::Int(v) => (decimal(digits, v), &[]),
            Arg::Encoded(_) => (&[], &[]),
        }
    }
}

/// The same argument for a redis-rs command, written into its buffer.
impl redis::ToRedisArgs for Arg<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        use std::io::Write as _;
        match *self {
            Arg::Bytes(b) => out.write_arg(b),
            Arg::Joined(a, b) => {
                let mut w = out.writer_for_next_arg();
                // Into redis-rs's own buffer: the writes cannot fail.
                let _ = w.write_all(a);
                let _ = w.write_all(b);
            }
            Arg::Int(v) => out.write_arg(decimal(&mut [0; 20], v)),
            Arg::Encoded(e) => e.args().for_each(|a| out.write_arg(a)),
        }
    }

    fn num_of_args(&self) -> usize {
        match self {
            Arg::Encoded(e) => e.args.len(),
            _ => 1,
        }
    }
}

/// One command, encoded for the wire: its bytes are `buf[start..]` (the array's header is
/// written last, just before the arguments, once their number is known).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    buf: Vec<u8>,
    start: usize,
}

impl Command {
    /// The command `args` (its name first).
    pub fn new<'a>(args: impl Iterator<Item = Arg<'a>>) -> Command {
        let mut buf = Vec::with_capacity(256);
        let start = encode(&mut buf, args);
        Command { buf, start }
    }

    /// Its bytes, a RESP array of bulk strings.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

/// The most bytes an array's header takes: `*`, 20 digits, CRLF.
const HEADER_ROOM: usize = 23;

/// Writes the command `args` into the empty `out` as a RESP array of bulk strings, in one
/// pass over them: the arguments after room for the array's header, which is written last,
/// right before them. Returns where the command starts in `out`.
fn encode<'a>(out: &mut Vec<u8>, args: impl Iterator<Item = Arg<'a>>) -> usize {
    let mut digits = [0u8; 20];
    out.clear();
    out.resize(HEADER_ROOM, 0);
    let mut n = 0u64;
    for arg in args {
        let (a, b): (&[u8], &[u8]) = match arg {
            Arg::Bytes(b) => (b, &[]),
            Arg::Joined(a, b) => (a, b),
            Arg::Int(v) => (decimal(&mut digits, v), &[]),
            Arg::Encoded(e) => {
                out.extend_from_slice(&e.resp);
                n += e.args.len() as u64;
                continue;
            }
        };
        out.push(b'$');
        push_decimal(out, (a.len() + b.len()) as u64);
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(a);
        out.extend_from_slice(b);
        out.extend_from_slice(b"\r\n");
        n += 1;
    }
    let count = decimal(&mut digits, n);
    let start = HEADER_ROOM - count.len() - 3;
    out[start] = b'*';
    out[start + 1..HEADER_ROOM - 2].copy_from_slice(count);
    out[HEADER_ROOM - 2..HEADER_ROOM].copy_from_slice(b"\r\n");
    start
}

fn push_decimal(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(decimal(&mut [0; 20], v));
}

/// Bytes that are not a RESP2 reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolError(pub &'static str);

/// Parses one RESP2 reply at the start of `buf`: the reply and the bytes it took, `None` while
/// it is incomplete, or an error for bytes that cannot be one.
pub fn parse(buf: &[u8]) -> Result<Option<(Reply, usize)>, ProtocolError> {
    let Some((head, mut at)) = line(buf, 0)? else {
        return Ok(None);
    };
    let (&kind, rest) = head.split_first().ok_or(ProtocolError("an empty line"))?;
    let reply = match kind {
        b'-' => Reply::Error(String::from_utf8_lossy(rest).into_owned()),
        b'*' => {
            let n = integer(rest)?;
            if n < 0 {
                return Ok(Some((Reply::Other, at)));
            }
            let n = usize::try_from(n)
                .ok()
                .filter(|&n| n <= MAX_ARRAY)
                .ok_or(ProtocolError("an array longer than the lane reads"))?;
            let mut ints = Vec::with_capacity(n.min(64));
            let mut all_ints = true;
            for _ in 0..n {
                if all_ints && buf.get(at) == Some(&b':') {
                    let Some((item, next)) = line(buf, at)? else {
                        return Ok(None);
                    };
                    ints.push(integer(&item[1..])?);
                    at = next;
                } else {
                    all_ints = false;
                    let Some(next) = skip(buf, at, 1)? else {
                        return Ok(None);
                    };
                    at = next;
                }
            }
            if all_ints {
                Reply::Ints(ints)
            } else {
                Reply::Other
            }
        }
        _ => match skip(buf, 0, 0)? {
            Some(next) => {
                at = next;
                Reply::Other
            }
            None => return Ok(None),
        },
    };
    Ok(Some((reply, at)))
}

/// The end of the reply that starts at `at`, of any kind, arrays `depth` deep already.
fn skip(buf: &[u8], at: usize, depth: usize) -> Result<Option<usize>, ProtocolError> {
    let Some((head, next)) = line(buf, at)? else {
        return Ok(None);
    };
    let (&kind, rest) = head.split_first().ok_or(ProtocolError("an empty line"))?;
    match kind {
        b'+' | b'-' => Ok(Some(next)),
        b':' => integer(rest).map(|_| Some(next)),
        b'$' => {
            let n = integer(rest)?;
            if n < 0 {
                return Ok(Some(next));
            }
            let n = usize::try_from(n)
                .ok()
                .filter(|&n| n <= MAX_LINE)
                .ok_or(ProtocolError("a bulk string longer than the lane reads"))?;
            let end = next + n + 2;
            match buf.get(next + n..end) {
                None => Ok(None),
                Some(b"\r\n") => Ok(Some(end)),
                Some(_) => Err(ProtocolError("a bulk string not ended by CRLF")),
            }
        }
        b'*' => {
            if depth >= MAX_DEPTH {
                return Err(ProtocolError("arrays nested deeper than the lane reads"));
            }
            let n = integer(rest)?;
            if n > MAX_ARRAY as i64 {
                return Err(ProtocolError("an array longer than the lane reads"));
            }
            let mut at = next;
            for _ in 0..n.max(0) {
                match skip(buf, at, depth + 1)? {
                    Some(next) => at = next,
                    None => return Ok(None),
                }
            }
            Ok(Some(at))
        }
        _ => Err(ProtocolError("an unknown reply type")),
    }
}

/// The line at `at` (without its CRLF) and where the next begins.
fn line(buf: &[u8], at: usize) -> Result<Option<(&[u8], usize)>, ProtocolError> {
    let rest = buf.get(at..).unwrap_or_default();
    match rest.iter().position(|&b| b == b'\n') {
        Some(end) if end > 0 && rest[end - 1] == b'\r' => {
            Ok(Some((&rest[..end - 1], at + end + 1)))
        }
        Some(_) => Err(ProtocolError("a line not ended by CRLF")),
        None if rest.len() > MAX_LINE => Err(ProtocolError("a line longer than the lane reads")),
        None => Ok(None),
    }
}

/// A RESP integer: an optional `-` and 1 to 19 digits, within `i64`.
fn integer(text: &[u8]) -> Result<i64, ProtocolError> {
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(ProtocolError("an integer that is not one"));
    }
    let mut v: i64 = 0;
    for &d in digits {
        let d = i64::from(d - b'0');
        v = v
            .checked_mul(10)
            .and_then(|v| {
                if negative {
                    v.checked_sub(d)
                } else {
                    v.checked_add(d)
                }
            })
            .ok_or(ProtocolError("an integer beyond 64 bits"))?;
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::{Arg, Command, ProtocolError, Reply, parse};

    #[test]
    fn commands_are_encoded_as_redis_rs_encodes_them() {
        let args = [
            Arg::Bytes(b"EVALSHA"),
            Arg::Joined(b"ratelab:tb:", b"alice"),
            Arg::Int(0),
            Arg::Int(u64::MAX),
            Arg::Bytes(b""),
            Arg::Int(1_000_000_000),
        ];
        let ours = Command::new(args.into_iter());
        let mut theirs = redis::cmd("EVALSHA");
        for a in &args[1..] {
            theirs.arg(*a);
        }
        assert_eq!(ours.as_bytes(), theirs.get_packed_command());
        // An array header of several digits, written before the arguments it counts.
        for n in [9u64, 10, 99, 100, 1234] {
            let ours = Command::new((0..n).map(Arg::Int));
            let mut theirs = redis::Cmd::new();
            (0..n).for_each(|i| {
                theirs.arg(Arg::Int(i));
            });
            assert_eq!(ours.as_bytes(), theirs.get_packed_command(), "{n}");
        }
    }

    #[test]
    fn arguments_encoded_once_are_sent_as_the_same_arguments() {
        use super::Encoded;
        let params = Encoded::new([Arg::Int(100), Arg::Bytes(b""), Arg::Int(u64::MAX)]);
        let nested = Encoded::new([
            Arg::Bytes(b"EVALSHA"),
            Arg::Encoded(&params),
            Arg::Joined(b"p:", b"k"),
        ]);
        let plain = [
            Arg::Bytes(b"EVALSHA"),
            Arg::Int(100),
            Arg::Bytes(b""),
            Arg::Int(u64::MAX),
            Arg::Joined(b"p:", b"k"),
            Arg::Int(7),
        ];
        let ours = Command::new([Arg::Encoded(&nested), Arg::Int(7)].into_iter());
        assert_eq!(ours.as_bytes(), Command::new(plain.into_iter()).as_bytes());
        let mut theirs = redis::Cmd::new();
        theirs.arg(Arg::Encoded(&nested)).arg(Arg::Int(7));
        let mut expected = redis::Cmd::new();
        for a in plain {
            expected.arg(a);
        }
        assert_eq!(theirs.get_packed_command(), expected.get_packed_command());
        let args: Vec<&[u8]> = nested.args().collect();
        assert_eq!(
            args,
            [
                &b"EVALSHA"[..],
                b"100",
                b"",
                b"18446744073709551615",
                b"p:k"
            ]
        );
        // Nothing encoded is nothing sent.
        let empty = Encoded::new([]);
        let ours = Command::new([Arg::Int(1), Arg::Encoded(&empty)].into_iter());
        assert_eq!(ours.as_bytes(), b"*1\r\n$1\r\n1\r\n");
    }

    #[test]
    fn reads_the_reply_shapes() {
        assert_eq!(
            parse(b"*3\r\n:1\r\n:-20\r\n:300\r\nrest"),
            Ok(Some((Reply::Ints(vec![1, -20, 300]), 20)))
        );
        assert_eq!(
            parse(b"-NOSCRIPT No matching script\r\n"),
            Ok(Some((
                Reply::Error("NOSCRIPT No matching script".into()),
                30
            )))
        );
        assert_eq!(parse(b"+OK\r\n"), Ok(Some((Reply::Other, 5))));
        assert_eq!(parse(b"$3\r\nabc\r\n"), Ok(Some((Reply::Other, 9))));
        assert_eq!(parse(b"$-1\r\n"), Ok(Some((Reply::Other, 5))));
        assert_eq!(parse(b"*-1\r\n"), Ok(Some((Reply::Other, 5))));
        assert_eq!(parse(b"*0\r\n"), Ok(Some((Reply::Ints(vec![]), 4))));
        assert_eq!(
            parse(b"*2\r\n:1\r\n$1\r\nx\r\n"),
            Ok(Some((Reply::Other, 15))),
            "a mixed array"
        );
        assert_eq!(
            parse(b"*2\r\n*1\r\n:1\r\n:2\r\n"),
            Ok(Some((Reply::Other, 16))),
            "a nested array"
        );
        let code = Reply::Error("CORRUPT stored bucket".into());
        assert_eq!(code.error_code(), Some("CORRUPT"));
        assert_eq!(
            parse(b":9223372036854775807\r\n"),
            Ok(Some((Reply::Other, 22)))
        );
        assert_eq!(
            parse(b"*1\r\n:-9223372036854775808\r\n"),
            Ok(Some((Reply::Ints(vec![i64::MIN]), 27)))
        );
    }

    #[test]
    fn every_prefix_of_a_reply_is_incomplete_never_wrong() {
        let replies: [&[u8]; 5] = [
            b"*4\r\n:1\r\n:2\r\n:-3\r\n:44\r\n",
            b"-ERR wrong\r\n",
            b"$5\r\nab\r\nc\r\n",
            b"*2\r\n*1\r\n$2\r\nxy\r\n:2\r\n",
            b"+OK\r\n",
        ];
        for r in replies {
            for cut in 0..r.len() {
                assert_eq!(parse(&r[..cut]), Ok(None), "{:?} cut at {cut}", r);
            }
            assert!(
                matches!(parse(r), Ok(Some((_, n))) if n == r.len()),
                "{r:?}"
            );
        }
    }

    #[test]
    fn bytes_that_are_no_reply_are_errors_not_panics() {
        let bad: [&[u8]; 12] = [
            b"?what\r\n",
            b"\r\n",
            b"*x\r\n",
            b"*1\r\n:\r\n",
            b"*1\r\n:12a\r\n",
            b"*1\r\n:9223372036854775808\r\n",
            b"*1\r\n:-9223372036854775809\r\n",
            b"*99999999\r\n",
            b"$99999999\r\n",
            b"$2\r\nabcd\r\n",
            b"+OK\n",
            b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n",
        ];
        for b in bad {
            assert!(
                matches!(parse(b), Err(ProtocolError(_))),
                "{b:?}: {:?}",
                parse(b)
            );
        }
        let long = vec![b'+'; 70 * 1024];
        assert!(parse(&long).is_err(), "an endless line");
        // Random bytes: a verdict every time.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            let mut buf = Vec::new();
            for _ in 0..(x % 24) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                buf.push(b"*:$-+\r\n0123456789x"[(x % 18) as usize]);
            }
            let _ = parse(&buf);
            x = x.wrapping_add(1);
        }
    }
}
