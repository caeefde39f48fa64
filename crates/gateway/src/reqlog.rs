//! The request log: a UUIDv7 per request, one JSON line per request, and the time-range scan.
//!
//! **Ids.** Every request's answer gets a UUIDv7 from its gateway's [`IdGenerator`]: 48 bits of
//! Unix milliseconds, then a 12-bit counter within the millisecond (RFC 9562 §6.2, method 1),
//! then 62 random bits. A generator never goes backwards: if its clock steps back, it keeps the
//! last millisecond and counts on. The id is minted when the request is *decided*, in the same
//! critical section that emits its log line, so each gateway's log is sorted by id by
//! construction — the property the scan's binary search rests on — and the id's time is the
//! decision's time, the one that counts against a window.
//!
//! **Lines.** The gateway emits one `tracing` event per request, target
//! [`REQUEST_LOG_TARGET`], with the fields `id`, `gateway`, `trace`, `ip`, `key` (when an API
//! key was sent), `decision` (`allowed`, `denied`, `failed_open`, `bypassed`, `rejected`,
//! `bad_request`, `unavailable`), `layer` (the layer that decided or failed), `fail_open` (the
//! reason, when a layer failed open), `status`, and `remaining`. [`RequestLogLayer`] writes each
//! as one JSON object per line, `id` first, so a reader finds a line's time in its first 45
//! bytes.
//!
//! **Scan.** [`scan`] finds the lines whose id time is in `[from, to)` (ms) in one or more logs:
//! per file a binary search over byte offsets that reads only the id of O(log n) lines, then a
//! sequential read of the range, parsing only the lines in it; the files' matches are merged in
//! id order. Within one gateway the order is exact. Across gateways it is the order of their
//! clocks: two requests decided less than the clocks' skew apart may be merged out of true
//! order, and a window `[from, to)` selects from a skewed gateway the requests its clock placed
//! there, offset from true time by that skew. See `docs/GATEWAY.md`.

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng as _, SeedableRng};
use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::Context;
use uuid::Uuid;

/// The `tracing` target of request log events.
pub const REQUEST_LOG_TARGET: &str = "ratelab::request";

/// The prefix every request log line starts with, before the id.
const LINE_PREFIX: &[u8] = br#"{"id":""#;
/// Length of a hyphenated UUID.
const UUID_LEN: usize = 36;
/// Longest line the scanner reads; the gateway's lines are far shorter (keys ≤ 256 bytes).
const MAX_LINE: usize = 4_096;

/// Mints time-ordered UUIDv7s for one gateway.
#[derive(Debug)]
pub struct IdGenerator {
    last_ms: u64,
    counter: u16,
    rng: ChaCha8Rng,
}

impl IdGenerator {
    /// A generator whose random bits come from `seed`.
    pub fn new(seed: u64) -> IdGenerator {
        IdGenerator {
            last_ms: 0,
            counter: 0,
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// The next id at Unix time `unix_ms`; strictly greater than every id before it.
    pub fn next(&mut self, unix_ms: u64) -> Uuid {
        if unix_ms > self.last_ms {
            self.last_ms = unix_ms;
            // Start each millisecond at a random count in the lower half, leaving room to count.
            self.counter = (self.rng.next_u32() & 0x7ff) as u16;
        } else if self.counter < 0xfff {
            self.counter += 1;
        } else {
            // 4 096 ids in one millisecond: borrow the next one.
            self.last_ms += 1;
            self.counter = 0;
        }
        let mut bytes = [0u8; 10];
        bytes[0] = (self.counter >> 8) as u8;
        bytes[1] = self.counter as u8;
        self.rng.fill_bytes(&mut bytes[2..]);
        uuid::Builder::from_unix_timestamp_millis(self.last_ms, &bytes).into_uuid()
    }
}

/// The Unix milliseconds of a UUIDv7.
pub fn id_millis(id: &Uuid) -> Option<u64> {
    if id.get_version_num() != 7 {
        return None;
    }
    let b = id.as_bytes();
    Some(b[..6].iter().fold(0u64, |a, &x| a << 8 | u64::from(x)))
}

/// Where request log lines go.
pub trait LogSink: Send + Sync + 'static {
    /// Appends one line (without its newline), written by `gateway`.
    fn write_line(&self, gateway: &str, line: &str);
}

impl<S: LogSink> LogSink for std::sync::Arc<S> {
    fn write_line(&self, gateway: &str, line: &str) {
        (**self).write_line(gateway, line);
    }
}

/// Appends every line to one file, flushing each.
#[derive(Debug)]
pub struct FileSink(Mutex<std::io::LineWriter<File>>);

impl FileSink {
    /// Opens `path` for appending, creating it if absent: a restarted gateway continues its
    /// log. (Its new ids start from its clock, so they follow the old ones unless the clock
    /// stepped back across the restart.)
    pub fn create(path: &Path) -> std::io::Result<FileSink> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(FileSink(Mutex::new(std::io::LineWriter::new(file))))
    }
}

impl LogSink for FileSink {
    fn write_line(&self, _gateway: &str, line: &str) {
        let mut w = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // A full disk must not take the gateway down: the line is lost, the request is not.
        let _ = writeln!(w, "{line}");
    }
}

/// Keeps each gateway's lines in memory, by gateway name (the simulator's sink).
#[derive(Debug, Default)]
pub struct MemorySink(Mutex<BTreeMap<String, String>>);

impl MemorySink {
    /// Each gateway's log text.
    pub fn take(&self) -> BTreeMap<String, String> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl LogSink for MemorySink {
    fn write_line(&self, gateway: &str, line: &str) {
        let mut logs = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let log = logs.entry(gateway.to_owned()).or_default();
        log.push_str(line);
        log.push('\n');
    }
}

/// A `tracing` layer that writes request log events as JSON lines to a [`LogSink`].
#[derive(Debug)]
pub struct RequestLogLayer<S> {
    sink: S,
}

impl<S: LogSink> RequestLogLayer<S> {
    /// A layer writing to `sink`.
    pub fn new(sink: S) -> Self {
        RequestLogLayer { sink }
    }
}

/// Writes an event's fields as JSON members, in order, into one line; `id` goes to the front.
struct Line {
    text: String,
    gateway: String,
}

impl Line {
    fn member(&mut self, name: &str) {
        if self.text.len() > 1 {
            self.text.push(',');
        }
        json_string(&mut self.text, name);
        self.text.push(':');
    }

    fn string(&mut self, name: &str, value: &str) {
        if name == "id" && self.text.len() > 1 {
            // The scanner reads a line's time from its first bytes: `id` goes to the front.
            let mut front = String::from("{\"id\":");
            json_string(&mut front, value);
            front.push(',');
            front.push_str(&self.text[1..]);
            self.text = front;
            return;
        }
        self.member(name);
        json_string(&mut self.text, value);
        if name == "gateway" {
            value.clone_into(&mut self.gateway);
        }
    }

    fn raw(&mut self, name: &str, value: impl fmt::Display) {
        use fmt::Write as _;
        self.member(name);
        let _ = write!(self.text, "{value}");
    }
}

/// Appends `s` as a JSON string.
fn json_string(out: &mut String, s: &str) {
    use fmt::Write as _;
    out.push('"');
    // Every byte that needs escaping is ASCII, so it never splits a UTF-8 sequence: copy the
    // runs between them whole.
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let escape = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(&s[start..i]);
        if escape.is_empty() {
            let _ = write!(out, "\\u{b:04x}");
        } else {
            out.push_str(escape);
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

impl Visit for Line {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.string(field.name(), value);
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.raw(field.name(), value);
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.raw(field.name(), value);
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.raw(field.name(), value);
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.string(field.name(), &format!("{value:?}"));
    }
}

impl<S: LogSink, Sub: tracing::Subscriber> tracing_subscriber::Layer<Sub> for RequestLogLayer<S> {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, Sub>) {
        if event.metadata().target() != REQUEST_LOG_TARGET {
            return;
        }
        let mut line = Line {
            text: String::with_capacity(256),
            gateway: String::new(),
        };
        line.text.push('{');
        event.record(&mut line);
        line.text.push('}');
        self.sink.write_line(&line.gateway, &line.text);
    }
}

/// Parses a scan bound: Unix milliseconds (`1767225600250`) or an RFC 3339 time
/// (`2026-01-01T00:00:00.250Z`, `2026-01-01T01:00:00+01:00`), to Unix milliseconds.
pub fn parse_time(text: &str) -> Result<u64, String> {
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse()
            .map_err(|_| format!("{text:?}: too large for Unix milliseconds"));
    }
    rfc3339_ms(text).ok_or_else(|| {
        format!(
            "{text:?}: expected Unix milliseconds or an RFC 3339 time such as \
             2026-01-01T00:00:00.250Z"
        )
    })
}

fn rfc3339_ms(t: &str) -> Option<u64> {
    use time::OffsetDateTime;
    use time::format_description::well_known::Rfc3339;
    // Every valid time is ASCII; checking first makes the slices below land on boundaries.
    // The parser takes any character between date and time: RFC 3339 names `T` and, for
    // readability, a space.
    if !t.is_ascii() || !matches!(t.as_bytes().get(10), Some(b'T' | b't' | b' ')) {
        return None;
    }
    // A leap second (:60) counts as the first instant of the next minute, wherever it is
    // written (the parser takes one only where one was inserted, as the minute's last instant).
    let (text, leap_ms) = match t.get(17..19) {
        Some("60") => (format!("{}59{}", &t[..17], &t[19..]), 1_000),
        _ => (t.to_owned(), 0),
    };
    let at = OffsetDateTime::parse(&text, &Rfc3339).ok()?;
    // Milliseconds: the fraction's first three digits, the rest truncated.
    let ms = at.unix_timestamp_nanos().div_euclid(1_000_000) + leap_ms;
    u64::try_from(ms).ok()
}

/// What to select.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScanQuery {
    /// Earliest id time, Unix ms (inclusive).
    pub from_ms: u64,
    /// Latest id time, Unix ms (exclusive).
    pub to_ms: u64,
    /// Only this API key.
    pub key: Option<String>,
    /// Only this decision.
    pub decision: Option<String>,
}

/// A line the scan selected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanLine {
    /// Its id.
    pub id: Uuid,
    /// The line as written.
    pub text: String,
    /// Its fields.
    pub fields: serde_json::Map<String, serde_json::Value>,
}

/// What one file cost the scan.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileStats {
    /// The file.
    pub file: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// Lines whose id the binary search read.
    pub probes: u64,
    /// Lines read in the time range (each parsed in full).
    pub in_range: u64,
}

/// The scan's result.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScanResult {
    /// Matching lines of every file, in id order.
    pub lines: Vec<ScanLine>,
    /// Per file.
    pub files: Vec<FileStats>,
}

/// Why a scan failed: the file, the line (1-based; 0 if unknown) and what was wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanError {
    /// The file.
    pub file: PathBuf,
    /// 1-based line number, 0 when the file could not be read.
    pub line: u64,
    /// What was wrong.
    pub message: String,
}

impl fmt::Display for ScanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file.display(), self.message)
        } else {
            write!(f, "{}:{}: {}", self.file.display(), self.line, self.message)
        }
    }
}

impl std::error::Error for ScanError {}

/// One log file, read by offset.
struct LogFile<'a> {
    path: &'a Path,
    file: File,
    len: u64,
    probes: u64,
}

impl LogFile<'_> {
    fn fail(&mut self, offset: u64, message: String) -> ScanError {
        ScanError {
            file: self.path.to_owned(),
            line: self.line_number(offset),
            message,
        }
    }

    /// The 1-based line at `offset` (counts newlines before it; only for error messages).
    fn line_number(&mut self, offset: u64) -> u64 {
        if self.file.seek(SeekFrom::Start(0)).is_err() {
            return 0;
        }
        let mut r = BufReader::new(&mut self.file).take(offset);
        let mut buf = [0u8; 8192];
        let mut n = 1;
        while let Ok(k) = r.read(&mut buf) {
            if k == 0 {
                break;
            }
            n += buf[..k].iter().filter(|&&b| b == b'\n').count() as u64;
        }
        n
    }

    fn io(&self, e: std::io::Error) -> ScanError {
        ScanError {
            file: self.path.to_owned(),
            line: 0,
            message: format!("cannot read: {e}"),
        }
    }

    /// The first line start at or after `offset`, or `None` past the last line.
    fn line_start_from(&mut self, offset: u64) -> Result<Option<u64>, ScanError> {
        if offset == 0 {
            return Ok((self.len > 0).then_some(0));
        }
        // A line starts at `offset` if the byte before it is a newline: search from there, no
        // further than the longest line allowed.
        let mut at = offset - 1;
        let mut buf = [0u8; 512];
        while at < self.len {
            if at - (offset - 1) > MAX_LINE as u64 {
                return Err(self.fail(offset, format!("line longer than {MAX_LINE} bytes")));
            }
            self.file
                .seek(SeekFrom::Start(at))
                .map_err(|e| self.io(e))?;
            let k = self.file.read(&mut buf).map_err(|e| self.io(e))?;
            if k == 0 {
                break;
            }
            if let Some(i) = buf[..k].iter().position(|&b| b == b'\n') {
                let start = at + i as u64 + 1;
                return Ok((start < self.len).then_some(start));
            }
            at += k as u64;
        }
        Ok(None)
    }

    /// The id of the line starting at `start` and where the next line starts.
    fn id_at(&mut self, start: u64) -> Result<(Uuid, u64), ScanError> {
        let mut line = Vec::new();
        self.file
            .seek(SeekFrom::Start(start))
            .map_err(|e| self.fail(start, format!("cannot read: {e}")))?;
        let read = BufReader::new(&mut self.file)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line);
        read.map_err(|e| self.io(e))?;
        let next = start + line.len() as u64;
        self.probes += 1;
        match parse_line_id(line.strip_suffix(b"\n").unwrap_or(&line)) {
            Ok(id) => Ok((id, next)),
            Err(message) => Err(self.fail(start, message)),
        }
    }
}

fn out_of_order(id: Uuid) -> String {
    format!(
        "id {id} is out of order: this file is not one gateway's log in the order it was \
         written; pass each gateway's log as its own file"
    )
}

fn not_a_log_line() -> String {
    "expected a request log line starting with {\"id\":\"<UUIDv7>\"".into()
}

/// A line's id (`line` without its newline), or what is wrong with the line.
fn parse_line_id(line: &[u8]) -> Result<Uuid, String> {
    if line.len() > MAX_LINE {
        return Err(format!("line longer than {MAX_LINE} bytes"));
    }
    line_id(line).ok_or_else(not_a_log_line)
}

/// The id at the start of a log line.
fn line_id(line: &[u8]) -> Option<Uuid> {
    let rest = line.strip_prefix(LINE_PREFIX)?;
    let text = std::str::from_utf8(rest.get(..UUID_LEN)?).ok()?;
    let id = Uuid::parse_str(text).ok()?;
    (rest.get(UUID_LEN) == Some(&b'"') && id.get_version_num() == 7).then_some(id)
}

/// Selects the lines of `files` whose id time is in `[from_ms, to_ms)` and that match the
/// query's key and decision, merged in id order. Each file must be one gateway's log, in the
/// order it was written (sorted by id): that is the precondition of the binary search. The
/// scan checks every line it reads — the search's probes and the whole range — and reports
/// one out of order as an error naming its line; it cannot vouch for the lines it skips.
pub fn scan(files: &[PathBuf], q: &ScanQuery) -> Result<ScanResult, ScanError> {
    let mut result = ScanResult::default();
    for path in files {
        let (lines, stats) = scan_file(path, q)?;
        result.lines.extend(lines);
        result.files.push(stats);
    }
    result.lines.sort_by_key(|l| l.id);
    Ok(result)
}

fn scan_file(path: &Path, q: &ScanQuery) -> Result<(Vec<ScanLine>, FileStats), ScanError> {
    let open = |e: std::io::Error| ScanError {
        file: path.to_owned(),
        line: 0,
        message: format!("cannot read: {e}"),
    };
    let file = File::open(path).map_err(open)?;
    let len = file.metadata().map_err(open)?.len();
    let mut f = LogFile {
        path,
        file,
        len,
        probes: 0,
    };
    // Every line starting before `lo` has an id before `from`; `lo` is always a line start.
    let (mut lo, mut hi) = (0u64, len);
    // The probes so far, by offset: their ids must be in the same order.
    let mut probed: BTreeMap<u64, Uuid> = BTreeMap::new();
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match f.line_start_from(mid)? {
            Some(start) if start < hi => {
                let (id, next) = f.id_at(start)?;
                let before = probed.range(..start).next_back().map(|(&o, &p)| (o, p));
                let after = probed.range(start..).next().map(|(&o, &p)| (o, p));
                let clash = before
                    .filter(|&(_, p)| p > id)
                    .or(after.filter(|&(_, p)| p < id));
                if let Some((other, other_id)) = clash {
                    let line = f.line_number(other);
                    return Err(f.fail(
                        start,
                        format!(
                            "{} (line {line} has {other_id}): the two are in the wrong order",
                            out_of_order(id)
                        ),
                    ));
                }
                probed.insert(start, id);
                if id_millis(&id).unwrap_or(0) < q.from_ms {
                    lo = next;
                } else {
                    hi = start;
                }
            }
            _ => hi = mid,
        }
    }
    let mut out = Vec::new();
    let mut stats = FileStats {
        file: path.to_owned(),
        bytes: len,
        ..FileStats::default()
    };
    f.file
        .seek(SeekFrom::Start(lo))
        .map_err(|e| f.fail(lo, format!("cannot read: {e}")))?;
    let mut reader = BufReader::new(&mut f.file);
    let mut offset = lo;
    let mut last: Option<Uuid> = None;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = reader
            .by_ref()
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)
            .map_err(open)?;
        if n == 0 {
            break;
        }
        let at = offset;
        offset += n as u64;
        let line = buf.strip_suffix(b"\n").unwrap_or(&buf);
        let checked = parse_line_id(line).and_then(|id| match last {
            Some(l) if id < l => Err(out_of_order(id)),
            _ => Ok(id),
        });
        let id = match checked {
            Ok(id) => id,
            Err(message) => {
                drop(reader);
                return Err(f.fail(at, message));
            }
        };
        last = Some(id);
        if id_millis(&id).unwrap_or(0) >= q.to_ms {
            break;
        }
        stats.in_range += 1;
        let text = String::from_utf8_lossy(line).into_owned();
        let fields = match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(serde_json::Value::Object(m)) => m,
            Ok(_) | Err(_) => {
                drop(reader);
                return Err(f.fail(at, "expected one JSON object per line".into()));
            }
        };
        let field = |name: &str| fields.get(name).and_then(|v| v.as_str());
        if q.key.as_deref().is_some_and(|k| field("key") != Some(k))
            || q.decision
                .as_deref()
                .is_some_and(|d| field("decision") != Some(d))
        {
            continue;
        }
        out.push(ScanLine { id, text, fields });
    }
    stats.probes = f.probes;
    Ok((out, stats))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_grow_strictly_even_when_the_clock_steps_back() {
        let mut g = IdGenerator::new(7);
        let mut last = g.next(1_000);
        for ms in [1_000, 1_000, 1_001, 999, 500, 1_002, 1_002] {
            let id = g.next(ms);
            assert!(id > last, "{id} after {last}");
            assert_eq!(id.get_version_num(), 7);
            last = id;
        }
        assert_eq!(id_millis(&last), Some(1_002));
    }

    #[test]
    fn a_full_millisecond_borrows_the_next() {
        let mut g = IdGenerator::new(1);
        let ids: Vec<Uuid> = (0..5_000).map(|_| g.next(10)).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(id_millis(&ids[0]), Some(10));
        assert_eq!(id_millis(&ids[4_999]), Some(11));
    }

    fn write_log(name: &str, lines: &[String]) -> PathBuf {
        let path =
            std::env::temp_dir().join(format!("ratelab-{name}-{}.jsonl", std::process::id()));
        std::fs::write(
            &path,
            lines.iter().map(|l| format!("{l}\n")).collect::<String>(),
        )
        .unwrap();
        path
    }

    fn line(id: Uuid, decision: &str) -> String {
        format!(r#"{{"id":"{id}","gateway":"g","key":"k","decision":"{decision}"}}"#)
    }

    #[test]
    fn a_scan_of_a_large_log_reads_a_logarithmic_number_of_ids() {
        let mut g = IdGenerator::new(3);
        // 100 000 requests, 10 per ms, over 10 s.
        let lines: Vec<String> = (0..100_000u64)
            .map(|i| {
                line(
                    g.next(1_000_000 + i / 10),
                    if i % 3 == 0 { "denied" } else { "allowed" },
                )
            })
            .collect();
        let path = write_log("large", &lines);
        let q = ScanQuery {
            from_ms: 1_004_000,
            to_ms: 1_004_100,
            key: None,
            decision: Some("denied".into()),
        };
        let r = scan(std::slice::from_ref(&path), &q).unwrap();
        let want: Vec<&String> = lines[40_000..41_000]
            .iter()
            .filter(|l| l.contains("denied"))
            .collect();
        let got: Vec<&String> = r.lines.iter().map(|l| &l.text).collect();
        assert_eq!(got, want);
        assert_eq!(r.files[0].in_range, 1_000, "only the range is parsed");
        assert!(r.files[0].probes <= 2 * 23, "{:?}", r.files[0]);
        // Bounds outside the log: everything, nothing.
        let all = ScanQuery {
            from_ms: 0,
            to_ms: u64::MAX,
            ..ScanQuery::default()
        };
        assert_eq!(
            scan(std::slice::from_ref(&path), &all).unwrap().lines.len(),
            100_000
        );
        let none = ScanQuery {
            from_ms: 2_000_000,
            to_ms: 3_000_000,
            ..ScanQuery::default()
        };
        assert!(
            scan(std::slice::from_ref(&path), &none)
                .unwrap()
                .lines
                .is_empty()
        );
    }

    #[test]
    fn lines_of_the_longest_length_scan_and_longer_ones_are_refused() {
        let mut g = IdGenerator::new(5);
        let lines: Vec<String> = (0..50)
            .map(|i| {
                let head = format!(r#"{{"id":"{}","key":""#, g.next(100 + i));
                let pad = "k".repeat(MAX_LINE - head.len() - 2);
                format!("{head}{pad}\"}}")
            })
            .collect();
        assert!(lines.iter().all(|l| l.len() == MAX_LINE));
        let path = write_log("longest", &lines);
        for from_ms in [0, 110, 125, 149, 150] {
            let q = ScanQuery {
                from_ms,
                to_ms: 1_000,
                ..ScanQuery::default()
            };
            let r = scan(std::slice::from_ref(&path), &q).unwrap();
            assert_eq!(
                r.lines.len() as u64,
                150 - from_ms.clamp(100, 150),
                "from {from_ms}"
            );
        }
        // No newline at all: refused after reading one line's worth, not the whole file.
        let path = std::env::temp_dir().join(format!("ratelab-flat-{}.jsonl", std::process::id()));
        std::fs::write(&path, "x".repeat(1 << 20)).unwrap();
        let q = ScanQuery {
            from_ms: 5,
            to_ms: 6,
            ..ScanQuery::default()
        };
        let e = scan(&[path], &q).unwrap_err();
        assert!(e.message.contains("line longer than"), "{e}");
    }

    #[test]
    fn out_of_order_lines_the_scan_reads_are_an_error() {
        let mut a = IdGenerator::new(1);
        let mut b = IdGenerator::new(2);
        let first: Vec<String> = (0..5).map(|i| line(a.next(100 + i), "allowed")).collect();
        let second: Vec<String> = (0..5).map(|i| line(b.next(100 + i), "allowed")).collect();
        // Two gateways' logs concatenated into one file.
        let path = write_log("concatenated", &[first, second].concat());
        let q = ScanQuery {
            from_ms: 0,
            to_ms: 1_000,
            ..ScanQuery::default()
        };
        let e = scan(&[path], &q).unwrap_err();
        // Two of the binary search's probes disagree before the range is even read.
        assert!((1..=10).contains(&e.line), "{e}");
        assert!(e.message.contains("out of order"), "{e}");
    }

    #[test]
    fn request_events_become_json_lines_with_the_id_first() {
        use tracing_subscriber::layer::SubscriberExt as _;
        let sink = std::sync::Arc::new(MemorySink::default());
        let subscriber = tracing_subscriber::registry().with(RequestLogLayer::new(sink.clone()));
        tracing::subscriber::with_default(subscriber, || {
            let key: Option<&str> = None;
            tracing::info!(target: REQUEST_LOG_TARGET, gateway = "g-1", id = "i", key, status = 429u64, quote = "a\"b");
            tracing::info!(target: "elsewhere", id = "ignored");
        });
        let logs = sink.take();
        assert_eq!(
            logs["g-1"],
            "{\"id\":\"i\",\"gateway\":\"g-1\",\"status\":429,\"quote\":\"a\\\"b\"}\n"
        );
        assert_eq!(logs.len(), 1);
        // Any string survives the trip through a line.
        let odd = "tab\tnew\nline\u{7}bell \\ \u{e9}\u{1f600} \"q\"";
        let sink = std::sync::Arc::new(MemorySink::default());
        let subscriber = tracing_subscriber::registry().with(RequestLogLayer::new(sink.clone()));
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(target: REQUEST_LOG_TARGET, id = "i", gateway = odd, n = -3i64, b = true);
        });
        let logs = sink.take();
        let v: serde_json::Value = serde_json::from_str(logs[odd].trim_end()).unwrap();
        assert_eq!(v["gateway"], odd);
        assert_eq!(v["n"], -3);
        assert_eq!(v["b"], true);
    }

    #[test]
    fn rfc3339_and_unix_ms_bounds_parse() {
        assert_eq!(parse_time("1767225600250"), Ok(1_767_225_600_250));
        assert_eq!(
            parse_time("2026-01-01T00:00:00.250Z"),
            Ok(1_767_225_600_250)
        );
        assert_eq!(
            parse_time("2026-01-01T01:00:00.25+01:00"),
            Ok(1_767_225_600_250)
        );
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(
            parse_time("2024-02-29T12:00:00.123456Z"),
            Ok(1_709_208_000_123)
        );
        assert_eq!(
            parse_time("2026-01-01 00:00:00.250z"),
            Ok(1_767_225_600_250)
        );
        // A leap second is the next minute's first instant.
        assert_eq!(
            parse_time("2025-12-31T23:59:60.250Z"),
            Ok(1_767_225_600_250)
        );
        for bad in [
            "",
            "yesterday",
            "2026-13-01T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "2026-04-31T00:00:00Z",
            "2026-01-01T00:00:00",
            "2026-01-01T00:00:00\u{e9}0000",
            "2026-01-01T00:00:00+\u{e9}:00",
            "2026-01-01T00:00:00+-1:00",
            "2026-01-01T00:00:00+01:-5",
            "2026-01-01X00:00:00Z",
            "2026-01-01T00:00:00+01:60",
            "-5",
        ] {
            assert!(parse_time(bad).is_err(), "{bad:?}");
        }
    }
}
