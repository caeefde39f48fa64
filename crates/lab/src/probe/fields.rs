//! Reading an HTTP limiter's fields: the IETF draft's `RateLimit` and `RateLimit-Policy`
//! (structured fields, RFC 9651), the common `X-RateLimit-*` ones, and `Retry-After`.
//!
//! A field that does not parse is treated as absent, never guessed at: the checks that need
//! it are then not made.

use ratelab_check::probe::Fields;
use ratelab_core::Nanos;

/// A field's value by (lower-case) name.
pub type Get<'a> = dyn Fn(&str) -> Option<String> + 'a;

/// The fields an answer carried. With several `RateLimit` items, the one named `policy`,
/// else the one with the least remaining (the limit that binds).
pub fn read(get: &Get<'_>, policy: Option<&str>) -> Fields {
    let mut f = Fields {
        retry_after_unit: Nanos::from_secs(1),
        ..Fields::default()
    };
    if let Some(items) = get("ratelimit").and_then(|v| items(&v)) {
        let chosen = match policy {
            Some(name) => items.into_iter().find(|i| i.name == name),
            None => items
                .into_iter()
                .filter(|i| i.params.contains_key("r"))
                .min_by_key(|i| i.params["r"]),
        };
        if let Some(i) = chosen {
            f.remaining = i.params.get("r").copied();
            f.reset_secs = i.params.get("t").copied();
        }
    }
    if f.remaining.is_none() {
        f.remaining = get("x-ratelimit-remaining").and_then(|v| v.trim().parse().ok());
    }
    f.retry_after = get("retry-after")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Nanos::from_secs);
    f
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

    fn getter(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
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
        let f = read(&g, None);
        assert_eq!(f.remaining, Some(0));
        assert_eq!(f.reset_secs, Some(2));
        assert_eq!(f.retry_after, Some(Nanos::from_secs(2)));
        assert_eq!(read(&g, Some("per-ip")).remaining, Some(90));
    }

    #[test]
    fn old_style_fields_and_garbage() {
        let g = getter(&[
            ("x-ratelimit-remaining", "7"),
            ("retry-after", "Wed, 21 Oct 2015"),
        ]);
        let f = read(&g, None);
        assert_eq!(f.remaining, Some(7));
        assert_eq!(f.retry_after, None, "an HTTP-date is not read as a wait");
        let g = getter(&[("ratelimit", "r=;;")]);
        assert_eq!(read(&g, None).remaining, None);
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
}
