//! Reading an HTTP limiter's fields, in each dialect limiters speak:
//!
//! - the IETF draft's structured `RateLimit` and `RateLimit-Policy` (RFC 9651 structured
//!   fields, draft-08 on);
//! - the draft's earlier `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` (delta
//!   seconds);
//! - the common `X-RateLimit-Limit`, `-Remaining`, `-Reset`, the reset as delta seconds,
//!   epoch seconds or epoch milliseconds ([`ResetReading`]: given, or told apart by size);
//! - `Retry-After` as delay-seconds or an HTTP-date (against the answer's `Date`, else the
//!   probe's clock).
//!
//! A field that does not parse is treated as absent, never guessed at: the checks that need
//! it are then not made.

use ratelab_check::probe::{Dialect, Fields, ResetUnit};
use ratelab_core::Nanos;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A field's value by (lower-case) name.
pub type Get<'a> = dyn Fn(&str) -> Option<String> + 'a;

/// How to read an `X-RateLimit-Reset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResetReading {
    /// By size: below 10⁹ delta seconds, below 10¹² epoch seconds, else epoch ms.
    Auto,
    /// Always this unit.
    Given(ResetUnit),
}

impl ResetReading {
    /// `auto`, `delta`, `epoch-s` or `epoch-ms`.
    pub fn parse(s: &str) -> Result<ResetReading, String> {
        Ok(match s {
            "auto" => ResetReading::Auto,
            "delta" => ResetReading::Given(ResetUnit::DeltaSeconds),
            "epoch-s" => ResetReading::Given(ResetUnit::EpochSeconds),
            "epoch-ms" => ResetReading::Given(ResetUnit::EpochMillis),
            _ => return Err(format!("{s:?}: expected auto, delta, epoch-s or epoch-ms")),
        })
    }

    fn unit(self, v: u64) -> ResetUnit {
        match self {
            ResetReading::Given(u) => u,
            ResetReading::Auto if v < 1_000_000_000 => ResetUnit::DeltaSeconds,
            ResetReading::Auto if v < 1_000_000_000_000 => ResetUnit::EpochSeconds,
            ResetReading::Auto => ResetUnit::EpochMillis,
        }
    }
}

/// What reading an answer's fields needs besides the fields.
#[derive(Clone, Copy, Debug)]
pub struct Reading<'a> {
    /// The `RateLimit` item to read, when there are several.
    pub policy: Option<&'a str>,
    /// How to read `X-RateLimit-Reset`.
    pub reset: ResetReading,
    /// The probe's wall clock when the answer arrived (for epoch resets and HTTP-dates
    /// when the answer has no `Date`).
    pub now: SystemTime,
}

/// The fields an answer carried. With several `RateLimit` items, the one named `policy`,
/// else the one with the least remaining (the limit that binds). The first dialect that
/// gives `remaining` is the one read, in the order above.
pub fn read(get: &Get<'_>, r: &Reading<'_>) -> Fields {
    let mut f = Fields {
        retry_after_unit: Nanos::from_secs(1),
        ..Fields::default()
    };
    let number = |name: &str| get(name).and_then(|v| v.trim().parse::<u64>().ok());
    // The answer's own clock, for epoch values: its `Date`, else the probe's.
    let date = get("date").and_then(|d| httpdate::parse_http_date(d.trim()).ok());
    let now = date.unwrap_or(r.now);
    // An epoch reset is read as the least time it can mean: `Date` has whole seconds (the
    // answer was sent up to 1 s after it), and an epoch in seconds may have been rounded
    // either way. Only a field contradiction needs it, and it must never accuse an honest
    // limiter of what is the reading's rounding.
    let latest_now = now + Duration::from_secs(u64::from(date.is_some()));
    if let Some(items) = get("ratelimit").and_then(|v| items(&v)) {
        let chosen = match r.policy {
            Some(name) => items.into_iter().find(|i| i.name == name),
            None => items
                .into_iter()
                .filter(|i| i.params.contains_key("r"))
                .min_by_key(|i| i.params["r"]),
        };
        if let Some(i) = chosen {
            f.remaining = i.params.get("r").copied();
            f.reset_secs = i.params.get("t").copied();
            f.dialect = f.remaining.map(|_| Dialect::RateLimit);
        }
    }
    if f.remaining.is_none()
        && let Some(remaining) = number("ratelimit-remaining")
    {
        f.remaining = Some(remaining);
        f.limit = number("ratelimit-limit");
        f.reset_secs = number("ratelimit-reset");
        f.dialect = Some(Dialect::RateLimitTriple);
    }
    if f.remaining.is_none()
        && let Some(remaining) = number("x-ratelimit-remaining")
    {
        f.remaining = Some(remaining);
        f.limit = number("x-ratelimit-limit");
        let reset = number("x-ratelimit-reset");
        let unit = r.reset.unit(reset.unwrap_or(0));
        // An instant past what the system's time can hold is as far as a wait can be.
        let until = |after: Duration| {
            UNIX_EPOCH
                .checked_add(after)
                .map_or(u64::MAX, |at| whole_secs_until(latest_now, at))
        };
        f.reset_secs = reset.map(|v| match unit {
            ResetUnit::DeltaSeconds => v,
            ResetUnit::EpochSeconds => until(Duration::from_secs(v.saturating_sub(1))),
            ResetUnit::EpochMillis => until(Duration::from_millis(v)),
        });
        f.dialect = Some(Dialect::XRateLimit(unit));
    }
    f.malformed = malformed(get);
    f.retry_after = get("retry-after").and_then(|v| {
        let v = v.trim();
        match v.parse::<u64>() {
            Ok(secs) => Some(Nanos::from_secs(secs)),
            Err(_) => httpdate::parse_http_date(v)
                .ok()
                .map(|at| Nanos::from_secs(secs_until(now, at))),
        }
    });
    f
}

/// The first rate-limit field present that its grammar does not allow: a count or delay
/// that is not a whole number of seconds (`Retry-After` may also be an HTTP-date), or a
/// `RateLimit` field that is not a list of items.
fn malformed(get: &Get<'_>) -> Option<(String, String)> {
    const NUMBERS: [&str; 6] = [
        "ratelimit-limit",
        "ratelimit-remaining",
        "ratelimit-reset",
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
    ];
    let whole = |v: &str| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit());
    let bad = |name: &str, ok: &dyn Fn(&str) -> bool| {
        get(name)
            .filter(|v| !ok(v.trim()))
            .map(|v| (name.to_owned(), v))
    };
    NUMBERS
        .iter()
        .find_map(|n| bad(n, &whole))
        .or_else(|| {
            bad("retry-after", &|v| {
                whole(v) || httpdate::parse_http_date(v).is_ok()
            })
        })
        .or_else(|| bad("ratelimit", &|v| items(v).is_some()))
}

/// Whole seconds from `now` to `at`, rounded down; 0 if `at` is not later.
fn whole_secs_until(now: SystemTime, at: SystemTime) -> u64 {
    at.duration_since(now).map_or(0, |d| d.as_secs())
}

/// Whole seconds from `now` to `at`, rounded up; 0 if `at` is not later.
fn secs_until(now: SystemTime, at: SystemTime) -> u64 {
    at.duration_since(now)
        .map_or(0, |d| d.as_nanos().div_ceil(1_000_000_000) as u64)
}

/// The `RateLimit-Policy` item's quota and window (`q`, `w` seconds): the one named
/// `policy`, or the only one.
pub fn announced(get: &Get<'_>, policy: Option<&str>) -> Result<Option<(u64, u64)>, String> {
    let Some(value) = get("ratelimit-policy") else {
        return Ok(None);
    };
    let items =
        items(&value).ok_or_else(|| format!("RateLimit-Policy {value:?} does not parse"))?;
    let item = match policy {
        Some(name) => items
            .iter()
            .find(|i| i.name == name)
            .ok_or_else(|| format!("RateLimit-Policy {value:?} has no policy named {name:?}"))?,
        None if items.len() == 1 => &items[0],
        None => {
            return Err(format!(
                "RateLimit-Policy {value:?} names {} policies: choose one with --policy-name",
                items.len()
            ));
        }
    };
    match (item.params.get("q"), item.params.get("w")) {
        (Some(&q), Some(&w)) => Ok(Some((q, w))),
        (Some(&q), None) => Ok(Some((q, 1))),
        _ => Err(format!("RateLimit-Policy {value:?}: no q")),
    }
}

/// One item of a RateLimit field: its name and its non-negative integer parameters.
#[derive(Debug)]
struct Item {
    name: String,
    params: std::collections::BTreeMap<String, u64>,
}

fn items(value: &str) -> Option<Vec<Item>> {
    let list: sfv::List = sfv::Parser::new(value).parse().ok()?;
    let mut out = Vec::new();
    for entry in list.iter() {
        let sfv::ListEntry::Item(item) = entry else {
            continue;
        };
        let name = match (item.bare_item.as_string(), item.bare_item.as_token()) {
            (Some(s), _) => s.as_str().to_owned(),
            (None, Some(t)) => t.as_str().to_owned(),
            _ => continue,
        };
        let params = item
            .params
            .iter()
            .filter_map(|(k, v)| {
                let n = i64::from(v.as_integer()?);
                Some((k.as_str().to_owned(), u64::try_from(n).ok()?))
            })
            .collect();
        out.push(Item { name, params });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn reading(policy: Option<&str>) -> Reading<'_> {
        Reading {
            policy,
            reset: ResetReading::Auto,
            now: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        }
    }

    fn getter(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let m: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k: &str| m.get(k).cloned()
    }

    #[test]
    fn the_binding_item_and_retry_after_are_read() {
        let g = getter(&[
            ("ratelimit", r#""per-ip";r=90;t=1, "per-key";r=0;t=2"#),
            ("retry-after", "2"),
        ]);
        let f = read(&g, &reading(None));
        assert_eq!(f.remaining, Some(0));
        assert_eq!(f.reset_secs, Some(2));
        assert_eq!(f.retry_after, Some(Nanos::from_secs(2)));
        assert_eq!(read(&g, &reading(Some("per-ip"))).remaining, Some(90));
    }

    #[test]
    fn old_style_fields_and_garbage() {
        let g = getter(&[
            ("x-ratelimit-remaining", "7"),
            ("retry-after", "Wed, 21 Oct 2015"),
        ]);
        let f = read(&g, &reading(None));
        assert_eq!(f.remaining, Some(7));
        assert_eq!(f.retry_after, None, "a date without its time is no wait");
        assert_eq!(
            f.malformed,
            Some(("retry-after".into(), "Wed, 21 Oct 2015".into()))
        );
        let g = getter(&[("ratelimit", "r=;;")]);
        assert_eq!(read(&g, &reading(None)).remaining, None);
        assert_eq!(read(&g, &reading(None)).malformed.unwrap().0, "ratelimit");
    }

    /// An epoch reset past what the system's time can hold reads as the longest wait.
    #[test]
    fn a_reset_beyond_any_date_is_the_longest_wait() {
        for (unit, value) in [
            (ResetUnit::EpochSeconds, u64::MAX),
            (ResetUnit::EpochSeconds, 1 << 63),
            (ResetUnit::EpochMillis, u64::MAX),
        ] {
            let g = getter(&[
                ("x-ratelimit-remaining", "5"),
                ("x-ratelimit-reset", &value.to_string()),
            ]);
            let given = Reading {
                reset: ResetReading::Given(unit),
                ..reading(None)
            };
            let f = read(&g, &given);
            assert_eq!(f.remaining, Some(5));
            let secs = f.reset_secs.unwrap();
            assert!(secs > 500_000_000_000_000, "{unit:?} {value}: {secs}");
        }
    }

    #[test]
    fn a_field_outside_its_grammar_is_malformed() {
        let of = |name: &str, value: &str| read(&getter(&[(name, value)]), &reading(None));
        assert_eq!(of("retry-after", "0.532").malformed.unwrap().1, "0.532");
        assert!(of("x-ratelimit-remaining", "-1").malformed.is_some());
        assert!(of("ratelimit-reset", "1.5").malformed.is_some());
        assert_eq!(of("retry-after", "3").malformed, None);
        assert_eq!(
            of("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT").malformed,
            None
        );
        assert_eq!(of("x-ratelimit-reset", " 12 ").malformed, None);
    }

    #[test]
    fn the_announced_policy_needs_one_item_or_a_name() {
        let g = getter(&[(
            "ratelimit-policy",
            r#""per-ip";q=100;w=1, "per-key";q=5;w=5"#,
        )]);
        assert!(announced(&g, None).unwrap_err().contains("--policy-name"));
        assert_eq!(announced(&g, Some("per-key")).unwrap(), Some((5, 5)));
        assert!(announced(&g, Some("nope")).is_err());
        assert_eq!(announced(&getter(&[]), None).unwrap(), None);
    }

    #[test]
    fn every_dialect_is_read_with_its_reset_in_seconds_from_the_answer() {
        // The probe's clock reads 1 700 000 000 s; the answer's own Date, 10 s later.
        let date = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(1_700_000_010));
        let triple = getter(&[
            ("ratelimit-limit", "10"),
            ("ratelimit-remaining", "3"),
            ("ratelimit-reset", "4"),
        ]);
        let f = read(&triple, &reading(None));
        assert_eq!(
            (f.limit, f.remaining, f.reset_secs),
            (Some(10), Some(3), Some(4))
        );
        assert_eq!(f.dialect, Some(Dialect::RateLimitTriple));
        for (reset, unit) in [
            ("7", ResetUnit::DeltaSeconds),
            ("1700000007", ResetUnit::EpochSeconds),
            ("1700000006500", ResetUnit::EpochMillis),
        ] {
            let g = getter(&[
                ("x-ratelimit-limit", "10"),
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", reset),
            ]);
            let f = read(&g, &reading(None));
            assert_eq!(f.dialect, Some(Dialect::XRateLimit(unit)), "{reset}");
            // At least: 7 s, an epoch second rounded either way (6 s), 6.5 s rounded down.
            let least = if unit == ResetUnit::DeltaSeconds {
                7
            } else {
                6
            };
            assert_eq!(f.reset_secs, Some(least), "{reset}");
            // Against the answer's Date instead: 10 s later, the epoch resets are past.
            let mut with_date = vec![("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", reset)];
            with_date.push(("date", &date));
            let f = read(&getter(&with_date), &reading(None));
            let want = if unit == ResetUnit::DeltaSeconds {
                7
            } else {
                0
            };
            assert_eq!(f.reset_secs, Some(want), "{reset}");
        }
        // A reset unit given overrides the guess.
        let g = getter(&[
            ("x-ratelimit-remaining", "1"),
            ("x-ratelimit-reset", "1700000007"),
        ]);
        let given = Reading {
            reset: ResetReading::Given(ResetUnit::DeltaSeconds),
            ..reading(None)
        };
        assert_eq!(read(&g, &given).reset_secs, Some(1_700_000_007));
        // The structured field wins over the others when both are sent.
        let both = getter(&[
            ("ratelimit", "\"a\";r=2;t=1"),
            ("x-ratelimit-remaining", "9"),
        ]);
        assert_eq!(read(&both, &reading(None)).remaining, Some(2));
    }

    #[test]
    fn retry_after_as_an_http_date_is_a_wait_from_the_answers_date() {
        let at = |s: u64| httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(s));
        let (date, later) = (at(1_700_000_100), at(1_700_000_103));
        let g = getter(&[("date", &date), ("retry-after", &later)]);
        assert_eq!(
            read(&g, &reading(None)).retry_after,
            Some(Nanos::from_secs(3))
        );
        // No Date: the probe's clock (1 700 000 000 s).
        let g = getter(&[("retry-after", &later)]);
        assert_eq!(
            read(&g, &reading(None)).retry_after,
            Some(Nanos::from_secs(103))
        );
        // A date in the past is a wait of 0, as said.
        let g = getter(&[("date", &later), ("retry-after", &date)]);
        assert_eq!(read(&g, &reading(None)).retry_after, Some(Nanos::ZERO));
    }

    #[test]
    fn a_reset_unit_is_parsed_or_refused() {
        assert_eq!(ResetReading::parse("auto"), Ok(ResetReading::Auto));
        assert_eq!(
            ResetReading::parse("epoch-ms"),
            Ok(ResetReading::Given(ResetUnit::EpochMillis))
        );
        assert!(ResetReading::parse("ms").unwrap_err().contains("epoch-ms"));
    }
}
