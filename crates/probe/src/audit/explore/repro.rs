//! A failing schedule as a standalone reproducer: a Python script (standard library only)
//! that sends the schedule to the target, applies its store faults where it is told how,
//! checks the answers with its own few lines, and prints what it found — what one attaches
//! to an upstream report.
//!
//! Its checks, each tagged with the ratelab check whose violation it shows (a script counts
//! only its own finding's kind as reproduced):
//!
//! - **fields**: a `Retry-After` that is neither delay-seconds nor an HTTP-date; a remaining
//!   count (`X-RateLimit-Remaining`, `RateLimit-Remaining` or the `RateLimit` field's `r`)
//!   on a denial that says there is room for it; a denial's `Retry-After` earlier than the
//!   reset its `RateLimit` fields give; for a bucket, a remaining count that grows faster
//!   than the refill between an answer and a request sent after it.
//! - **failure-mode**: requests *held*, those in flight when a store fault the script
//!   applied began and answered only once it ended, and those sent in its first half, none
//!   of them answered before.
//! - **envelope**: between the faults and their recoveries, admissions on one key between a
//!   send and a later answer (widened by the clock resolution) may not exceed what the claim
//!   admits over that span from any state (sound whatever the timing).
//! - **linearizable**: a bucket's denial told to retry after 0 seconds; before any fault,
//!   each key's admissions no more and no fewer than the claimed policy admits, and without
//!   faults its remaining counts no higher than the claim leaves after its i-th request
//!   ([`Claim::most_left`], compared largest with largest, so whatever the order they were
//!   decided in). These are computed here by the family's specification
//!   ([`Claim::admitted`]) with each request decided at its planned time or up to a slack
//!   later, over the timings tried, for each slack of [`SLACKS_MS`], and written into the
//!   script as numbers; the script holds a key at the tightest slack within which every
//!   request counted was sent and answered (and, for the fewest, every one got a decision).
//!   Not bounds over every timing a slack allows: the script says which slack it used.

use super::schedule::{FaultKind, Schedule};
use ratelab_check::probe::Claim;
use ratelab_core::Nanos;
use ratelab_store::rng::StreamRng;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// How late a request may be decided against its planned time, for the counts: the script
/// holds each key to the tightest of these within which all its counted requests were sent
/// and answered.
pub const SLACKS_MS: [u64; 4] = [20, 100, 300, 1_000];

/// What the script needs besides the schedule.
#[derive(Debug)]
pub struct Script<'a> {
    /// `NAME/VARIANT`.
    pub target: &'a str,
    /// The finding it reproduces (ratelab's line).
    pub finding: &'a str,
    /// The check that found it.
    pub check: &'a str,
    /// The claim, as the recipe writes it.
    pub policy: &'a str,
    /// The claim.
    pub claim: Claim,
    /// The limiter's clock resolution.
    pub clock_resolution: Nanos,
    /// The instances' URLs when the finding was made (`{key}` where the key goes).
    pub urls: &'a [String],
    /// The header that carries the key, if one does.
    pub key_header: Option<&'a str>,
    /// Statuses that mean denied.
    pub deny: &'a [u16],
    /// The command that replays the schedule in ratelab.
    pub replay: &'a str,
    /// The keys the finding names (every key when it names none).
    pub keys: &'a [u32],
    /// How long after its store is back it may take to limit again.
    pub recovery: Nanos,
}

/// The timings tried for requests planned at `planned` (ns, sorted): each decided at its
/// planned time or up to `slack` later; on time, all late, the first on time and the rest
/// late, the first late and the rest on time, and random ones from `stream`. Each timing
/// sorted.
fn timings(planned: &[u64], slack: u64, stream: u64, key: u32) -> Vec<Vec<Nanos>> {
    let mut rng = StreamRng::new(u64::from(key), stream);
    (0..16u64)
        .map(|pattern| {
            let mut times: Vec<Nanos> = planned
                .iter()
                .enumerate()
                .map(|(i, &t)| {
                    let late = match pattern {
                        0 => 0,
                        1 => slack,
                        2 => u64::from(i > 0) * slack,
                        3 => u64::from(i == 0) * slack,
                        _ => rng.below(slack + 1),
                    };
                    Nanos(t + late)
                })
                .collect();
            times.sort_unstable();
            times
        })
        .collect()
}

/// Each key's requests planned before `before` (µs), as ns, sorted.
fn planned(schedule: &Schedule, key: u32, before: u64) -> Vec<u64> {
    let mut at: Vec<u64> = schedule
        .requests
        .iter()
        .filter(|r| r.key == key && r.at_us < before)
        .map(|r| r.at_us * 1_000)
        .collect();
    at.sort_unstable();
    at
}

/// The fewest and the most the claim admits of each key's requests (those planned before
/// `before`, µs): decided at their planned times, or each up to `slack_ms` (and the clock
/// resolution) later, the extremes over the [`timings`] tried. Not bounds over every timing
/// the slack allows: the script says so, and counts only where its requests were sent and
/// answered within the slack.
pub fn admitted_by_key(
    schedule: &Schedule,
    claim: &Claim,
    clock_resolution: Nanos,
    before: u64,
    slack_ms: u64,
) -> BTreeMap<u32, (u64, u64)> {
    let slack = slack_ms * 1_000_000 + clock_resolution.as_u64();
    let mut out = BTreeMap::new();
    for key in schedule.keys() {
        let (mut least, mut most) = (u64::MAX, 0);
        for times in timings(
            &planned(schedule, key, before),
            slack,
            0x0072_6570_726f,
            key,
        ) {
            let (fewest, best) = claim.admitted(&times);
            least = least.min(fewest);
            most = most.max(best);
        }
        out.insert(key, (least.min(most), most));
    }
    out
}

/// The most room the claim reports left after each of each key's requests, in planned
/// order, over the [`timings`] tried within `slack_ms` (the same caveat).
pub fn left_by_key(
    schedule: &Schedule,
    claim: &Claim,
    clock_resolution: Nanos,
    slack_ms: u64,
) -> BTreeMap<u32, Vec<u64>> {
    let slack = slack_ms * 1_000_000 + clock_resolution.as_u64();
    let mut out = BTreeMap::new();
    for key in schedule.keys() {
        let planned = planned(schedule, key, u64::MAX);
        let mut most = vec![0; planned.len()];
        for times in timings(&planned, slack, 0x6c65_6674, key) {
            for (m, l) in most.iter_mut().zip(claim.most_left(&times)) {
                *m = (*m).max(l);
            }
        }
        out.insert(key, most);
    }
    out
}

/// `v` as a Python string literal (double-quoted; backslashes, quotes and anything not
/// printable ASCII escaped).
fn literal(v: &str) -> String {
    let mut out = String::from('"');
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            ' '..='~' => out.push(c),
            c if u32::from(c) <= 0xff => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            c if u32::from(c) <= 0xffff => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push_str(&format!("\\U{:08x}", u32::from(c))),
        }
    }
    out.push('"');
    out
}

/// `v` for a line of the script's docstring: what [`literal`] escapes, without its quotes.
fn prose(v: &str) -> String {
    let quoted = literal(v);
    quoted[1..quoted.len() - 1].to_owned()
}

/// The script.
pub fn script(s: &Script<'_>, schedule: &Schedule) -> String {
    let first_fault = schedule.faults.first().map_or(u64::MAX, |f| f.at_us);
    let named = |k: &u32| s.keys.is_empty() || s.keys.contains(k);
    // Per key, a value per slack of [`SLACKS_MS`], as a Python dict of lists.
    let per_slack = |value: &dyn Fn(u64) -> BTreeMap<u32, String>| {
        let each: Vec<BTreeMap<u32, String>> = SLACKS_MS.iter().map(|&ms| value(ms)).collect();
        let kept: Vec<String> = each[0]
            .keys()
            .filter(|k| named(k))
            .map(|k| {
                let values: Vec<&str> = each.iter().map(|m| m[k].as_str()).collect();
                format!("{k}: [{}]", values.join(", "))
            })
            .collect();
        format!("{{{}}}", kept.join(", "))
    };
    // Both counts of one slack come from one computation: (least, most) per key.
    let counted = |before: u64| -> Vec<BTreeMap<u32, (u64, u64)>> {
        SLACKS_MS
            .iter()
            .map(|&ms| admitted_by_key(schedule, &s.claim, s.clock_resolution, before, ms))
            .collect()
    };
    let (all, before) = (counted(u64::MAX), counted(first_fault));
    let pick = |each: &[BTreeMap<u32, (u64, u64)>], most: bool| {
        per_slack(&|ms| {
            let at = SLACKS_MS.iter().position(|&x| x == ms).unwrap_or(0);
            each[at]
                .iter()
                .map(|(&k, &(l, m))| (k, if most { m } else { l }.to_string()))
                .collect()
        })
    };
    let (least_all, most_all) = (pick(&all, false), pick(&all, true));
    let (least_before, most_before) = (pick(&before, false), pick(&before, true));
    let left = per_slack(&|ms| {
        left_by_key(schedule, &s.claim, s.clock_resolution, ms)
            .into_iter()
            .map(|(k, m)| (k, format!("{m:?}")))
            .collect()
    });
    let e = s.claim.envelope();
    let mut out = String::new();
    let _ = writeln!(out, "#!/usr/bin/env python3");
    let _ = writeln!(
        out,
        "\"\"\"Reproduces a finding of `ratelab audit --explore` on {} (claimed policy {}):\n\n    {}\n",
        prose(s.target),
        prose(s.policy),
        prose(s.finding)
    );
    let _ = writeln!(
        out,
        "Start the target, then: python3 {{this file}} [URL ...] [--store-pid PID] [--restart CMD]\n\
         [--redis-port PORT], one URL per instance ({{key}} where the key goes in the path), the\n\
         store's pid to freeze or kill it, the command that starts it again, its Redis port to\n\
         pause it. Python's standard library only. Exit 1: reproduced (a violation of the\n\
         finding's kind); 0: not this time.\n\
         In ratelab: {}\n\"\"\"",
        prose(s.replay)
    );
    out.push_str(
        "import email.utils, os, re, shlex, signal, socket, subprocess, sys, threading, time, urllib.error, urllib.request\n\n",
    );
    let urls: Vec<String> = s.urls.iter().map(|u| literal(u)).collect();
    let _ = writeln!(out, "URLS = [{}]", urls.join(", "));
    let _ = writeln!(
        out,
        "KEY_HEADER = {}",
        s.key_header.map_or("None".to_owned(), literal)
    );
    let deny: Vec<String> = s.deny.iter().map(|d| format!("{d}, ")).collect();
    let _ = writeln!(out, "DENY = ({})", deny.concat().trim_end());
    let _ = writeln!(out, "ALIGN_MS = {}", (schedule.align_us / 1_000).max(1));
    let _ = writeln!(
        out,
        "CLOCK_RES_MS = {}",
        s.clock_resolution.as_u64() as f64 / 1e6
    );
    let _ = writeln!(out, "RECOVERY_MS = {}", s.recovery.as_u64() as f64 / 1e6);
    let slacks: Vec<String> = SLACKS_MS.iter().map(u64::to_string).collect();
    let _ = writeln!(
        out,
        "# How late (ms) a request may be sent and answered after its planned time, for the\n\
         # counts below: each holds one value per slack.\nSLACKS_MS = [{}]",
        slacks.join(", ")
    );
    let _ = writeln!(
        out,
        "# The check whose violation this reproduces (others are printed, not counted).\nCHECK = {}",
        literal(s.check)
    );
    let _ = writeln!(out, "# (ms after the start, key, instance)");
    out.push_str("REQUESTS = [\n");
    for r in &schedule.requests {
        let _ = writeln!(
            out,
            "    ({:.3}, {}, {}),",
            r.at_us as f64 / 1_000.0,
            r.key,
            r.instance
        );
    }
    out.push_str("]\n# (ms after the start, fault, lasting ms)\nFAULTS = [\n");
    for f in &schedule.faults {
        let kind = match f.kind {
            FaultKind::Freeze => "freeze",
            FaultKind::Restart => "restart",
            FaultKind::Slow => "slow",
        };
        let _ = writeln!(
            out,
            "    ({:.3}, {}, {:.3}),",
            f.at_us as f64 / 1_000.0,
            literal(kind),
            f.for_us as f64 / 1_000.0
        );
    }
    out.push_str("]\n");
    let _ = writeln!(
        out,
        "# The fewest and the most the claimed policy admits of each key's requests, decided at\n\
         # their planned times or up to each slack later (ratelab's specification of {}, the\n\
         # extremes over the timings it tried), for the keys the finding names: all of them\n\
         # (LEAST, MOST), and those planned before the first fault (LEAST_BEFORE_FAULT,\n\
         # MOST_BEFORE_FAULT, used when the script applies one).\n\
         LEAST = {least_all}\nMOST = {most_all}\n\
         LEAST_BEFORE_FAULT = {least_before}\nMOST_BEFORE_FAULT = {most_before}",
        prose(s.policy)
    );
    let _ = writeln!(
        out,
        "# From any state, at most BURST + AMOUNT * span / PERIOD_MS admitted in any span (ms).\n\
         BURST, AMOUNT, PERIOD_MS = {}, {}, {}\n\
         # Whether the claim is a token bucket, whose remaining count grows at its refill rate.\n\
         BUCKET = {}\n\
         # The most room the claimed policy reports left after each of a key's requests, in\n\
         # planned order, at the timings tried, per slack (used when no fault runs).\n\
         MOST_LEFT = {}",
        e.burst,
        e.amount,
        e.period as f64 / 1e6,
        if matches!(s.claim, Claim::TokenBucket { .. }) {
            "True"
        } else {
            "False"
        },
        left
    );
    out.push_str(PY_BODY);
    out
}

/// The script's driver and checks.
const PY_BODY: &str = r#"

def options(argv):
    urls, opts, i = [], {}, 0
    while i < len(argv):
        if argv[i] in ("--store-pid", "--restart", "--redis-port"):
            if i + 1 == len(argv):
                sys.exit("%s needs a value" % argv[i])
            opts[argv[i]] = argv[i + 1]
            i += 2
        else:
            urls.append(argv[i])
            i += 1
    return urls or URLS, opts


def fields(headers):
    # (remaining, seconds to reset) as ratelab reads them: the RateLimit field's item with
    # the least r (its t beside it), else RateLimit-Remaining / -Reset, else
    # X-RateLimit-Remaining.
    items = []
    for item in (headers.get("RateLimit") or "").split(","):
        r = re.search(r"(?:^|[;\s])(?:r|remaining)=(\d+)", item)
        t = re.search(r"(?:^|[;\s])(?:t|reset)=(\d+)", item)
        if r:
            items.append((int(r.group(1)), int(t.group(1)) if t else None))
    if items:
        return min(items, key=lambda i: i[0])
    for name in ("RateLimit-Remaining", "X-RateLimit-Remaining"):
        value = (headers.get(name) or "").strip()
        if value.isdigit():
            reset = (headers.get("RateLimit-Reset") or "").strip()
            return int(value), int(reset) if reset.isdigit() else None
    return None, None


def send(url, key):
    req = urllib.request.Request(url.replace("{key}", key))
    if KEY_HEADER:
        req.add_header(KEY_HEADER, key)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return (r.status, r.headers.get("Retry-After")) + fields(r.headers)
    except urllib.error.HTTPError as e:
        return (e.code, e.headers.get("Retry-After")) + fields(e.headers)
    except Exception as e:
        return "no answer: %s" % e, None, None, None


def retry_after_ok(value):
    # RFC 9110: delay-seconds (digits) or an HTTP-date.
    if value is None or value.isdigit():
        return True
    try:
        return email.utils.parsedate_to_datetime(value) is not None
    except (TypeError, ValueError):
        return False


def fault(kind, ms, opts):
    pid = int(opts.get("--store-pid", 0))
    try:
        if kind == "freeze" and pid:
            os.kill(pid, signal.SIGSTOP)
            time.sleep(ms / 1000)
            os.kill(pid, signal.SIGCONT)
            return True
        if kind == "restart" and pid and "--restart" in opts:
            os.kill(pid, signal.SIGKILL)
            time.sleep(ms / 1000)
            # The store started again is the one a later fault acts on.
            opts["--store-pid"] = str(subprocess.Popen(shlex.split(opts["--restart"])).pid)
            return True
        if kind == "slow" and "--redis-port" in opts:
            with socket.create_connection(("127.0.0.1", int(opts["--redis-port"]))) as s:
                n = str(int(ms))
                s.sendall(b"*4\r\n$6\r\nCLIENT\r\n$5\r\nPAUSE\r\n$%d\r\n%s\r\n$3\r\nALL\r\n" % (len(n), n.encode()))
                s.recv(64)
            time.sleep(ms / 1000)
            return True
    except OSError as e:
        print("skipped: %s for %d ms (%s)" % (kind, ms, e))
        return False
    print("skipped: %s for %d ms (say how: --store-pid, --restart, --redis-port)" % (kind, ms))
    return False


def run(urls, opts):
    # Sends the schedule and applies its faults: each request's (key, sent, answered,
    # status, Retry-After, planned, remaining, reset), ms after the start, and each fault
    # applied as (its index in FAULTS, began, ended, whether the store was down).
    prefix = "repro-%d-%d" % (os.getpid(), time.time())
    wait = ALIGN_MS - (time.time() * 1000) % ALIGN_MS
    if wait < 10000:
        time.sleep(wait / 1000)
    start = time.monotonic()
    seen = [None] * len(REQUESTS)

    def request(i, at, key, instance):
        time.sleep(max(0, start + at / 1000 - time.monotonic()))
        sent = time.monotonic() - start
        status, retry_after, left, t = send(urls[instance % len(urls)], "%s-k%d" % (prefix, key))
        seen[i] = (key, sent * 1000, (time.monotonic() - start) * 1000, status, retry_after, at, left, t)

    threads = [threading.Thread(target=request, args=(i,) + r) for i, r in enumerate(REQUESTS)]
    for t in threads:
        t.start()
    applied = []
    for n, (at, kind, ms) in enumerate(FAULTS):
        time.sleep(max(0, start + at / 1000 - time.monotonic()))
        began = (time.monotonic() - start) * 1000
        if fault(kind, ms, opts):
            # A pause only slows the store's answers; the others take it down.
            applied.append((n, began, (time.monotonic() - start) * 1000, kind != "slow"))
    for t in threads:
        t.join()
    return seen, applied


def decided(s):
    return isinstance(s[3], int) and (s[3] in DENY or 200 <= s[3] < 400)


def within(reqs):
    # The tightest slack within which every one of reqs was sent and answered after its
    # planned time, so decided where the specification was asked; None if none is.
    # (A request is sent on its planned time but for the clock's rounding: 1 ms of it.)
    if any(s is None or s[1] < s[5] - 1 for s in reqs):
        return None
    worst = max((s[2] - s[5] for s in reqs), default=0)
    return next((i for i, ms in enumerate(SLACKS_MS) if worst <= ms), None)


def check_held(seen, applied, found):
    # Requests in flight when the store went down and answered once it was back, and those
    # sent in the first half of its spell, when none of these was answered before.
    for _, began, ended, down in applied:
        if not down:
            continue
        early = [s for s in seen if s and began <= s[1] < (began + ended) / 2]
        waited = [s for s in seen if s and s[1] < began and s[2] > ended]
        if (early or waited) and all(s[2] > ended for s in early):
            found.add("failure-mode")
            print("held: %d requests got no answer until the store was back, %.0f ms after it went down" % (len(early) + len(waited), ended - began))


def check_fields(seen, segment, found):
    # The answers' fields, where no fault touched them; counts compared within a segment.
    judged = [s for s in seen if s and segment(s) is not None]
    for s in judged:
        if not retry_after_ok(s[4]):
            found.add("fields")
            print("key %d: Retry-After %r is neither delay-seconds nor an HTTP-date" % (s[0], s[4]))
            break
    for s in judged:
        if s[3] in DENY and s[6] is not None and s[6] >= 1:
            found.add("fields")
            print("key %d: denied, while saying %d remaining" % (s[0], s[6]))
            break
    for s in judged:
        if s[3] in DENY and s[7] is not None and s[4] is not None and s[4].strip().isdigit() and int(s[4]) < s[7]:
            found.add("fields")
            print("key %d: denied with Retry-After %s, earlier than the reset the RateLimit fields give, %d s" % (s[0], s[4].strip(), s[7]))
            break
    if BUCKET:
        told = sorted((s for s in judged if s[6] is not None), key=lambda s: s[1])
        for j, b in enumerate(told):
            grew = [a for a in told[:j] if a[0] == b[0] and segment(a) == segment(b) and a[2] < b[1]
                    and (b[6] - a[6] - 1) * PERIOD_MS >= AMOUNT * (b[2] - a[1] + CLOCK_RES_MS)]
            if grew:
                found.add("fields")
                a = grew[-1]
                print("key %d: remaining went from %d to %d within %.1f ms, faster than the refill" % (b[0], a[6], b[6], b[2] - a[1] + CLOCK_RES_MS))
                break
        # A bucket's denial tells the true wait rounded up: never 0.
        for s in judged:
            if s[3] in DENY and s[4] is not None and s[4].strip() == "0":
                found.add("linearizable")
                print("key %d: denied, and told to retry after 0 seconds" % s[0])
                break


def check_left(seen, found):
    # Without faults, the remaining counts a key's answers gave against the most the policy
    # leaves after its i-th request: whatever order they were decided in, the k-th largest
    # said at most the k-th largest allowed, at the slack every one was answered within.
    for key in sorted(MOST_LEFT):
        mine = [seen[i] for i, r in enumerate(REQUESTS) if r[1] == key]
        i = within(mine)
        if i is None or not all(decided(s) for s in mine):
            continue
        said = sorted((s[6] for s in mine if s[6] is not None), reverse=True)
        allowed = sorted(MOST_LEFT[key][i], reverse=True)
        over = [(k, r, m) for k, (r, m) in enumerate(zip(said, allowed)) if r > m]
        if over:
            found.add("linearizable")
            k, r, m = over[0]
            print("key %d: its answers said %s remaining, where the policy leaves at most %s, each decided within %d ms of its planned time (the %d-th largest: %d > %d)" % (key, said, allowed[:len(said)], SLACKS_MS[i], k + 1, r, m))


def check_counts(seen, applied, segment, found):
    # Before the first fault (or in the whole run without one): each key's admissions no
    # more and no fewer than the policy admits, at the tightest slack its requests were
    # sent and answered within. Then the envelope, in each segment between the faults.
    if applied and applied[0][0] != 0:
        print("count: inconclusive, the schedule's first fault was not applied")
    most = MOST_BEFORE_FAULT if applied else MOST
    least = LEAST_BEFORE_FAULT if applied else LEAST
    before = lambda r: not applied or r[0] < FAULTS[0][0]
    for key in sorted(most):
        mine = [s for s in seen if s and s[0] == key and segment(s) is not None]
        admitted = [s for s in mine if decided(s) and s[3] not in DENY]
        denied = sum(1 for s in mine if s[3] in DENY)
        print("key %d: %d requests, %d admitted, %d denied, %d without a decision" % (key, len(mine), len(admitted), denied, len(mine) - len(admitted) - denied))
        if not applied or applied[0][0] == 0:
            # Every request planned before the first fault, each answered in segment 0.
            counted = [seen[i] for i, r in enumerate(REQUESTS) if r[1] == key and before(r)]
            first = [s for s in counted if s and segment(s) == 0 and decided(s) and s[3] not in DENY]
            i = within([s for s in counted if s and segment(s) == 0])
            whole = all(s and segment(s) == 0 and decided(s) for s in counted)
            j = within(counted) if whole else None
            if i is None:
                print("  count: inconclusive, requests answered more than %d ms after their planned times" % SLACKS_MS[-1])
            elif len(first) > most[key][i]:
                found.add("linearizable")
                print("  count: %d admitted, where the policy admits at most %d of these requests, each decided within %d ms of its planned time" % (len(first), most[key][i], SLACKS_MS[i]))
            elif j is not None and len(first) < least[key][j]:
                found.add("linearizable")
                print("  count: %d admitted, where the policy admits at least %d of these requests, each decided within %d ms of its planned time" % (len(first), least[key][j], SLACKS_MS[j]))
        for part in sorted(set(segment(s) for s in admitted)):
            spell = sorted((s for s in admitted if segment(s) == part), key=lambda s: s[1])
            for i in range(len(spell)):
                last = 0
                for j in range(i, len(spell)):
                    last = max(last, spell[j][2])
                    span = last - spell[i][1] + CLOCK_RES_MS
                    if j - i + 1 > BURST + AMOUNT * span / PERIOD_MS:
                        found.add("envelope")
                        print("  envelope: %d admitted within %.1f ms (sent at %.1f ms on), where at most %d may be" % (j - i + 1, span, spell[i][1], BURST + AMOUNT * span / PERIOD_MS))
                        break
                else:
                    continue
                break


def main():
    urls, opts = options(sys.argv[1:])
    seen, applied = run(urls, opts)
    # Answers a fault touched (in flight from its start until the recovery after it) are held
    # to no policy; the others are, in segments between the faults.
    zones = [(began, ended + RECOVERY_MS) for _, began, ended, _ in applied]

    def segment(s):
        if any(s[1] <= end and s[2] >= begin for begin, end in zones):
            return None
        return sum(1 for _, end in zones if end < s[1])

    # The kinds of violation seen, as ratelab names its checks.
    found = set()
    check_held(seen, applied, found)
    check_fields(seen, segment, found)
    if not applied:
        check_left(seen, found)
    check_counts(seen, applied, segment, found)
    # Reproduced: a violation of the kind the finding is; others are printed, not counted.
    others = ", ".join(sorted(found - {CHECK}))
    print("reproduced" if CHECK in found else "not reproduced this time")
    if others:
        print("also seen: %s" % others)
    sys.exit(1 if CHECK in found else 0)


if __name__ == "__main__":
    main()
"#;
