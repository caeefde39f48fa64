//! The limits file: many named limits in TOML, validated into the gateway's
//! [`LimitSpec`]s and their algorithms, with every error located by file, line, column and
//! path.
//!
//! TOML because operators edit this file by hand and reload it live: it has comments, no
//! indentation that changes meaning and no implicit typing (YAML reads `NO` as false and
//! `1:30` as a number), and it is the format of Cargo, Rust tooling and many servers'
//! configs. Its JSON Schema (`ratelab-server schema`, committed as
//! `docs/limits.schema.json`) serves editors that validate TOML against one (taplo, Even
//! Better TOML, with a `#:schema` comment).
//!
//! ```toml
//! [[limit]]
//! name = "per-ip"
//! algorithm = "token-bucket"
//! capacity = 1000
//! refill_per_sec = 100
//! key = "client-ip"
//!
//! [[limit]]
//! name = "writes"
//! algorithm = "sliding-window"
//! limit = 60
//! window_ms = 60000
//! key = "header:x-tenant"
//! mode = "shadow"
//! cost_from_header = { name = "x-cost", default = 1, max = 10 }
//! match = { route_prefix = "/api/", methods = ["POST", "PUT"] }
//! ```

use ratelab_core::Policy;
use ratelab_core::headers::PolicyName;
use ratelab_core::located::{Located, PathSeg, line_column, parse_path};
use ratelab_gateway::IpNet;
use ratelab_gateway::limits::{Cost, KeyBy, LimitSpec, MAX_LIMITS, Mode, Selector};
use schemars::JsonSchema;
use serde::Deserialize;
use std::path::Path;

pub use crate::policy::AlgorithmName;
use crate::policy::{Invalid, PolicySpec, policy_at, policy_capacity, redis_can_run, simple_name};
use crate::rls::config::Domains;

/// The limits file.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "ratelab limits file")]
pub struct LimitsFile {
    /// The limits. A request is checked against every limit whose `match` it meets: its
    /// enforced limits together, all or nothing, whenever their store can (if any denies it,
    /// it is 429 and spends nothing at any; docs/GATEWAY.md says when it cannot), its shadow
    /// limits each on its own.
    #[schemars(length(max = 256))]
    #[serde(default)]
    pub limit: Vec<LimitEntry>,
    /// Envoy rate limit service domains (`--grpc-listen`): descriptor trees in
    /// envoyproxy/ratelimit's model (`crate::rls::config`).
    #[serde(default)]
    pub domain: Vec<crate::rls::config::DomainEntry>,
}

/// Whether a limit's denials refuse requests.
#[derive(Clone, Copy, Debug, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ModeName {
    /// Denials answer 429.
    #[default]
    Enforce,
    /// Evaluated and counted in `ratelab_shadow_denied_total{limit}`, never refused.
    Shadow,
}

/// A cost read from a request header.
#[derive(Clone, Debug, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CostHeader {
    /// The header.
    pub name: String,
    /// The cost of a request without it.
    #[schemars(range(min = 1))]
    pub default: u64,
    /// The largest cost a request may claim (at most the limit's capacity); a value outside
    /// 1 to `max` is refused with 400.
    #[schemars(range(min = 1))]
    pub max: u64,
}

/// Which requests a limit applies to: all the given conditions hold.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MatchEntry {
    /// The path starts with this (it starts with `/`).
    pub route_prefix: Option<String>,
    /// The method is one of these.
    pub methods: Option<Vec<String>>,
    /// This header is sent.
    pub header: Option<String>,
    /// … with exactly this value.
    pub header_value: Option<String>,
    /// The client address is in one of these (addresses or CIDR ranges).
    pub clients: Option<Vec<String>>,
}

/// Declares [`LimitEntry`], its policy's parameters from core's one list of them.
macro_rules! limit_entry {
    ($($doc:literal, $field:ident, $max:literal;)*) => {
        /// One named limit.
        #[derive(Clone, Debug, Deserialize, JsonSchema, PartialEq, Eq)]
        #[serde(deny_unknown_fields)]
        pub struct LimitEntry {
            /// Its name: 1 to 64 letters, digits, `_`, `-` or `.`, unique in the file. It names the
            /// limit in `RateLimit-Policy`, problem bodies, the request log and the `limit` label of
            /// the metrics.
            #[schemars(regex(pattern = r"^[A-Za-z0-9_.-]{1,64}$"))]
            pub name: String,
            /// The algorithm.
            pub algorithm: AlgorithmName,
            $( #[doc = $doc] #[schemars(range(min = 1, max = $max))] pub $field: Option<u64>, )*
            /// What one bucket is: `client-ip` (the default; IPv6 clients by network), `api-key`
            /// (the `x-api-key` header), `header:NAME` (that header's value), or `global` (one
            /// bucket for every matching request). A request without the key's header is not
            /// counted by the limit.
            #[schemars(regex(
                pattern = r"^(client-ip|api-key|global|header:[!#$%&'*+.^_`|~0-9A-Za-z-]+)$"
            ))]
            pub key: Option<String>,
            /// `enforce` (the default) or `shadow`.
            pub mode: Option<ModeName>,
            /// A constant cost per request (default 1), at most the limit's capacity.
            #[schemars(range(min = 1))]
            pub cost: Option<u64>,
            /// A cost taken from a header instead.
            pub cost_from_header: Option<CostHeader>,
            /// Which requests the limit applies to (default: all).
            #[serde(rename = "match")]
            pub selector: Option<MatchEntry>,
        }

        impl LimitEntry {
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
ratelab_core::for_each_policy_field!(limit_entry);

/// One limit of a validated file: what the gateway applies, and the algorithm its store runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileLimit {
    /// The gateway's view.
    pub spec: LimitSpec,
    /// The algorithm, with its parameters.
    pub policy: Policy,
}

/// The JSON Schema of the limits file.
pub fn json_schema() -> String {
    let schema = schemars::schema_for!(LimitsFile);
    serde_json::to_string_pretty(&schema).expect("a schema serializes") + "\n"
}

/// Reads and validates a limits file.
pub fn load(path: &Path) -> Result<Vec<FileLimit>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    parse(&path.display().to_string(), &text)
}

/// Validates the text of a limits file called `file` (for messages): its limits.
pub fn parse(file: &str, text: &str) -> Result<Vec<FileLimit>, String> {
    parse_all(file, text).map(|(limits, _)| limits)
}

/// Validates the text of a limits file called `file`: its limits and its domains.
pub fn parse_all(file: &str, text: &str) -> Result<(Vec<FileLimit>, Domains), String> {
    let at = |offset: usize, path: &str, msg: &str| {
        Located::new(file, line_column(text, offset), path, msg).to_string()
    };
    let de = toml::Deserializer::parse(text)
        .map_err(|e| at(e.span().map_or(0, |s| s.start), "", e.message()))?;
    let parsed: LimitsFile = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let offset = inner
            .span()
            .map(|s| s.start)
            .or_else(|| toml_offset(text, &parse_path(&path)))
            .unwrap_or(0);
        at(offset, &path, inner.message())
    })?;
    let located = |(path, msg): Invalid| located(file, text, &path, msg).to_string();
    let limits = validate(&parsed).map_err(located)?;
    let domains = crate::rls::config::validate(&parsed.domain, "domain").map_err(located)?;
    Ok((limits, domains))
}

/// The error `message` about the value at `path` in the text of a limits file `file`.
pub(crate) fn located(file: &str, text: &str, path: &str, message: String) -> Located {
    let offset = toml_offset(text, &parse_path(path)).unwrap_or(0);
    Located::new(file, line_column(text, offset), path, message)
}

/// The byte offset of the value at `path` (`limit[2].capacity`) in a TOML text, or of the
/// deepest part of it that exists (a missing field is reported where its table starts).
fn toml_offset(text: &str, path: &[PathSeg]) -> Option<usize> {
    use toml::de::{DeTable, DeValue};
    let root = DeTable::parse(text).ok()?;
    let mut offset = root.span().start;
    let mut value: Option<&DeValue<'_>> = None;
    let mut table = Some(root.get_ref());
    for seg in path {
        match seg {
            PathSeg::Key(name) => {
                let Some(t) = table else { break };
                let Some((_, v)) = t.iter().find(|(k, _)| k.get_ref() == name) else {
                    break;
                };
                offset = v.span().start;
                value = Some(v.get_ref());
            }
            PathSeg::Index(i) => {
                let Some(DeValue::Array(items)) = value else {
                    break;
                };
                let Some(item) = items.get(*i) else { break };
                offset = item.span().start;
                value = Some(item.get_ref());
            }
        }
        table = match value {
            Some(DeValue::Table(t)) => Some(t),
            _ => None,
        };
    }
    Some(offset)
}

fn header_name(raw: &str, path: String) -> Result<String, Invalid> {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if raw.is_empty() || !raw.chars().all(token) {
        return Err((
            path,
            format!("{raw:?}: expected a header name (letters, digits and !#$%&'*+-.^_`|~)"),
        ));
    }
    let name = raw.to_ascii_lowercase();
    if ratelab_gateway::ip::names_client_address(&name) {
        return Err((
            path,
            format!(
                "{raw:?} names the client's address, which any client can write: key on \
                 \"client-ip\" (--client-ip-header reads it from a trusted proxy)"
            ),
        ));
    }
    if crate::proxy::HOP_BY_HOP
        .iter()
        .any(|h| ratelab_gateway::same_when_folded(h, &name))
    {
        return Err((
            path,
            format!(
                "{raw:?} is a hop-by-hop header (RFC 9110 §7.6.1): a proxy drops it, so the \
                 application never sees what the limiter read"
            ),
        ));
    }
    Ok(name)
}

fn validate(file: &LimitsFile) -> Result<Vec<FileLimit>, Invalid> {
    if file.limit.is_empty() && file.domain.is_empty() {
        return Err((
            "limit".into(),
            "expected at least one [[limit]] or [[domain]] (to stop limiting, use the kill switch)"
                .into(),
        ));
    }
    if file.limit.len() > MAX_LIMITS {
        return Err((
            format!("limit[{MAX_LIMITS}]"),
            format!("{} limits: expected at most {MAX_LIMITS}", file.limit.len()),
        ));
    }
    let mut out: Vec<FileLimit> = Vec::with_capacity(file.limit.len());
    for (i, entry) in file.limit.iter().enumerate() {
        let limit = validate_limit(entry, &format!("limit[{i}]"))?;
        if out.iter().any(|l| l.spec.name == limit.spec.name) {
            return Err((
                format!("limit[{i}].name"),
                format!("{:?} names two limits: expected unique names", entry.name),
            ));
        }
        out.push(limit);
    }
    Ok(out)
}

fn validate_limit(e: &LimitEntry, at: &str) -> Result<FileLimit, Invalid> {
    let field = |f: &str| format!("{at}.{f}");
    if !simple_name(&e.name) {
        return Err((
            field("name"),
            format!(
                "{:?}: expected 1 to 64 letters, digits, `_`, `-` or `.`",
                e.name
            ),
        ));
    }
    let name = PolicyName::new(&e.name).map_err(|err| (field("name"), err.to_string()))?;
    let policy = policy_at(&e.params(), at)?;
    let capacity = policy_capacity(&policy);
    let key_by = match e.key.as_deref().unwrap_or("client-ip") {
        "client-ip" => KeyBy::ClientIp,
        "api-key" => KeyBy::ApiKey,
        "global" => KeyBy::Global,
        other => match other.strip_prefix("header:") {
            Some(h) => KeyBy::Header(header_name(h, field("key"))?),
            None => {
                return Err((
                    field("key"),
                    format!(
                        "{other:?}: expected \"client-ip\", \"api-key\", \"global\" or \"header:NAME\""
                    ),
                ));
            }
        },
    };
    let cost = match (e.cost, &e.cost_from_header) {
        (Some(_), Some(_)) => {
            return Err((
                field("cost_from_header"),
                "give a constant `cost` or a `cost_from_header`, not both".into(),
            ));
        }
        (Some(c), None) if !(1..=capacity).contains(&c) => {
            return Err((
                field("cost"),
                format!("{c}: expected 1 to the limit's capacity, {capacity}"),
            ));
        }
        (Some(c), None) => Cost::Fixed(c),
        (None, None) => Cost::Fixed(1),
        (None, Some(h)) => {
            let path = field("cost_from_header");
            if !(1..=capacity).contains(&h.max) {
                return Err((
                    format!("{path}.max"),
                    format!("{}: expected 1 to the limit's capacity, {capacity}", h.max),
                ));
            }
            if !(1..=h.max).contains(&h.default) {
                return Err((
                    format!("{path}.default"),
                    format!("{}: expected 1 to max, {}", h.default, h.max),
                ));
            }
            Cost::Header {
                name: header_name(&h.name, format!("{path}.name"))?,
                default: h.default,
                max: h.max,
            }
        }
    };
    let selector = selector(e.selector.as_ref(), &field("match"))?;
    let mode = match e.mode.unwrap_or_default() {
        ModeName::Enforce => Mode::Enforce,
        ModeName::Shadow => Mode::Shadow,
    };
    Ok(FileLimit {
        spec: LimitSpec {
            name,
            selector,
            key_by,
            cost,
            mode,
        },
        policy,
    })
}

/// Checks that a store on Redis can run every limit of a validated file: every algorithm
/// within its Lua script's exact range. Errors are located like the file's own.
pub fn check_redis(file: &str, text: &str, limits: &[FileLimit]) -> Result<(), String> {
    for (i, l) in limits.iter().enumerate() {
        if let Err(msg) = redis_can_run(&l.policy) {
            return Err(located(file, text, &format!("limit[{i}]"), msg).to_string());
        }
    }
    Ok(())
}

/// `Err` unless `prefix` is a path as requests are matched: starting with `/` and already
/// normalised ([`ratelab_gateway::path`]), so that it can match at all.
pub fn check_route(prefix: &str) -> Result<(), String> {
    if !prefix.starts_with('/') {
        return Err(format!("{prefix:?}: expected a path starting with /"));
    }
    match ratelab_gateway::path::normalize(prefix) {
        Ok(n) if n == prefix => Ok(()),
        Ok(n) => Err(format!(
            "{prefix:?}: requests are matched on their normalised path, and this prefix is not \
             one: expected {n:?}"
        )),
        Err(e) => Err(format!("{prefix:?}: {e}")),
    }
}

fn selector(m: Option<&MatchEntry>, at: &str) -> Result<Selector, Invalid> {
    let Some(m) = m else {
        return Ok(Selector::default());
    };
    let field = |f: &str| format!("{at}.{f}");
    if let Some(p) = &m.route_prefix {
        check_route(p).map_err(|e| (field("route_prefix"), e))?;
    }
    let mut methods = Vec::new();
    for (i, raw) in m.methods.iter().flatten().enumerate() {
        if raw.is_empty() || raw.len() > 32 || !raw.chars().all(|c| c.is_ascii_alphabetic()) {
            return Err((
                format!("{}[{i}]", field("methods")),
                format!("{raw:?}: expected a method name such as GET"),
            ));
        }
        methods.push(raw.to_ascii_uppercase());
    }
    let header = match (&m.header, &m.header_value) {
        (None, Some(_)) => {
            return Err((
                field("header_value"),
                "a header_value needs the header it is the value of".into(),
            ));
        }
        (None, None) => None,
        (Some(h), v) => Some((header_name(h, field("header"))?, v.clone())),
    };
    let mut clients = Vec::new();
    for (i, raw) in m.clients.iter().flatten().enumerate() {
        let net: IpNet = raw
            .parse()
            .map_err(|e| (format!("{}[{i}]", field("clients")), format!("{e}")))?;
        clients.push(net);
    }
    Ok(Selector {
        route_prefix: m.route_prefix.clone(),
        methods,
        header,
        clients,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratelab_core::TokenBucket;

    fn err(text: &str) -> String {
        parse("limits.toml", text).unwrap_err()
    }

    const TWO: &str = r#"
[[limit]]
name = "per-ip"
algorithm = "token-bucket"
capacity = 100
refill_per_sec = 10

[[limit]]
name = "writes"
algorithm = "sliding-window"
limit = 60
window_ms = 60000
key = "header:X-Tenant"
mode = "shadow"
cost_from_header = { name = "x-cost", default = 1, max = 10 }
match = { route_prefix = "/api/", methods = ["post", "PUT"], clients = ["10.0.0.0/8"] }
"#;

    #[test]
    fn a_route_prefix_must_be_a_normalised_path() {
        assert_eq!(check_route("/api/"), Ok(()));
        for (p, want) in [
            ("api/", "starting with /"),
            ("//api/", "\"/api/\""),
            ("/%61pi/", "\"/api/\""),
            ("/a/../api", "\"/api\""),
            ("/api%2F", "encoded"),
        ] {
            let e = check_route(p).unwrap_err();
            assert!(e.contains(want), "{p}: {e}");
        }
    }

    #[test]
    fn a_file_becomes_limits_in_order() {
        let l = parse("limits.toml", TWO).unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].spec.name.as_str(), "per-ip");
        assert_eq!(l[0].spec.key_by, KeyBy::ClientIp);
        assert_eq!(l[0].spec.cost, Cost::Fixed(1));
        assert_eq!(
            l[0].policy,
            Policy::TokenBucket(TokenBucket::per_second(100, 10).unwrap())
        );
        assert_eq!(l[1].spec.key_by, KeyBy::Header("x-tenant".into()));
        assert_eq!(l[1].spec.mode, Mode::Shadow);
        assert_eq!(l[1].spec.selector.methods, ["POST", "PUT"]);
        assert_eq!(
            l[1].spec.cost,
            Cost::Header {
                name: "x-cost".into(),
                default: 1,
                max: 10
            }
        );
    }

    #[test]
    fn every_algorithm_is_a_limit_in_either_spelling() {
        for &a in AlgorithmName::ALL {
            let spec = a.shaped(10, 5);
            for name in [a.name().to_owned(), a.name().replace('_', "-")] {
                let mut text = format!("[[limit]]\nname = \"l\"\nalgorithm = \"{name}\"\n");
                for (field, value) in spec.values() {
                    if let Some(v) = value {
                        text += &format!("{field} = {v}\n");
                    }
                }
                let l = parse("limits.toml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
                assert_eq!(l[0].policy, spec.build().unwrap(), "{text}");
            }
        }
    }

    #[test]
    fn errors_name_the_file_line_column_and_path() {
        // A syntax error.
        let e = err("[[limit]\nname = 1");
        assert!(e.starts_with("limits.toml:1:"), "{e}");
        // A type error, at its value.
        let e = err(&TWO.replace("capacity = 100", "capacity = \"many\""));
        assert!(
            e.starts_with("limits.toml:5:12: at limit[0].capacity:"),
            "{e}"
        );
        // An unknown field.
        let e = err(&TWO.replace("capacity = 100", "capacity = 100\nburst = 3"));
        assert!(e.contains("limit[0]") && e.contains("burst"), "{e}");
        // A semantic error, located by its path.
        let e = err(&TWO.replace("refill_per_sec = 10", "refill_per_sec = 10\nlimit = 3"));
        assert!(
            e.starts_with(
                "limits.toml:7:9: at limit[0].limit: `limit` does not apply to a token bucket"
            ),
            "{e}"
        );
        let e = err(&TWO.replace("max = 10", "max = 1000"));
        assert!(
            e.starts_with("limits.toml:15:58: at limit[1].cost_from_header.max:"),
            "{e}"
        );
        let e = err(&TWO.replace("\"10.0.0.0/8\"", "\"10.0.0.0/40\""));
        assert!(e.contains("at limit[1].match.clients[0]:"), "{e}");
        let e = err(&TWO.replace("name = \"writes\"", "name = \"per-ip\""));
        assert!(
            e.starts_with("limits.toml:9:8: at limit[1].name:") && e.contains("two limits"),
            "{e}"
        );
        let e = err(&TWO.replace("name = \"writes\"", "name = \"all writes\""));
        assert!(e.contains("at limit[1].name:"), "{e}");
        let e = err(&TWO.replace("key = \"header:X-Tenant\"", "key = \"tenant\""));
        assert!(
            e.contains("at limit[1].key:") && e.contains("header:NAME"),
            "{e}"
        );
        // A header any client writes, or one a proxy drops, cannot be what a limit reads.
        for (from, to, at) in [
            (
                "\"header:X-Tenant\"",
                "\"header:X-Forwarded-For\"",
                "limit[1].key",
            ),
            (
                "\"header:X-Tenant\"",
                "\"header:true_client_ip\"",
                "limit[1].key",
            ),
            (
                "name = \"x-cost\"",
                "name = \"TE\"",
                "limit[1].cost_from_header.name",
            ),
        ] {
            let e = err(&TWO.replace(from, to));
            assert!(e.contains(&format!("at {at}:")), "{e}");
            assert!(e.contains("client-ip") || e.contains("hop-by-hop"), "{e}");
        }
        let e = err(&TWO.replace("capacity = 100\n", ""));
        assert!(
            e.contains("at limit[0]: a token bucket needs `capacity`"),
            "{e}"
        );
        let e = err("");
        assert!(e.contains("limit"), "{e}");
        let e = err("limit = []");
        assert!(e.contains("at least one"), "{e}");
    }

    /// The properties of `T`'s JSON Schema.
    fn properties<T: schemars::JsonSchema>() -> serde_json::Value {
        serde_json::to_value(schemars::schema_for!(T)).unwrap()["properties"].clone()
    }

    /// A `[[limit]]` and a descriptor's `policy` write a policy's parameters beside their own
    /// fields, so they declare them again: each must read them as core's `PolicySpec` does.
    #[test]
    fn the_files_write_a_policys_parameters_as_the_policy_spec_does() {
        let spec = properties::<PolicySpec>();
        let limit = properties::<LimitEntry>();
        let rls = properties::<crate::rls::config::PolicyEntry>();
        let bounds = |v: &serde_json::Value| (v["minimum"].clone(), v["maximum"].clone());
        for (field, _) in PolicySpec::empty(AlgorithmName::TokenBucket).values() {
            let want = bounds(&spec[field]);
            assert!(want.1.is_number(), "{field}: {spec}");
            assert_eq!(bounds(&limit[field]), want, "limit[].{field}");
            assert_eq!(bounds(&rls[field]), want, "descriptor policy.{field}");
        }
    }
}
