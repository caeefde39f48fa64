//! The policy a probe holds a limiter to, written on the command line.
//!
//! ```text
//! token-bucket:B,R        capacity B, R tokens a second (R: 10, 0.5, 10/s, 600/m, 36000/h)
//! fixed-window:L,W        at most L per window W aligned to the limiter's clock, at a phase
//!                         found from the history (W: 1s, 500ms, 2m, 1h; bare: seconds)
//! first-hit:L,W           at most L per window W opened by each key's first request
//! sliding-log:L,W         at most L in any window of length W
//! sliding-counter:L,W[,R][,first-hit]
//!                         the weighted two-window estimate at most L per W, its weighted
//!                         count rounded R: exact (default, kept as a fraction), up or down;
//!                         with first-hit, its windows opened by each key's first request
//!                         (and again after two windows without one), not aligned to a clock
//! leaky-bucket:RATE,BURST nginx limit_req's rate and burst with nodelay: a token bucket of
//!                         BURST + 1 tokens at RATE a second (RATE: 10, 10r/s, 600r/m)
//! ALGORITHM:FIELD=N,…     any of ratelab's algorithms as a limits file writes it, its name
//!                         and its parameters (first-hit-window:limit=10,window_ms=1000),
//!                         held to that algorithm's specification
//!                         with its clock's zero unknown
//! ```

use ratelab_check::probe::{Claim, Rounding, WindowKind};
use ratelab_core::Nanos;
use ratelab_core::spec::COUNT_MAX;

const SEC: u64 = 1_000_000_000;

/// The longest window a claim may name: 100 years, as ratelab's own policies allow.
const WINDOW_MAX: Nanos = Nanos(100 * 365 * 24 * 3_600 * SEC);

/// Parses a policy string (see the module docs).
pub fn parse(text: &str) -> Result<Claim, String> {
    let expected = "expected token-bucket:B,R, fixed-window:L,W, first-hit:L,W, \
                    sliding-log:L,W, sliding-counter:L,W[,exact|up|down][,first-hit], \
                    leaky-bucket:RATE,BURST, or any algorithm of ratelab's as \
                    ALGORITHM:FIELD=N,… (stepped-bucket:capacity=10,refill=5,refill_period_ms=1000)";
    let (kind, args) = text
        .split_once(':')
        .ok_or_else(|| format!("policy {text:?}: {expected}"))?;
    const KINDS: [&str; 6] = [
        "token-bucket",
        "fixed-window",
        "first-hit",
        "sliding-log",
        "sliding-counter",
        "leaky-bucket",
    ];
    if args.contains('=') || !KINDS.contains(&kind.trim()) {
        return written(kind.trim(), args).map_err(|e| format!("policy {text:?}: {e}; {expected}"));
    }
    let mut parts: Vec<&str> = args.split(',').map(str::trim).collect();
    let err = |e: String| format!("policy {text:?}: {e}");
    let first_hit = kind.trim() == "sliding-counter" && parts.last() == Some(&"first-hit");
    if first_hit {
        parts.pop();
    }
    let rounding = match (kind.trim(), parts.len()) {
        ("sliding-counter", 3) => match parts.pop() {
            Some("exact") => Rounding::Exact,
            Some("up") => Rounding::Up,
            Some("down") => Rounding::Down,
            r => {
                return Err(err(format!(
                    "{:?}: expected a rounding (exact, up or down) or first-hit",
                    r.unwrap_or_default()
                )));
            }
        },
        _ => Rounding::Exact,
    };
    let [a, b] = parts[..] else {
        return Err(format!(
            "policy {text:?}: {kind} takes two values separated by a comma"
        ));
    };
    let window = |kind| -> Result<Claim, String> {
        let limit = count(a, "L").map_err(err)?;
        let window = duration(b).map_err(err)?;
        if window > WINDOW_MAX {
            return Err(err(format!("W {b:?}: at most 100 years")));
        }
        Ok(Claim::Window {
            kind,
            limit,
            window,
        })
    };
    let claim = match kind.trim() {
        "token-bucket" => {
            let capacity = count(a, "B").map_err(err)?;
            let (amount, period) = rate(b, "").map_err(err)?;
            Claim::TokenBucket {
                capacity,
                amount,
                period,
            }
        }
        "fixed-window" => window(WindowKind::Fixed)?,
        "first-hit" => window(WindowKind::FirstHit)?,
        "sliding-log" => window(WindowKind::SlidingLog)?,
        "sliding-counter" => window(WindowKind::SlidingCounter {
            rounding,
            first_hit,
        })?,
        "leaky-bucket" => {
            let (amount, period) = rate(a, "r").map_err(err)?;
            let burst = b
                .parse::<u64>()
                .map_err(|_| err(format!("BURST {b:?}: expected a whole number")))?;
            if burst >= COUNT_MAX {
                return Err(err(format!("BURST {burst}: below {COUNT_MAX}")));
            }
            Claim::TokenBucket {
                capacity: burst + 1,
                amount,
                period,
            }
        }
        other => {
            return Err(format!(
                "policy {text:?}: unknown kind {other:?}: {expected}"
            ));
        }
    };
    Ok(claim)
}

/// An algorithm of ratelab's, `name` with its parameters `field=value,…` as a limits file
/// writes them ([`ratelab_core::PolicySpec`]).
fn written(name: &str, args: &str) -> Result<Claim, String> {
    let algorithm = ratelab_core::AlgorithmName::parse(name).ok_or_else(|| {
        format!(
            "unknown kind {name:?} (ratelab's algorithms: {})",
            ratelab_core::AlgorithmName::NAMES.join(", ")
        )
    })?;
    let mut spec = ratelab_core::PolicySpec::empty(algorithm);
    for pair in args.split(',').map(str::trim) {
        let (field, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("{pair:?}: expected FIELD=N"))?;
        let value = value
            .trim()
            .parse::<u64>()
            .map_err(|_| format!("{pair:?}: expected a whole number"))?;
        let field = field.trim();
        if spec
            .values()
            .iter()
            .any(|(f, v)| *f == field && v.is_some())
        {
            return Err(format!("{field:?} is given twice"));
        }
        spec.set(field, value).map_err(|e| e.to_string())?;
    }
    let policy = spec.build().map_err(|e| e.to_string())?;
    Ok(Claim::of_policy(policy))
}

/// A positive whole number.
fn count(s: &str, name: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(n) if n > COUNT_MAX => Err(format!("{name} {n}: at most {COUNT_MAX}")),
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{name} {s:?}: expected a whole number above 0")),
    }
}

/// A rate: a decimal number of tokens (`marker` may follow it, as nginx's `r`), then
/// optionally `/s`, `/m` or `/h`; as `amount` tokens every `period`.
fn rate(s: &str, marker: &str) -> Result<(u64, Nanos), String> {
    let bad = || format!("rate {s:?}: expected a number above 0, optionally /s, /m or /h");
    let (number, per) = match s.split_once('/') {
        Some((n, unit)) => (n, unit),
        None => (s, "s"),
    };
    let number = number.strip_suffix(marker).unwrap_or(number);
    let per_secs: u64 = match per {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return Err(bad()),
    };
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && frac.is_empty()
        || !whole.bytes().all(|c| c.is_ascii_digit())
        || !frac.bytes().all(|c| c.is_ascii_digit())
        || frac.len() > 9
    {
        return Err(bad());
    }
    let scale = 10u64.pow(frac.len() as u32);
    let amount = format!("{whole}{frac}").parse::<u64>().map_err(|_| bad())?;
    if amount == 0 {
        return Err(bad());
    }
    if amount > COUNT_MAX {
        return Err(format!("rate {s:?}: at most {COUNT_MAX} tokens a period"));
    }
    let period = scale
        .checked_mul(per_secs)
        .and_then(|p| p.checked_mul(SEC))
        .ok_or_else(bad)?;
    // In lowest terms, so the checker's scaled integers stay small.
    let g = gcd(amount, period);
    Ok((amount / g, Nanos(period / g)))
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// A duration: a whole number with `ms`, `s`, `m` or `h` (bare: seconds).
pub fn duration(s: &str) -> Result<Nanos, String> {
    let bad = || format!("duration {s:?}: expected a whole number with ms, s, m or h");
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n.parse().map_err(|_| bad())?;
    let unit_ns = match unit {
        "ms" => 1_000_000,
        "" | "s" => SEC,
        "m" => 60 * SEC,
        "h" => 3600 * SEC,
        _ => return Err(bad()),
    };
    match n.checked_mul(unit_ns) {
        Some(ns) if ns > 0 => Ok(Nanos(ns)),
        _ => Err(bad()),
    }
}

/// The bound a `RateLimit-Policy` item announces, `q` units per `w` seconds.
///
/// The draft leaves the algorithm open, and the two common readings differ: a fixed window of
/// `q` per `w` admits up to 2q across a boundary and q/w a second on average; ratelab's token
/// bucket renders `w` as the time to refill `q` tokens from empty, rounded up to a second, so
/// its rate is below q/(w − 1). The bound holds for both: 2q at once, and q/(w − 1) a second
/// after. It is a bound for the envelope, not a policy exact enough for the sequential
/// specification; `w` = 1 bounds a bucket's rate only from below, so it is refused.
pub fn announced(q: u64, w_secs: u64) -> Result<Claim, String> {
    if q == 0 || w_secs < 2 {
        return Err(format!(
            "RateLimit-Policy q={q};w={w_secs} does not bound the refill rate: give --policy"
        ));
    }
    let period = (w_secs - 1).saturating_mul(SEC);
    let g = gcd(q, period);
    Ok(Claim::TokenBucket {
        capacity: q.saturating_mul(2),
        amount: q / g,
        period: Nanos(period / g),
    })
}

/// The claim, as a policy string.
pub fn describe(c: &Claim) -> String {
    match *c {
        Claim::TokenBucket {
            capacity,
            amount,
            period,
        } => format!(
            "token-bucket:{capacity},{}",
            rate_text(amount, period.as_u64())
        ),
        Claim::Window {
            kind,
            limit,
            window,
        } => {
            let name = match kind {
                WindowKind::Fixed => "fixed-window",
                WindowKind::FirstHit => "first-hit",
                WindowKind::SlidingLog => "sliding-log",
                WindowKind::SlidingCounter { .. } => "sliding-counter",
            };
            let options = match kind {
                WindowKind::SlidingCounter {
                    rounding,
                    first_hit,
                } => {
                    let r = match rounding {
                        Rounding::Up => ",up",
                        Rounding::Down => ",down",
                        Rounding::Exact => "",
                    };
                    format!("{r}{}", if first_hit { ",first-hit" } else { "" })
                }
                _ => String::new(),
            };
            format!("{name}:{limit},{}{options}", duration_text(window))
        }
        Claim::Policy(p) => {
            let spec = p.spec();
            let fields: Vec<String> = spec
                .values()
                .iter()
                .filter_map(|(f, v)| v.map(|v| format!("{f}={v}")))
                .collect();
            format!(
                "{}:{}",
                spec.algorithm.name().replace('_', "-"),
                fields.join(",")
            )
        }
    }
}

/// A duration as [`duration`] reads it, where it can.
fn duration_text(d: Nanos) -> String {
    match d.as_u64() {
        ns if ns % SEC == 0 => format!("{}s", ns / SEC),
        ns if ns % 1_000_000 == 0 => format!("{}ms", ns / 1_000_000),
        _ => d.to_string(),
    }
}

fn rate_text(amount: u64, period_ns: u64) -> String {
    if period_ns == SEC {
        format!("{amount}")
    } else {
        format!("{:.6}", amount as f64 * SEC as f64 / period_ns as f64)
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_algorithm_is_written_as_a_limits_file_writes_it() {
        for &a in ratelab_core::AlgorithmName::ALL {
            let policy = a.shaped(10, 5).build().unwrap();
            let claim = Claim::of_policy(policy);
            let text = describe(&claim);
            assert_eq!(parse(&text), Ok(claim), "{text}");
        }
        let first_hit = parse("first_hit_window: limit=10, window_ms=1000").unwrap();
        assert_eq!(
            first_hit,
            Claim::Policy(ratelab_core::Policy::FirstHitWindow(
                ratelab_core::FirstHitWindow::new(10, Nanos(SEC)).unwrap()
            ))
        );
        assert_eq!(
            parse("stepped-bucket:capacity=10,refill=5,refill_period_ms=1000").unwrap(),
            Claim::Policy(ratelab_core::Policy::SteppedBucket(
                ratelab_core::SteppedBucket::new(10, 5, Nanos(SEC)).unwrap()
            ))
        );
        assert_eq!(
            parse("token_bucket:capacity=10,refill_per_sec=5").unwrap(),
            parse("token-bucket:10,5").unwrap()
        );
        for (bad, says) in [
            ("first-hit-window:limit=10", "needs `window_ms`"),
            ("first-hit-window:limit=10,capacity=5", "does not apply"),
            ("first-hit-window:limit=x", "whole number"),
            ("first-hit-window:size=3", "no parameter"),
            ("steppy:capacity=3", "unknown kind"),
            ("first-hit-window:limit=0,window_ms=1", "expected 1 to"),
            (
                "first-hit-window:limit=3,limit=5,window_ms=1",
                "given twice",
            ),
            ("first-hit-window:10,1s", "ALGORITHM:FIELD=N"),
            ("stepped-bucket:", "expected FIELD=N"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(says) && e.contains(bad), "{bad}: {e}");
        }
    }

    #[test]
    fn every_form_parses_to_its_bucket() {
        // Rates are kept in lowest terms: 5 a second is one every 200 ms.
        assert_eq!(
            parse("token-bucket:10,5").unwrap(),
            Claim::TokenBucket {
                capacity: 10,
                amount: 1,
                period: Nanos(SEC / 5)
            }
        );
        assert_eq!(
            parse("token-bucket:10,3").unwrap(),
            Claim::TokenBucket {
                capacity: 10,
                amount: 3,
                period: Nanos(SEC)
            }
        );
        assert_eq!(
            parse("token-bucket:3,0.5").unwrap(),
            Claim::TokenBucket {
                capacity: 3,
                amount: 1,
                period: Nanos(2 * SEC)
            }
        );
        assert_eq!(
            parse("token-bucket:3,60/m").unwrap(),
            parse("token-bucket:3,1").unwrap()
        );
        assert_eq!(
            parse("leaky-bucket:10r/s,5").unwrap(),
            Claim::TokenBucket {
                capacity: 6,
                amount: 1,
                period: Nanos(SEC / 10)
            }
        );
        assert_eq!(
            parse("fixed-window:100,500ms").unwrap(),
            Claim::Window {
                kind: WindowKind::Fixed,
                limit: 100,
                window: Nanos(500_000_000)
            }
        );
        assert_eq!(
            parse("sliding-counter:10,1m,up").unwrap(),
            Claim::Window {
                kind: WindowKind::SlidingCounter {
                    rounding: Rounding::Up,
                    first_hit: false,
                },
                limit: 10,
                window: Nanos(60 * SEC)
            }
        );
        assert_eq!(
            parse("sliding-counter:10,1s,down,first-hit").unwrap(),
            Claim::Window {
                kind: WindowKind::SlidingCounter {
                    rounding: Rounding::Down,
                    first_hit: true,
                },
                limit: 10,
                window: Nanos(SEC)
            }
        );
        assert_eq!(
            parse("sliding-counter:10,1s,first-hit").unwrap(),
            Claim::Window {
                kind: WindowKind::SlidingCounter {
                    rounding: Rounding::Exact,
                    first_hit: true,
                },
                limit: 10,
                window: Nanos(SEC)
            }
        );
        assert!(
            parse("sliding-counter:10,1s,sideways")
                .unwrap_err()
                .contains("expected a rounding")
        );
        for text in [
            "fixed-window:100,500ms",
            "first-hit:5,2s",
            "sliding-log:7,1s",
            "sliding-counter:7,1s,down,first-hit",
            "sliding-counter:10,60s",
            "sliding-counter:10,60s,down",
        ] {
            assert_eq!(describe(&parse(text).unwrap()), text);
        }
        assert_eq!(
            describe(&parse("token-bucket:3,0.5").unwrap()),
            "token-bucket:3,0.5"
        );
    }

    #[test]
    fn bad_strings_say_what_was_expected() {
        for (s, says) in [
            ("token-bucket", "expected token-bucket:B,R"),
            ("token-bucket:10", "two values"),
            ("token-bucket:0,1", "B \"0\""),
            ("token-bucket:10,abc", "rate \"abc\""),
            ("token-bucket:10,1/d", "rate \"1/d\""),
            ("fixed-window:10,5x", "duration \"5x\""),
            ("leaky-bucket:10r/s,-1", "BURST"),
            ("gcra:1,2", "unknown kind"),
            ("sliding-counter:5,1s,half", "\"half\": expected a rounding"),
            ("sliding-counter:5,1s,up,first-hit,x", "two values"),
            ("first-hit:5,1s,up", "two values"),
            ("sliding-log:5,1000000h", "at most 100 years"),
            ("fixed-window:10000000000000,1s", "at most"),
            (
                "token-bucket:10,18446744073709551613",
                "at most 1000000000000 tokens",
            ),
            ("token-bucket:10000000000001,1", "B 10000000000001: at most"),
            (
                "leaky-bucket:10r/s,18446744073709551615",
                "BURST 18446744073709551615",
            ),
        ] {
            let e = parse(s).unwrap_err();
            assert!(e.contains(says), "{s}: {e}");
        }
    }
}
