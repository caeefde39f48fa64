//! A target's recipe: `audits/<name>/recipe.toml`, beside the glue app when the target is a
//! library. It says how to install the target from its registry, which store it shares, how
//! to start one instance and how many, the policy it is configured with and the failure mode
//! it declares, and the upstream issues an audit may find again. Each `[[variant]]` is a
//! target of its own (`NAME/VARIANT`): the same glue app configured another way.

use ratelab_core::located::{Located, line_column};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// How long after its store is back a target may take to limit again, when its recipe
/// declares nothing: a reconnecting client's first retry, with room for a slow machine.
pub const DEFAULT_RECOVERY: &str = "1s";

/// One recipe file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    /// What the target is, in a sentence.
    pub description: String,
    /// Where it comes from (its repository or registry page).
    pub upstream: String,
    /// What to install, by registry.
    #[serde(default)]
    pub install: Install,
    /// The store its instances share.
    pub store: StoreKind,
    /// How to start one instance.
    pub instance: Instance,
    /// How to probe it.
    pub probe: ProbeSpec,
    /// What it does when its store fails, as its configuration declares.
    pub failure_mode: FailureMode,
    /// How long after its store is back it may take to limit again, as its store client's
    /// documentation gives it (a reconnect or retry delay): `"30s"`, `"500ms"`. Past it,
    /// every answer is held to the policy again. Absent: [`DEFAULT_RECOVERY`].
    #[serde(default)]
    pub recovery: Option<String>,
    /// Upstream issues a finding may rediscover, and the causes of findings.
    #[serde(default)]
    pub known: Vec<Known>,
    /// The searches of its tracker behind a finding marked "not known upstream".
    #[serde(default)]
    pub searched: Vec<Searched>,
    /// The targets this recipe makes: one per variant (at least one).
    pub variant: Vec<Variant>,
}

/// What to install.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Install {
    /// npm packages (`name@version`), installed into the recipe's directory.
    #[serde(default)]
    pub npm: Vec<String>,
    /// PyPI packages (`name==version`), installed with the machine's `pip`.
    #[serde(default)]
    pub pip: Vec<String>,
    /// Crates whose versions the results record, when the glue app is a Rust program: the
    /// recipe's directory is then a Cargo package, built from crates.io into its own
    /// `target/` (its Cargo.lock pins what it depends on).
    #[serde(default)]
    pub cargo: Vec<String>,
    /// Debian packages the audit needs (it says so; it does not install them).
    #[serde(default)]
    pub apt: Vec<String>,
    /// Programs that must be on the PATH.
    #[serde(default)]
    pub programs: Vec<String>,
}

/// The store the instances share.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreKind {
    /// A private `redis-server` on a free loopback port.
    Redis,
    /// A private `memcached` on a free loopback port.
    Memcached,
    /// None: each instance keeps its own state.
    None,
}

/// How to start one instance: `{port}`, `{store_url}`, `{store_host}`, `{store_port}`,
/// `{instance}`, `{dir}` (the recipe's directory) and `{run_dir}` (a private directory for
/// this run) are replaced in the command, the environment and the templates; so are
/// `{peer_port}` (a second free port of the instance's own, for a peer protocol) and, for
/// every instance N, `{port_N}` and `{peer_port_N}` (peers that name one another).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Instance {
    /// The command and its arguments, run in the recipe's directory.
    pub command: Vec<String>,
    /// Environment variables.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// How many instances (1 to 16).
    pub count: u32,
    /// How long one may take to listen, seconds (1 to 3600, default 20).
    #[serde(default = "twenty")]
    pub start_timeout_s: u64,
    /// Files written for each instance before it starts (a server's configuration).
    #[serde(default)]
    pub templates: Vec<Template>,
}

/// A file of the recipe's directory written, placeholders replaced, into the run's.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Template {
    /// The file in the recipe's directory.
    pub from: String,
    /// Its name in `{run_dir}` (placeholders allowed: `nginx-{instance}.conf`).
    pub to: String,
}

fn twenty() -> u64 {
    20
}

/// How the probe reaches and judges the target.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeSpec {
    /// The URL of an instance: `{port}` is its port, `{key}` the key if it goes in the path.
    pub url: String,
    /// The header that carries the key, if any.
    pub key_header: Option<String>,
    /// The policy the target is configured with, in `ratelab probe --policy`'s grammar.
    pub policy: String,
    /// Statuses that mean denied (default 429).
    #[serde(default = "deny_429")]
    pub deny_status: Vec<u16>,
    /// What `X-RateLimit-Reset` counts (`auto`, `delta`, `epoch-s`, `epoch-ms`).
    #[serde(default = "auto")]
    pub reset_unit: String,
    /// How far the target's clock may lag its decisions (`1ms`, `1s`…; default `1ms`).
    #[serde(default = "one_ms")]
    pub clock_resolution: String,
    /// Whether its windows start where the Unix time is a multiple of the window (as
    /// `floor(now / window)` counts them), as its source shows: the checks then hold its
    /// windows to that phase rather than to any.
    #[serde(default)]
    pub epoch_windows: bool,
}

fn deny_429() -> Vec<u16> {
    vec![429]
}

fn auto() -> String {
    "auto".into()
}

fn one_ms() -> String {
    "1ms".into()
}

/// What a target does when its store fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureMode {
    /// Admits every request.
    FailOpen,
    /// Refuses every request (an error or a denial).
    FailClosed,
    /// Falls back to a limit kept in each instance's memory.
    LocalFallback,
}

impl FailureMode {
    /// As recipes write it.
    pub fn name(self) -> &'static str {
        match self {
            FailureMode::FailOpen => "fail-open",
            FailureMode::FailClosed => "fail-closed",
            FailureMode::LocalFallback => "local-fallback",
        }
    }
}

/// The checks whose failures a finding can be: the probe's, then the store-fault phase's.
pub fn checks() -> Vec<&'static str> {
    ratelab_check::probe::CHECKS
        .iter()
        .map(|c| c.name())
        .chain(super::faults::CHECKS)
        .collect()
}

/// What causes a finding, named fairly: one class each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cause {
    /// The limiter's own logic.
    Logic,
    /// How its store client is configured (a default, or what its docs recommend).
    ClientConfig,
    /// A design or limitation its documentation states.
    Design,
    /// The server it runs in (a built-in response, say), not the limiter.
    Server,
    /// The audit's own glue app.
    Glue,
}

impl Cause {
    /// As recipes and cards write it.
    pub fn name(self) -> &'static str {
        match self {
            Cause::Logic => "the limiter's logic",
            Cause::ClientConfig => "its store client's configuration",
            Cause::Design => "a documented design or limitation",
            Cause::Server => "the server it runs in",
            Cause::Glue => "the audit's glue",
        }
    }
}

/// Whether an upstream item is an issue or a pull request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ItemKind {
    /// An issue.
    Issue,
    /// A pull request.
    PullRequest,
}

impl ItemKind {
    /// As cards write it.
    pub fn name(self) -> &'static str {
        match self {
            ItemKind::Issue => "issue",
            ItemKind::PullRequest => "pull request",
        }
    }
}

/// What a finding of `check` is known to be, and what causes it: an upstream item (`issue`,
/// its `kind`, `title` and the sentence that `matches`), the target's documented design
/// (`by_design`, why), or a `note` saying what does it (a store client without a command
/// timeout, a server's built-in response).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Known {
    /// The check whose failure it is (one of [`checks`]).
    pub check: String,
    /// Text the finding must contain, if the check alone does not identify it.
    #[serde(default)]
    pub contains: Option<String>,
    /// What causes it (`design` when `by_design` is given).
    #[serde(default)]
    pub cause: Option<Cause>,
    /// The upstream item (`owner/repo#N`).
    #[serde(default)]
    pub issue: Option<String>,
    /// Whether it is an issue or a pull request.
    #[serde(default)]
    pub kind: Option<ItemKind>,
    /// Its title, as upstream wrote it.
    #[serde(default)]
    pub title: Option<String>,
    /// The sentence of it that matches the finding, quoted.
    #[serde(default)]
    pub matches: Option<String>,
    /// What causes it, in a line: where no upstream item is cited, or what the item leaves
    /// unsaid.
    #[serde(default)]
    pub note: Option<String>,
    /// Why the target does this by design, for a finding no issue is about.
    #[serde(default)]
    pub by_design: Option<String>,
    /// The variants it applies to (default: all).
    #[serde(default)]
    pub variants: Vec<String>,
}

impl Known {
    /// Its cause: as written, or a documented design for `by_design`.
    pub fn cause(&self) -> Cause {
        self.cause.unwrap_or(Cause::Design)
    }
}

/// A search of a target's tracker for a finding's behaviour: what a card records before
/// it says "not known upstream".
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Searched {
    /// The tracker (its issues page).
    pub tracker: String,
    /// What was searched for.
    pub query: String,
    /// When (`YYYY-MM-DD`).
    pub on: String,
}

/// One configuration of the glue app: a target of its own.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    /// Its name (`NAME/VARIANT`).
    pub name: String,
    /// What differs, in a sentence.
    pub description: String,
    /// Environment added to every instance's.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The policy, when this variant's differs from the recipe's.
    #[serde(default)]
    pub policy: Option<String>,
    /// The instance count, when this variant's differs from the recipe's.
    #[serde(default)]
    pub count: Option<u32>,
    /// The store, when this variant's differs from the recipe's.
    #[serde(default)]
    pub store: Option<StoreKind>,
    /// What it does when its store fails, when this variant's differs from the recipe's
    /// (a limiter configured with a fallback).
    #[serde(default)]
    pub failure_mode: Option<FailureMode>,
    /// How long after its store is back it may take to limit again, when this variant's
    /// differs from the recipe's (a client configured with another retry delay).
    #[serde(default)]
    pub recovery: Option<String>,
    /// The files written for each instance, when this variant's differ from the recipe's
    /// (a configuration that names peers).
    #[serde(default)]
    pub templates: Option<Vec<Template>>,
    /// The clock resolution of its decisions, when this variant's differs from the
    /// recipe's (a store whose clock ticks in whole seconds).
    #[serde(default)]
    pub clock_resolution: Option<String>,
    /// Why this variant fails by design, if it does (instances that each count alone): its
    /// findings are then the deployment's, not a bug of the target.
    #[serde(default)]
    pub by_design: Option<String>,
}

/// A recipe read from its file, with where it lives.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The recipe's name: its directory's.
    pub name: String,
    /// Its directory.
    pub dir: PathBuf,
    /// What it says.
    pub recipe: Recipe,
}

/// Reads and checks `dir/recipe.toml`; errors name the file, line, column and path.
pub fn load(dir: &Path) -> Result<Loaded, String> {
    let file = dir.join("recipe.toml");
    let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    let shown = file.display().to_string();
    let recipe: Recipe = toml::from_str(&text).map_err(|e| {
        let at = e.span().map_or(0, |s| s.start);
        Located::new(
            &shown,
            line_column(&text, at),
            "",
            e.message().trim().to_owned(),
        )
        .to_string()
    })?;
    let fail = |path: &str, msg: String| -> String {
        Located::new(&shown, place(&text, path), path, msg).to_string()
    };
    if recipe.variant.is_empty() {
        return Err(fail(
            "variant",
            "a recipe makes at least one [[variant]]".into(),
        ));
    }
    if recipe.instance.command.is_empty() {
        return Err(fail("instance.command", "the command is empty".into()));
    }
    if !(1..=3600).contains(&recipe.instance.start_timeout_s) {
        return Err(fail(
            "instance.start_timeout_s",
            format!(
                "{} s to listen: give 1 to 3600",
                recipe.instance.start_timeout_s
            ),
        ));
    }
    for (i, count) in std::iter::once(Some(recipe.instance.count))
        .chain(recipe.variant.iter().map(|v| v.count))
        .enumerate()
    {
        if let Some(c) = count.filter(|c| !(1..=16).contains(c)) {
            let path = if i == 0 {
                "instance.count".to_owned()
            } else {
                format!("variant[{}].count", i - 1)
            };
            return Err(fail(&path, format!("{c} instances: give 1 to 16")));
        }
    }
    // The policies and clock resolutions, read as the audit will read them.
    let refused = first_refused(
        &recipe,
        ("policy", &recipe.probe.policy),
        |v| v.policy.as_ref(),
        |p| crate::probe::policy::parse(p).err(),
    )
    .or_else(|| {
        first_refused(
            &recipe,
            ("clock_resolution", &recipe.probe.clock_resolution),
            |v| v.clock_resolution.as_ref(),
            |c| crate::probe::policy::duration(c).err(),
        )
    });
    if let Some((path, e)) = refused {
        return Err(fail(&path, e));
    }
    let recoveries = std::iter::once(("recovery".to_owned(), recipe.recovery.as_ref())).chain(
        recipe
            .variant
            .iter()
            .enumerate()
            .map(|(i, v)| (format!("variant[{i}].recovery"), v.recovery.as_ref())),
    );
    for (path, value) in recoveries {
        if let Some(e) = value.and_then(|v| crate::probe::policy::duration(v).err()) {
            return Err(fail(&path, e));
        }
    }
    let mut names = std::collections::BTreeSet::new();
    for (i, v) in recipe.variant.iter().enumerate() {
        if v.name.is_empty()
            || !v
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            return Err(fail(
                &format!("variant[{i}].name"),
                format!("{:?}: letters, digits and '-' only", v.name),
            ));
        }
        if !names.insert(v.name.as_str()) {
            return Err(fail(
                &format!("variant[{i}].name"),
                format!("{:?} twice", v.name),
            ));
        }
    }
    for (i, k) in recipe.known.iter().enumerate() {
        let known_checks = checks();
        if !known_checks.contains(&k.check.as_str()) {
            return Err(fail(
                &format!("known[{i}].check"),
                format!("{:?}: expected one of {}", k.check, known_checks.join(", ")),
            ));
        }
        let cited = [k.kind.is_some(), k.title.is_some(), k.matches.is_some()];
        let explained = [k.by_design.is_some(), k.note.is_some()];
        if k.issue.is_some() != cited.iter().all(|&c| c)
            || cited.iter().any(|&c| c) != k.issue.is_some()
            || (k.issue.is_some() && k.by_design.is_some())
            || (k.issue.is_none() && explained.iter().filter(|&&e| e).count() != 1)
        {
            return Err(fail(
                &format!("known[{i}]"),
                "give an upstream `issue` with its `kind`, `title` and the sentence it `matches` \
                 (and a `note`, if need be); or `by_design`; or a `note` saying what causes it"
                    .into(),
            ));
        }
        let empty = [
            ("issue", &k.issue),
            ("title", &k.title),
            ("matches", &k.matches),
            ("note", &k.note),
            ("by_design", &k.by_design),
        ]
        .into_iter()
        .find(|(_, v)| v.as_ref().is_some_and(|v| v.trim().is_empty()));
        if let Some((field, _)) = empty {
            return Err(fail(&format!("known[{i}].{field}"), "empty".into()));
        }
        if let Some(issue) = &k.issue
            && !upstream_item(issue)
        {
            return Err(fail(
                &format!("known[{i}].issue"),
                format!("{issue:?}: expected owner/repo#N"),
            ));
        }
        if k.cause.is_none() && k.by_design.is_none() {
            return Err(fail(
                &format!("known[{i}].cause"),
                "name what causes it: logic, client-config, design, server or glue".into(),
            ));
        }
        if k.by_design.is_some() && k.cause.is_some_and(|c| c != Cause::Design) {
            return Err(fail(
                &format!("known[{i}].cause"),
                "`by_design` is a documented design: its cause is `design`".into(),
            ));
        }
        if let Some(v) = k.variants.iter().find(|v| !names.contains(v.as_str())) {
            return Err(fail(
                &format!("known[{i}].variants"),
                format!("no variant named {v:?}"),
            ));
        }
    }
    for (i, searched) in recipe.searched.iter().enumerate() {
        if searched.tracker.trim().is_empty() || searched.query.trim().is_empty() {
            return Err(fail(
                &format!("searched[{i}]"),
                "give the `tracker` searched and the `query`".into(),
            ));
        }
        if !iso_date(&searched.on) {
            return Err(fail(
                &format!("searched[{i}].on"),
                format!("{:?}: expected the date as YYYY-MM-DD", searched.on),
            ));
        }
    }
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(Loaded {
        name,
        dir: dir.to_owned(),
        recipe,
    })
}

/// A setting given under `[probe]` (`key`, its value) and, where one differs, per variant
/// (`field`): the first value `check` refuses, as its path and why.
/// Whether `s` names an upstream item as `owner/repo#N`.
fn upstream_item(s: &str) -> bool {
    let Some((repo, number)) = s.split_once('#') else {
        return false;
    };
    let Some((owner, name)) = repo.split_once('/') else {
        return false;
    };
    let part = |p: &str| {
        !p.is_empty()
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    part(owner) && part(name) && !number.is_empty() && number.chars().all(|c| c.is_ascii_digit())
}

/// Whether `s` is a date written `YYYY-MM-DD`.
fn iso_date(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    let number = |p: &str, len: usize, most: u32| {
        p.len() == len
            && p.chars().all(|c| c.is_ascii_digit())
            && p.parse::<u32>().is_ok_and(|n| (1..=most).contains(&n))
    };
    matches!(parts.as_slice(), [y, m, d] if number(y, 4, 9999) && number(m, 2, 12) && number(d, 2, 31))
}

fn first_refused(
    recipe: &Recipe,
    (key, top): (&str, &String),
    field: impl Fn(&Variant) -> Option<&String>,
    check: impl Fn(&str) -> Option<String>,
) -> Option<(String, String)> {
    std::iter::once(("probe".to_owned(), Some(top)))
        .chain(
            recipe
                .variant
                .iter()
                .enumerate()
                .map(|(i, v)| (format!("variant[{i}]"), field(v))),
        )
        .find_map(|(at, value)| {
            value
                .and_then(|v| check(v))
                .map(|e| (format!("{at}.{key}"), e))
        })
}

/// Where `path` (`probe.policy`, `variant[1].count`, `variant`) is written in a recipe's
/// text: the line of its key under its table (the N-th `[[variant]]` for `variant[N]`), at
/// the key's first character; the table's own line when the key is not written there (a
/// value it takes by default), and the file's start when neither is.
fn place(text: &str, path: &str) -> (usize, usize) {
    let (table, key) = path.rsplit_once('.').unwrap_or(("", path));
    let lines: Vec<&str> = text.lines().collect();
    let header = |l: &str| l.trim_start().starts_with('[');
    let start = match table.split_once('[') {
        Some((name, n)) => {
            let n: usize = n.trim_end_matches(']').parse().unwrap_or(0);
            let head = format!("[[{name}]]");
            lines
                .iter()
                .enumerate()
                .filter(|(_, l)| l.trim() == head)
                .nth(n)
                .map(|(i, _)| i + 1)
        }
        None if table.is_empty() => Some(0),
        None => lines
            .iter()
            .position(|l| l.trim() == format!("[{table}]"))
            .map(|i| i + 1),
    };
    let Some(start) = start else {
        return (1, 1);
    };
    let found = lines[start..]
        .iter()
        .take_while(|l| table.is_empty() || !header(l))
        .position(|l| {
            let t = l.trim_start();
            t.strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        });
    match found {
        Some(i) => {
            let l = lines[start + i];
            (start + i + 1, l.len() - l.trim_start().len() + 1)
        }
        None => (start.max(1), 1),
    }
}

/// Every recipe under `root` (`audits/`), by name.
pub fn all(root: &Path) -> Result<Vec<Loaded>, String> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .map_err(|e| format!("{}: {e}", root.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("recipe.toml").is_file())
        .collect();
    dirs.sort();
    dirs.iter().map(|d| load(d)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
description = "d"
upstream = "u"
store = "none"
failure_mode = "fail-closed"

[instance]
command = ["true"]
count = 1

[probe]
url = "http://127.0.0.1:{port}/"
policy = "first-hit:10,1s"

[[variant]]
name = "a"
description = "a"

[[variant]]
name = "b"
description = "b"
POLICY
"#;

    /// Loads `text` as a recipe in a directory of its own.
    fn loaded(test: &str, text: &str) -> Result<Loaded, String> {
        let dir =
            std::env::temp_dir().join(format!("ratelab-recipe-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("recipe.toml"), text).unwrap();
        let r = load(&dir);
        std::fs::remove_dir_all(&dir).ok();
        r
    }

    /// Asserts that loading `text` fails at the line holding `needle`, at `path`.
    fn refused_at(test: &str, text: &str, needle: &str, path: &str) {
        let at = 1 + text.lines().position(|l| l.contains(needle)).unwrap();
        let e = loaded(test, text).unwrap_err();
        assert!(
            e.contains(&format!("recipe.toml:{at}:1: at {path}")),
            "{test}: {e}"
        );
    }

    #[test]
    fn a_bad_recipe_names_its_file_and_the_path_of_what_is_wrong() {
        let ok = loaded("ok", &GOOD.replace("POLICY", "clock_resolution = \"1s\""));
        assert_eq!(
            ok.unwrap().recipe.variant[1].clock_resolution.as_deref(),
            Some("1s")
        );
        let bare = GOOD.replace("POLICY", "");
        for (test, text, needle, path) in [
            (
                "policy",
                GOOD.replace("POLICY", "policy = \"first-hit:10\""),
                "first-hit:10\"",
                "variant[1].policy",
            ),
            (
                "clock",
                GOOD.replace("POLICY", "clock_resolution = \"soon\""),
                "soon",
                "variant[1].clock_resolution",
            ),
            (
                "count",
                GOOD.replace("POLICY", "count = 40"),
                "count = 40",
                "variant[1].count",
            ),
            (
                "start",
                bare.replace(
                    "count = 1\n",
                    "count = 1\nstart_timeout_s = 18446744073709551615\n",
                ),
                "start_timeout_s =",
                "instance.start_timeout_s",
            ),
            (
                "probe",
                bare.replace("policy = \"first-hit:10,1s\"", "policy = \"gcra:1,2\""),
                "gcra",
                "probe.policy",
            ),
            (
                "known",
                format!("{bare}\n[[known]]\ncheck = \"speed\"\nby_design = \"x\"\n"),
                "speed",
                "known[0].check",
            ),
        ] {
            refused_at(test, &text, needle, path);
        }
        let text = format!("{bare}\n[[known]]\ncheck = \"fields\"\nissue = \"o/r#1\"\n");
        assert!(
            loaded("title", &text)
                .unwrap_err()
                .contains("with its `kind`, `title` and the sentence it `matches`")
        );
        // A cited item, its cause named: loads. Without a cause: refused, at its path.
        let cited = "[[known]]\ncheck = \"fields\"\nissue = \"o/r#1\"\nkind = \"pull-request\"\n\
                     title = \"t\"\nmatches = \"m\"\n";
        let with_cause = format!("{bare}\n{cited}cause = \"logic\"\n");
        assert!(loaded("cited", &with_cause).is_ok());
        let e = loaded("uncaused", &format!("{bare}\n{cited}")).unwrap_err();
        assert!(e.contains("known[0].cause"), "{e}");
        // An item not written owner/repo#N, an empty title: refused, at their paths.
        let bad_item = with_cause.replace("o/r#1", "issue 1");
        assert!(
            loaded("item", &bad_item)
                .unwrap_err()
                .contains("known[0].issue")
        );
        let untitled = with_cause.replace("title = \"t\"", "title = \" \"");
        assert!(
            loaded("untitled", &untitled)
                .unwrap_err()
                .contains("known[0].title")
        );
        // A tracker search needs its date as YYYY-MM-DD.
        let searched = |on: &str| {
            format!(
                "{bare}\n[[searched]]\ntracker = \"https://x/issues\"\nquery = \"q\"\non = \"{on}\"\n"
            )
        };
        assert!(loaded("searched", &searched("2026-12-06")).is_ok());
        assert!(
            loaded("searched-bad", &searched("6 Dec"))
                .unwrap_err()
                .contains("searched[0].on")
        );
        // A note and a design at once: refused.
        let both = format!(
            "{bare}\n[[known]]\ncheck = \"fields\"\ncause = \"server\"\nnote = \"n\"\nby_design = \"d\"\n"
        );
        assert!(loaded("both", &both).is_err());
        let text = GOOD.replace("POLICY", "colour = 1");
        let line = 1 + text.lines().position(|l| l.contains("colour")).unwrap();
        let e = loaded("unknown", &text).unwrap_err();
        assert!(
            e.contains(&format!("recipe.toml:{line}:")) && e.contains("colour"),
            "{e}"
        );
    }
}
