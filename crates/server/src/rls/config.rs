//! Descriptor trees: envoyproxy/ratelimit's configuration model, read from `[[domain]]`
//! tables of the limits file (TOML) or from envoyproxy/ratelimit's own YAML files unchanged.
//!
//! A domain holds descriptors; each has a `key`, an optional `value` (without one, every
//! distinct value the caller sends gets a bucket of its own), nested `descriptors`, and at
//! most one of: `rate_limit` (envoyproxy/ratelimit's `unit` and `requests_per_unit`, run as a
//! token bucket of that capacity refilled at that rate: never more than `requests_per_unit`
//! at once, exact on the store's clock; or its `unlimited: true`), or `policy` (any ratelab
//! algorithm, as in a `[[limit]]`). `shadow_mode` counts the descriptor's denials without
//! refusing anything.
//!
//! ```yaml
//! domain: edge
//! descriptors:
//!   - key: remote_address
//!     rate_limit: { unit: second, requests_per_unit: 10 }
//!   - key: path
//!     value: /login
//!     rate_limit: { unit: minute, requests_per_unit: 5 }
//!     descriptors:
//!       - key: remote_address
//!         shadow_mode: true
//!         rate_limit: { unit: minute, requests_per_unit: 2 }
//! ```
//!
//! Checks that need one entry are made while it is read (so an error names the line and
//! column it was found at); what the YAML form of envoyproxy/ratelimit has and ratelab does
//! not (`replaces`, wildcard values) is refused with that reason.

use crate::policy::{AlgorithmName, Invalid, PolicySpec, policy_at, redis_can_run, simple_name};
use ratelab_core::located::{Located, PathSeg, parse_path};
use ratelab_core::{Nanos, Policy, TokenBucket};
use schemars::JsonSchema;
use serde::Deserialize;

/// The most descriptors in one domain's tree, counted at every level.
pub const MAX_DESCRIPTORS: usize = 4096;
/// The deepest tree.
pub const MAX_DEPTH: usize = 8;

/// A domain: a tree of descriptors of its own.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DomainEntry {
    /// The domain's name, as Envoy's rate limit filter sends it.
    #[schemars(length(min = 1, max = 64))]
    pub domain: String,
    /// Its descriptors.
    #[serde(default)]
    pub descriptors: Vec<DescriptorEntry>,
}

/// The unit of envoyproxy/ratelimit's `rate_limit`, in any case (`second`, `SECOND`).
#[derive(Clone, Copy, Debug, JsonSchema, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    /// One second.
    Second,
    /// 60 s.
    Minute,
    /// 3 600 s.
    Hour,
    /// 86 400 s.
    Day,
    /// 7 days.
    Week,
    /// 30 days.
    Month,
    /// 365 days.
    Year,
}

impl<'de> Deserialize<'de> for Unit {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Unit, D::Error> {
        let text = String::deserialize(d)?;
        Unit::ALL
            .into_iter()
            .find(|u| format!("{u:?}").eq_ignore_ascii_case(&text))
            .ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "unknown unit {text:?}, expected one of second, minute, hour, day, week, month, year"
                ))
            })
    }
}

impl Unit {
    /// Every unit, shortest first.
    pub const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    /// Its length, seconds (envoyproxy/ratelimit's: a month is 30 days, a year 365).
    pub fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 7 * 86_400,
            Unit::Month => 30 * 86_400,
            Unit::Year => 365 * 86_400,
        }
    }

    /// The unit of exactly `seconds`, if there is one.
    pub fn of_seconds(seconds: u64) -> Option<Unit> {
        Unit::ALL.into_iter().find(|u| u.seconds() == seconds)
    }
}

/// envoyproxy/ratelimit's limit: `requests_per_unit` per `unit`, or `unlimited`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RateLimitEntry {
    /// The unit.
    pub unit: Option<Unit>,
    /// Requests per unit: the bucket's capacity and its refill per unit.
    #[schemars(range(min = 1))]
    pub requests_per_unit: Option<u32>,
    /// A name for the limit (in `RateLimit-Policy`, the response's `current_limit` and the
    /// metrics); by default one made of the domain and the descriptor's path.
    pub name: Option<String>,
    /// Never limited (the answer is OK, with no current limit).
    #[serde(default)]
    pub unlimited: bool,
    /// envoyproxy/ratelimit's `replaces`: refused (not supported).
    #[schemars(skip)]
    pub replaces: Option<serde::de::IgnoredAny>,
}

/// Declares [`PolicyEntry`], its policy's parameters from core's one list of them.
macro_rules! policy_entry {
    ($($doc:literal, $field:ident, $max:literal;)*) => {
        /// A ratelab algorithm for a descriptor, with the parameters of a `[[limit]]`.
        #[derive(Clone, Debug, Deserialize, JsonSchema, PartialEq, Eq)]
        #[serde(deny_unknown_fields)]
        pub struct PolicyEntry {
            /// The algorithm.
            pub algorithm: AlgorithmName,
            $( #[doc = $doc] #[schemars(range(min = 1, max = $max))] pub $field: Option<u64>, )*
            /// A name for the limit, as for `rate_limit`.
            pub name: Option<String>,
        }

        impl PolicyEntry {
            /// Its algorithm's parameters.
            pub fn params(&self) -> PolicySpec {
                PolicySpec {
                    algorithm: self.algorithm,
                    $($field: self.$field,)*
                }
            }
        }
    };
}
ratelab_core::for_each_policy_field!(policy_entry);

/// One descriptor of a domain's tree, as written.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DescriptorEntry {
    /// The entry's key.
    pub key: String,
    /// The entry's value; without one, each distinct value has its own buckets.
    pub value: Option<String>,
    /// envoyproxy/ratelimit's limit.
    pub rate_limit: Option<RateLimitEntry>,
    /// A ratelab algorithm instead of `rate_limit`.
    pub policy: Option<PolicyEntry>,
    /// Counted, never refused.
    #[serde(default)]
    pub shadow_mode: bool,
    /// Accepted for envoyproxy/ratelimit's files, and ignored: ratelab's metrics are per
    /// limit.
    pub detailed_metric: Option<bool>,
    /// Deeper descriptors, matched by the request's next entry.
    #[serde(default)]
    pub descriptors: Vec<DescriptorEntry>,
}

/// What a descriptor does when a request's entries end at it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leaf {
    /// Nothing: it only leads to deeper descriptors.
    None,
    /// Never limited.
    Unlimited,
    /// Limited by `policy`, under `name`, enforced or shadow.
    Limited {
        /// The limit's name.
        name: String,
        /// Its algorithm.
        policy: Policy,
        /// Whether its denials only count.
        shadow: bool,
        /// envoyproxy/ratelimit's description of it, when it is one of theirs.
        unit: Option<(u32, Unit)>,
        /// Where it is in its file (`domain[0].descriptors[2].rate_limit`).
        at: String,
    },
}

/// A validated descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Descriptor {
    /// The entry's key.
    pub key: String,
    /// The entry's value, or any.
    pub value: Option<String>,
    /// What it limits.
    pub leaf: Leaf,
    /// Deeper descriptors.
    pub children: Vec<Descriptor>,
}

/// A validated domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Domain {
    /// Its name.
    pub name: String,
    /// Its top-level descriptors.
    pub descriptors: Vec<Descriptor>,
}

/// The domains the rate limit service serves, each name once: a limits file's `[[domain]]`s
/// and the envoyproxy/ratelimit YAML files' domains are merged into one by [`Domains::merge`],
/// the one place a repeated domain is found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Domains(Vec<Domain>);

/// A domain name given twice: each domain is configured once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repeated {
    /// The domain's name.
    pub name: String,
}

impl std::fmt::Display for Repeated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "domain {:?} is configured twice: expected each domain once",
            self.name
        )
    }
}

impl Domains {
    /// Whether a domain called `name` can join these: it is not one of them.
    pub fn admits(&self, name: &str) -> Result<(), Repeated> {
        match self.0.iter().any(|d| d.name == name) {
            true => Err(Repeated { name: name.into() }),
            false => Ok(()),
        }
    }

    /// Adds `more`, in order; a domain already served (or given twice in `more`) is an error,
    /// and leaves the domains before it added.
    pub fn merge(&mut self, more: impl IntoIterator<Item = Domain>) -> Result<(), Repeated> {
        for d in more {
            self.admits(&d.name)?;
            self.0.push(d);
        }
        Ok(())
    }
}

impl std::ops::Deref for Domains {
    type Target = [Domain];

    fn deref(&self) -> &[Domain] {
        &self.0
    }
}

impl IntoIterator for Domains {
    type Item = Domain;
    type IntoIter = std::vec::IntoIter<Domain>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl From<Domain> for Domains {
    fn from(d: Domain) -> Domains {
        Domains(vec![d])
    }
}

impl Domain {
    /// How many of its descriptors, at every level, have a limit.
    pub fn limits(&self) -> usize {
        fn count(d: &[Descriptor]) -> usize {
            d.iter()
                .map(|d| usize::from(matches!(d.leaf, Leaf::Limited { .. })) + count(&d.children))
                .sum()
        }
        count(&self.descriptors)
    }
}

/// The policy of envoyproxy/ratelimit's `requests_per_unit` per `unit`: a bucket of that many,
/// refilled at that rate.
///
/// The rate `n` per unit is written in lowest terms (`n / g` tokens every `unit / g`, `g` the
/// greatest common divisor): the same bucket, with the smallest integers, so that the Redis
/// script's exact range holds for day, week and month limits too.
pub fn unit_policy(requests_per_unit: u32, unit: Unit) -> Result<Policy, String> {
    let n = u64::from(requests_per_unit);
    let period = Nanos::from_secs(unit.seconds()).as_u64();
    let g = gcd(n, period);
    TokenBucket::new(n, n / g, Nanos(period / g))
        .map(Policy::TokenBucket)
        .map_err(|e| e.to_string())
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

/// Validates the domains (at `at`, the path of their list) into trees; limit names are made
/// unique across all of them.
pub fn validate(domains: &[DomainEntry], at: &str) -> Result<Domains, Invalid> {
    let mut out = Domains::default();
    let mut names = std::collections::BTreeSet::new();
    for (i, d) in domains.iter().enumerate() {
        let path = format!("{at}[{i}]");
        if d.domain.is_empty() || d.domain.len() > 255 || d.domain.chars().any(char::is_control) {
            return Err((
                format!("{path}.domain"),
                format!(
                    "{:?}: expected 1 to 255 bytes with no control characters",
                    d.domain
                ),
            ));
        }
        let repeated = |r: Repeated| {
            (
                format!("{path}.domain"),
                format!(
                    "{:?} is configured twice: expected each domain once",
                    r.name
                ),
            )
        };
        // Before its descriptors: a copied domain is reported as one, not by its limits' names.
        out.admits(&d.domain).map_err(repeated)?;
        let mut count = 0;
        let descriptors = level(
            &d.descriptors,
            &d.domain,
            &format!("{path}.descriptors"),
            1,
            &mut count,
            &mut names,
        )?;
        out.merge([Domain {
            name: d.domain.clone(),
            descriptors,
        }])
        .map_err(repeated)?;
    }
    Ok(out)
}

/// One level of a tree: `entries` at `at`, at depth `depth`, under the path `trail` (for
/// default names).
fn level(
    entries: &[DescriptorEntry],
    trail: &str,
    at: &str,
    depth: usize,
    count: &mut usize,
    names: &mut std::collections::BTreeSet<String>,
) -> Result<Vec<Descriptor>, Invalid> {
    if depth > MAX_DEPTH && !entries.is_empty() {
        return Err((
            at.to_owned(),
            format!("descriptors nested deeper than {MAX_DEPTH} levels"),
        ));
    }
    let mut out: Vec<Descriptor> = Vec::with_capacity(entries.len());
    for (i, e) in entries.iter().enumerate() {
        let path = format!("{at}[{i}]");
        *count += 1;
        if *count > MAX_DESCRIPTORS {
            return Err((
                path,
                format!("more than {MAX_DESCRIPTORS} descriptors in one domain"),
            ));
        }
        let d = descriptor(e, trail, &path, depth, count, names)?;
        if out.iter().any(|o| o.key == d.key && o.value == d.value) {
            return Err((
                format!("{path}.key"),
                format!(
                    "key {:?}{} appears twice at this level: expected each once",
                    d.key,
                    d.value
                        .as_ref()
                        .map_or(String::new(), |v| format!(" with value {v:?}"))
                ),
            ));
        }
        out.push(d);
    }
    Ok(out)
}

fn descriptor(
    e: &DescriptorEntry,
    trail: &str,
    at: &str,
    depth: usize,
    count: &mut usize,
    names: &mut std::collections::BTreeSet<String>,
) -> Result<Descriptor, Invalid> {
    let field = |f: &str| format!("{at}.{f}");
    if e.key.is_empty() || e.key.len() > 128 || e.key.chars().any(char::is_control) {
        return Err((
            field("key"),
            format!(
                "{:?}: expected 1 to 128 characters, no control characters",
                e.key
            ),
        ));
    }
    if let Some(v) = &e.value {
        if v.len() > 128 || v.chars().any(char::is_control) {
            return Err((
                field("value"),
                format!("{v:?}: expected at most 128 characters, no control characters"),
            ));
        }
        if v.ends_with('*') {
            return Err((
                field("value"),
                format!(
                    "{v:?}: wildcard values are not supported; leave `value` out for a bucket per value"
                ),
            ));
        }
    }
    let step = match &e.value {
        Some(v) => format!("{}_{}", e.key, v),
        None => e.key.clone(),
    };
    let trail = format!("{trail}.{step}");
    if e.rate_limit.is_some() && e.policy.is_some() {
        return Err((
            field("policy"),
            "give a rate_limit or a policy, not both".into(),
        ));
    }
    let unlimited = e.rate_limit.as_ref().is_some_and(|r| r.unlimited);
    if e.shadow_mode && (unlimited || (e.rate_limit.is_none() && e.policy.is_none())) {
        return Err((
            field("shadow_mode"),
            "shadow_mode needs a rate_limit or a policy to measure".into(),
        ));
    }
    let leaf = if let Some(r) = &e.rate_limit {
        rate_limit_leaf(r, &trail, &field("rate_limit"), e.shadow_mode, names)?
    } else if let Some(p) = &e.policy {
        let policy = policy_at(&p.params(), &field("policy"))?;
        Leaf::Limited {
            name: limit_name(p.name.as_deref(), &trail, &field("policy.name"), names)?,
            policy,
            shadow: e.shadow_mode,
            unit: None,
            at: field("policy"),
        }
    } else {
        Leaf::None
    };
    let children = level(
        &e.descriptors,
        &trail,
        &field("descriptors"),
        depth + 1,
        count,
        names,
    )?;
    Ok(Descriptor {
        key: e.key.clone(),
        // An empty value is no value, as for envoyproxy/ratelimit.
        value: e.value.clone().filter(|v| !v.is_empty()),
        leaf,
        children,
    })
}

/// The leaf of envoyproxy/ratelimit's `rate_limit` at `at`.
fn rate_limit_leaf(
    r: &RateLimitEntry,
    trail: &str,
    at: &str,
    shadow: bool,
    names: &mut std::collections::BTreeSet<String>,
) -> Result<Leaf, Invalid> {
    let field = |f: &str| format!("{at}.{f}");
    if r.replaces.is_some() {
        return Err((
            field("replaces"),
            "`replaces` is not supported: every matching descriptor's limit applies".into(),
        ));
    }
    if r.unlimited {
        if r.unit.is_some() || r.requests_per_unit.is_some() {
            return Err((
                field("unlimited"),
                "an unlimited rate_limit has no unit or requests_per_unit".into(),
            ));
        }
        return Ok(Leaf::Unlimited);
    }
    let Some(unit) = r.unit else {
        return Err((at.to_owned(), "a rate_limit needs a unit".into()));
    };
    let n = match r.requests_per_unit {
        None => return Err((at.to_owned(), "a rate_limit needs requests_per_unit".into())),
        Some(0) => {
            return Err((
                field("requests_per_unit"),
                "0: expected at least 1 (for no limit, unlimited: true)".into(),
            ));
        }
        Some(n) => n,
    };
    let policy = unit_policy(n, unit).map_err(|m| (field("requests_per_unit"), m))?;
    Ok(Leaf::Limited {
        name: limit_name(r.name.as_deref(), trail, &field("name"), names)?,
        policy,
        shadow,
        unit: Some((n, unit)),
        at: at.to_owned(),
    })
}

/// The limit's name: the one given (checked), or one made of `trail`'s letters, digits, `_`,
/// `-` and `.`, at most 64 of them, made unique with a numeric suffix.
fn limit_name(
    given: Option<&str>,
    trail: &str,
    at: &str,
    names: &mut std::collections::BTreeSet<String>,
) -> Result<String, Invalid> {
    let simple = |c: char| c.is_ascii_alphanumeric() || "_-.".contains(c);
    if let Some(n) = given {
        if !simple_name(n) {
            return Err((
                at.to_owned(),
                format!("{n:?}: expected 1 to 64 letters, digits, `_`, `-` or `.`"),
            ));
        }
        if !names.insert(n.to_owned()) {
            return Err((
                at.to_owned(),
                format!("{n:?} names two limits: expected unique names (they label the metrics)"),
            ));
        }
        return Ok(n.to_owned());
    }
    let base: String = trail
        .chars()
        .map(|c| if simple(c) { c } else { '_' })
        .take(56)
        .collect();
    let mut name = base.clone();
    let mut n = 2;
    while names.contains(&name) {
        name = format!("{base}-{n}");
        n += 1;
    }
    names.insert(name.clone());
    Ok(name)
}

/// envoyproxy/ratelimit's YAML file: one domain.
pub fn parse_yaml(file: &str, text: &str) -> Result<Domain, String> {
    let de = serde_norway::Deserializer::from_str(text);
    let entry: DomainEntry = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let position = inner.location().map_or((1, 1), |l| (l.line(), l.column()));
        let path = if path.is_empty() { "." } else { &path };
        // The YAML error's message repeats the path and the position given here.
        let msg = inner.to_string();
        let msg = match msg.split_once(": ") {
            Some((at, rest)) if path.starts_with(at) => rest,
            _ => &msg,
        };
        let msg = match msg.rfind(" at line ") {
            Some(i) => &msg[..i],
            None => msg,
        };
        Located::new(file, position, path, msg).to_string()
    })?;
    let domains = validate(std::slice::from_ref(&entry), "")
        .map_err(|(path, msg)| yaml_located(file, text, &path, msg).to_string())?;
    Ok(domains
        .into_iter()
        .next()
        .expect("one entry validates to one domain"))
}

/// The error `message` about the value at `path` of the one domain validated from a YAML
/// file (`[0].descriptors[1].key`, reported without the domain's own `[0].`).
fn yaml_located(file: &str, text: &str, path: &str, message: String) -> Located {
    let path = path.trim_start_matches("[0]").trim_start_matches('.');
    Located::new(file, yaml_position(text, &parse_path(path)), path, message)
}

/// Where the entry at `path` (`descriptors[1].rate_limit.unit`) is in a YAML text, found by
/// following the path through its block mappings and sequences by indentation: the line and
/// column of the deepest part found (a key where it is written, an item at its `-`), or the
/// start.
fn yaml_position(text: &str, path: &[PathSeg]) -> (usize, usize) {
    let lines: Vec<&str> = text.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start_matches([' ', '-']).len();
    let mut found = (1, 1);
    let (mut from, mut to, mut min) = (0usize, lines.len(), 0usize);
    for seg in path {
        match seg {
            PathSeg::Key(name) => {
                let Some(k) = (from..to).find(|&k| {
                    let l = lines[k].trim_start_matches([' ', '-']);
                    indent(lines[k]) >= min && l.starts_with(&format!("{name}:"))
                }) else {
                    break;
                };
                found = (k + 1, indent(lines[k]) + 1);
                let own = indent(lines[k]);
                let end = (k + 1..to)
                    .find(|&j| {
                        !lines[j].trim().is_empty()
                            && indent(lines[j]) <= own
                            && !lines[j].trim_start().starts_with('-')
                    })
                    .unwrap_or(to);
                (from, to, min) = (k + 1, end, own);
            }
            PathSeg::Index(i) => {
                let items: Vec<usize> = (from..to)
                    .filter(|&j| lines[j].trim_start().starts_with('-'))
                    .collect();
                let item_indent = items
                    .first()
                    .map(|&j| lines[j].len() - lines[j].trim_start().len());
                let items: Vec<usize> = items
                    .into_iter()
                    .filter(|&j| Some(lines[j].len() - lines[j].trim_start().len()) == item_indent)
                    .collect();
                let Some(&start) = items.get(*i) else { break };
                found = (start + 1, indent(lines[start]) + 1);
                let end = items.get(i + 1).copied().unwrap_or(to);
                (from, to) = (start, end);
                min = 0;
            }
        }
    }
    found
}

/// Checks that Redis can run every limit of `domains`: every algorithm within its Lua
/// script's exact range. The error is at the limit's path.
pub fn check_redis(domains: &[Domain]) -> Result<(), Invalid> {
    fn walk(d: &[Descriptor]) -> Result<(), Invalid> {
        for n in d {
            if let Leaf::Limited { policy, at, .. } = &n.leaf {
                redis_can_run(policy).map_err(|m| (at.clone(), m))?;
            }
            walk(&n.children)?;
        }
        Ok(())
    }
    domains.iter().try_for_each(|d| walk(&d.descriptors))
}

/// [`check_redis`] for envoyproxy/ratelimit YAML file `file`, with `text`: errors located.
pub fn check_redis_yaml(file: &str, text: &str, domain: &Domain) -> Result<(), String> {
    check_redis(std::slice::from_ref(domain))
        .map_err(|(path, msg)| yaml_located(file, text, &path, msg).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn domain(name: &str) -> Domain {
        Domain {
            name: name.into(),
            descriptors: Vec::new(),
        }
    }

    #[test]
    fn merged_domains_keep_their_order_and_refuse_a_repeated_one() {
        let mut all = Domains::from(domain("edge"));
        all.merge([domain("api"), domain("batch")]).unwrap();
        let names: Vec<_> = all.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["edge", "api", "batch"]);
        let e = all.merge([domain("new"), domain("api")]).unwrap_err();
        assert_eq!(e.name, "api");
        assert_eq!(
            e.to_string(),
            "domain \"api\" is configured twice: expected each domain once"
        );
        let e = Domains::default()
            .merge([domain("x"), domain("x")])
            .unwrap_err();
        assert_eq!(e.name, "x");
    }
}
