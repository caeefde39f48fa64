//! An audit's results: per target a report card (overshoot against concurrency, phantom
//! denials, field honesty, expiry, boundary, Retry-After) and its findings, as JSON under
//! `docs/results/audits/`, and `docs/AUDITS.md` rendered from every result there.
//!
//! A finding is one check's failures on one target: how many, the first as its witness, the
//! command that reproduces it, and the upstream issue it matches when the recipe lists one
//! ([`Known`](super::recipe::Known)); a finding no listed issue matches is marked as not
//! known upstream.

use super::Audited;
use super::recipe::Known;
use crate::probe::report;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// An upstream item a finding matches.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Upstream {
    /// `owner/repo#N`.
    pub issue: String,
    /// Its title.
    pub title: String,
    /// `issue` or `pull request`.
    #[serde(default)]
    pub kind: String,
    /// The sentence of it that matches the finding.
    #[serde(default)]
    pub matches: String,
}

/// One check's failures on one target.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// The check (`envelope`, `linearizable`, `fields`, `retry-after`, `decisions`).
    pub check: String,
    /// How many failures it reported.
    pub count: usize,
    /// The first, as the report prints it.
    pub witness: String,
    /// The upstream issue it matches, if the recipe lists one.
    pub upstream: Option<Upstream>,
    /// Why the variant fails by design, if the recipe says it does.
    #[serde(default)]
    pub by_design: Option<String>,
    /// What causes it, as the recipe names it (`the limiter's logic`, `its store client's
    /// configuration`, `a documented design or limitation`, `the server it runs in`, `the
    /// audit's glue`); absent when the recipe names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// What causes it, in a line, where no upstream item is cited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The tracker searches behind "not known upstream", for a finding nothing known
    /// matches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub searched: Vec<super::recipe::Searched>,
}

/// One ladder step as the card shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// Concurrent clients.
    pub clients: u32,
    /// Requests sent.
    pub requests: u64,
    /// Admitted.
    pub admitted: u64,
}

/// A target's report card.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Card {
    /// `NAME/VARIANT`.
    pub target: String,
    /// The recipe's description, then the variant's.
    pub description: String,
    /// Where the target comes from.
    pub upstream: String,
    /// Versions installed (`npm:NAME`, `pypi:NAME`, `crate:NAME`, `program:NAME`, `deb:NAME`).
    pub versions: BTreeMap<String, String>,
    /// The store its instances share.
    pub store: String,
    /// Instances.
    pub instances: u32,
    /// The policy it is configured with and held to.
    pub policy: String,
    /// The failure mode it declares.
    pub failure_mode: String,
    /// How far its clock may lag its decisions, as the checkers allowed.
    #[serde(default)]
    pub clock_resolution: String,
    /// `pass`, `fail` or `unknown`.
    pub conclusion: String,
    /// Requests sent, admitted, denied, without a decision.
    pub requests: usize,
    /// Admitted.
    pub admitted: u64,
    /// Denied.
    pub denied: u64,
    /// Without a decision.
    pub failed: u64,
    /// The ladder.
    pub steps: Vec<Step>,
    /// The envelope's largest excess over the claim (0: within it).
    pub max_excess: u64,
    /// Keys checked for linearizability, violations, unknown.
    pub linearizable: Option<(usize, usize, usize)>,
    /// Denials the claim admits from every state (over-denial).
    pub phantom_denials: usize,
    /// Denials of the steady client sending under the claimed rate.
    pub steady_denied: u64,
    /// Requests of the steady phase.
    pub steady_requests: u64,
    /// Requests of the idle burst, and of those denied.
    pub idle_burst: (u64, u64),
    /// Requests of the boundary phase, and of those admitted.
    pub boundary: (u64, u64),
    /// Answers whose fields were checked, and the contradictions found.
    pub fields: (usize, usize),
    /// The field dialects spoken, with the answers in each.
    pub dialects: BTreeMap<String, u64>,
    /// Retry-After honesty: probes judged, admitted after waiting.
    pub retry_after: (usize, usize),
    /// What was skipped or could not be judged, and why.
    pub skipped: Vec<String>,
    /// The store-fault phase, when it ran.
    #[serde(default)]
    pub faults: Option<super::faults::FaultReport>,
    /// The findings.
    pub findings: Vec<Finding>,
    /// The command that reproduces every finding.
    pub command: String,
    /// Wall seconds.
    pub seconds: f64,
}

/// The check a failure line belongs to: its prefix before the first `:`.
fn check_of(line: &str) -> &str {
    line.split_once(':').map_or(line, |(c, _)| c)
}

/// Requests and (admitted, denied) on keys whose name carries `tag` (a phase's keys).
fn phase(a: &Audited, tag: &str) -> (u64, u64, u64) {
    let mut c = (0, 0, 0);
    for o in &a.run.history.observations {
        if o.key.contains(tag) {
            c.0 += 1;
            match o.outcome {
                ratelab_check::probe::Outcome::Allowed => c.1 += 1,
                ratelab_check::probe::Outcome::Denied => c.2 += 1,
                ratelab_check::probe::Outcome::Failed(_) => {}
            }
        }
    }
    c
}

/// The findings: the verdict's and the store-fault phase's failure lines, each matched on
/// its own to the first of the recipe's known upstream issues for this variant that names
/// its check (and whose text it contains, where one is given), then grouped by check and
/// issue: lines of one check that no listed issue explains are a finding of their own, by
/// design or not known upstream, never folded into a known one.
pub fn findings(a: &Audited) -> Vec<Finding> {
    let variant = &a.target.variant().name;
    let known: Vec<&Known> = a
        .target
        .loaded
        .recipe
        .known
        .iter()
        .filter(|k| k.variants.is_empty() || k.variants.contains(variant))
        .collect();
    let faults = a.faults.iter().flat_map(|f| f.failures.iter().cloned());
    let lines = a.run.verdict.failures().into_iter().chain(faults);
    group(
        lines,
        &known,
        a.target.variant().by_design.as_deref(),
        &a.target.loaded.recipe.searched,
    )
}

/// [`findings`] from the failure lines, the known issues that apply, the variant's reason
/// for failing by design and the tracker searches the recipe records.
fn group(
    lines: impl Iterator<Item = String>,
    known: &[&Known],
    by_design: Option<&str>,
    searched: &[super::recipe::Searched],
) -> Vec<Finding> {
    // (check, index of the known issue or none) → lines, in the order reported.
    let mut groups: BTreeMap<(String, Option<usize>), Vec<String>> = BTreeMap::new();
    for line in lines {
        let check = check_of(&line).to_owned();
        groups
            .entry((check, matched(known, &line)))
            .or_default()
            .push(line);
    }
    groups
        .into_iter()
        .map(|((check, matched), lines)| {
            let mut f = Finding {
                check,
                count: lines.len(),
                witness: lines[0].clone(),
                upstream: None,
                by_design: None,
                cause: None,
                note: None,
                searched: Vec::new(),
            };
            explain(&mut f, matched.map(|i| known[i]), by_design, searched);
            f
        })
        .collect()
}

/// The first of `known` that names `line`'s check (and whose text it contains, where one is
/// given).
fn matched(known: &[&Known], line: &str) -> Option<usize> {
    let check = check_of(line);
    known.iter().position(|k| {
        k.check == check
            && k.contains
                .as_ref()
                .is_none_or(|c| line.contains(c.as_str()))
    })
}

/// Writes into `f` what causes it: `k`, the known item it matched, or else the variant's
/// reason for failing by design, or else the searches behind "not known upstream".
fn explain(
    f: &mut Finding,
    k: Option<&Known>,
    by_design: Option<&str>,
    searched: &[super::recipe::Searched],
) {
    f.upstream = k.and_then(|k| {
        Some(Upstream {
            issue: k.issue.clone()?,
            title: k.title.clone()?,
            kind: k.kind.map(|x| x.name().to_owned()).unwrap_or_default(),
            matches: k.matches.clone().unwrap_or_default(),
        })
    });
    // The variant's reason covers what its deployment does to the policy's checks, not how
    // the target behaves when its store fails.
    let deployment = by_design.filter(|_| !super::faults::CHECKS.contains(&f.check.as_str()));
    f.by_design = match k {
        Some(k) => k.by_design.clone(),
        None => deployment.map(str::to_owned),
    };
    f.note = k.and_then(|k| k.note.clone());
    f.cause = match k {
        Some(k) => Some(k.cause().name().to_owned()),
        None => deployment.map(|_| super::recipe::Cause::Design.name().to_owned()),
    };
    f.searched = if k.is_none() && deployment.is_none() {
        searched.to_vec()
    } else {
        Vec::new()
    };
}

/// Names again the causes of every card's findings from the recipes under `recipes` (a
/// card whose recipe is gone is left as it is): a corrected recipe corrects the cards
/// without probing again.
pub fn refresh(cards: &mut [Card], recipes: &Path) -> Result<(), String> {
    for c in cards {
        let Some((name, variant)) = c.target.split_once('/') else {
            continue;
        };
        let dir = recipes.join(name);
        if !dir.join("recipe.toml").exists() {
            continue;
        }
        let loaded = super::recipe::load(&dir)?;
        let Some(v) = loaded.recipe.variant.iter().find(|v| v.name == variant) else {
            continue;
        };
        let known: Vec<&Known> = loaded
            .recipe
            .known
            .iter()
            .filter(|k| k.variants.is_empty() || k.variants.contains(&v.name))
            .collect();
        for f in &mut c.findings {
            let k = matched(&known, &f.witness).map(|i| known[i]);
            explain(f, k, v.by_design.as_deref(), &loaded.recipe.searched);
        }
    }
    Ok(())
}

/// `pass`, `fail` or `unknown`: the probe's conclusion, failed also by a failure of the
/// store-fault phase, and unknown rather than passed where that phase could not judge.
fn conclusion(a: &Audited) -> &'static str {
    let probe = a.run.verdict.conclusion().name();
    match &a.faults {
        Some(f) if !f.failures.is_empty() => "fail",
        Some(f) if !f.inconclusive.is_empty() && probe == "pass" => "unknown",
        _ => probe,
    }
}

/// The report card of `a`.
pub fn card(a: &Audited) -> Card {
    let r = &a.target.loaded.recipe;
    let v = &a.run.verdict;
    let steady = phase(a, "-steady");
    let idle = {
        // The idle burst is the ladder's first keys' last requests: client ids from 40 000.
        let mut c = (0, 0);
        for o in &a.run.history.observations {
            if (40_000..50_000).contains(&o.client) {
                c.0 += 1;
                c.1 += u64::from(o.outcome == ratelab_check::probe::Outcome::Denied);
            }
        }
        c
    };
    let boundary = phase(a, "-boundary");
    Card {
        target: a.target.name(),
        description: format!("{} {}", r.description, a.target.variant().description),
        upstream: r.upstream.clone(),
        versions: a.versions.clone(),
        store: format!("{:?}", a.target.store()).to_lowercase(),
        instances: a.target.instances(),
        policy: a.target.policy().to_owned(),
        failure_mode: a.target.failure_mode().name().to_owned(),
        clock_resolution: a.target.clock_resolution().to_owned(),
        conclusion: conclusion(a).to_owned(),
        requests: v.figure("requests") as usize,
        admitted: v.figure("admitted"),
        denied: v.figure("denied"),
        failed: v.figure("failed"),
        steps: a
            .run
            .steps
            .iter()
            .map(|s| Step {
                clients: s.clients,
                requests: s.requests,
                admitted: s.admitted,
            })
            .collect(),
        max_excess: v.figure("max_excess"),
        linearizable: v
            .linearizable()
            .map(|l| (l.keys, l.violations.len(), l.unknown.len())),
        phantom_denials: v.phantom_denials().len(),
        steady_denied: steady.2,
        steady_requests: steady.0,
        idle_burst: idle,
        boundary: (boundary.0, boundary.1),
        fields: (
            v.figure("fields_checked") as usize,
            v.field_violations().len(),
        ),
        dialects: report::dialects(&a.run)
            .into_iter()
            .map(|(d, n)| (d.to_owned(), n))
            .collect(),
        retry_after: (v.retry_after().probes, v.retry_after().admitted),
        skipped: a
            .run
            .retry_skipped
            .iter()
            .chain(a.faults.iter().flat_map(|f| &f.inconclusive))
            .cloned()
            .collect(),
        faults: a.faults.clone(),
        findings: findings(a),
        command: format!("ratelab audit {}", a.target.name()),
        seconds: (a.run.seconds * 10.0).round() / 10.0,
    }
}

/// The card as a terminal shows it.
pub fn text(c: &Card) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}: {} ({} instances on {}, held to {}): {} requests, {} admitted, {} denied, {} without a decision, {:.1} s",
        c.target,
        c.conclusion.to_uppercase(),
        c.instances,
        c.store,
        c.policy,
        c.requests,
        c.admitted,
        c.denied,
        c.failed,
        c.seconds
    );
    for f in &c.findings {
        let _ = writeln!(
            s,
            "  {} ×{} ({}): {}",
            f.check,
            f.count,
            provenance(f),
            f.witness
        );
    }
    s
}

/// Where a finding comes from: what causes it, and the upstream item it rediscovers, the
/// deployment's design, what the recipe says does it, or the searches that found nothing.
fn provenance(f: &Finding) -> String {
    let cause = f.cause.as_deref().unwrap_or("cause not named");
    match (&f.upstream, &f.by_design, &f.note) {
        (Some(u), _, note) if !u.matches.is_empty() => format!(
            "{cause}; rediscovers {} {} ({}): \"{}\"{}",
            if u.kind.is_empty() { "item" } else { &u.kind },
            u.issue,
            u.title,
            u.matches,
            note.as_ref().map(|n| format!(" ({n})")).unwrap_or_default()
        ),
        (Some(u), ..) => format!("{cause}; rediscovers {}: {}", u.issue, u.title),
        (None, Some(why), _) => format!("{cause}: {why}"),
        (None, None, Some(note)) => format!("{cause}: {note}"),
        (None, None, None) if !f.searched.is_empty() => {
            let searches: Vec<String> = f
                .searched
                .iter()
                .map(|s| format!("{} for \"{}\" on {}", s.tracker, s.query, s.on))
                .collect();
            format!("not known upstream (searched {})", searches.join("; "))
        }
        (None, None, None) => "not known upstream (no tracker search recorded)".to_owned(),
    }
}

/// A finding as the summary table names it: its check and where it comes from, in brief.
fn brief(f: &Finding) -> String {
    match (&f.upstream, &f.by_design, &f.note) {
        (Some(u), ..) => format!("{} ({})", f.check, u.issue),
        (None, Some(_), _) => format!("{} (by design)", f.check),
        (None, None, Some(_)) => format!(
            "{} ({})",
            f.check,
            f.cause.as_deref().unwrap_or("cause not named")
        ),
        (None, None, None) => format!("{} (not known upstream)", f.check),
    }
}

/// The file a card is written to under `dir`.
fn file_of(dir: &Path, target: &str) -> std::path::PathBuf {
    dir.join(format!("{}.json", target.replace('/', "-")))
}

/// Writes `card` to `docs/results/audits/` under `docs`, as its target finishes.
pub fn save(docs: &Path, card: &Card) -> Result<(), String> {
    let dir = docs.join("results").join("audits");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = file_of(&dir, &card.target);
    let text = serde_json::to_string_pretty(card).map_err(|e| e.to_string())? + "\n";
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Renders `docs/AUDITS.md` from every card under `docs/results/audits/` and every
/// campaign under `docs/results/explore/`.
///
/// The causes of each card's findings are named again from the recipes under `recipes`
/// first ([`refresh`]), and the cards written back with them.
pub fn render(docs: &Path, recipes: &Path) -> Result<(), String> {
    let dir = docs.join("results").join("audits");
    let mut all = read_all(&dir)?;
    refresh(&mut all, recipes)?;
    for c in &all {
        save(docs, c)?;
    }
    let explored = super::explore::saved(&docs.join("results").join("explore"))?;
    let md = docs.join("AUDITS.md");
    std::fs::write(&md, markdown(&all, &explored)).map_err(|e| format!("{}: {e}", md.display()))
}

/// Every card under `dir`, in name order.
pub fn read_all(dir: &Path) -> Result<Vec<Card>, String> {
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
            serde_json::from_str(&text)
                .map_err(|e| format!("{}:{}:{}: {e}", p.display(), e.line(), e.column()))
        })
        .collect()
}

/// `docs/AUDITS.md`: the cards, then the exploring audits' campaigns.
pub fn markdown(cards: &[Card], explored: &[super::explore::Explored]) -> String {
    let mut s = String::new();
    s.push_str(
        "# Audits\n\n\
         <!-- Generated by `ratelab audit` from docs/results/audits/*.json; do not edit. -->\n\n\
         Each target below is a rate limiter people deploy, installed from its registry at the \
         version shown, configured as its documentation recommends, started on loopback (several \
         instances on one store where it supports sharing) and probed from outside by \
         `ratelab audit`: a concurrency ladder of real clients, an idle phase past the policy's \
         time to forget a key, a steady client under the claimed rate, bursts straddling the \
         windows' boundaries and Retry-After honesty probes, every answer judged by the probe's \
         checkers against the policy the target is configured with (docs/PROBES.md); then, \
         where the audit started the target's store, the store is frozen, killed and started \
         again empty under paced clients, and the answers are held to the failure mode the \
         target declares; once the store has been back for the recovery the recipe declares, \
         every key must be limited again (its admissions within the policy). Each \
         finding names the command that reproduces it (results differ in detail from run to \
         run: they are real processes on a real machine) and the upstream issue it matches, \
         where one is known. Recipes are in `audits/<name>/`.\n\n",
    );
    s.push_str("| target | policy | instances | store | verdict | findings |\n|---|---|---:|---|---|---|\n");
    for c in cards {
        let findings: Vec<String> = c.findings.iter().map(brief).collect();
        let _ = writeln!(
            s,
            "| [`{}`](#{}) | `{}` | {} | {} | {} | {} |",
            c.target,
            anchor(&c.target),
            c.policy,
            c.instances,
            c.store,
            c.conclusion,
            if findings.is_empty() {
                "none".to_owned()
            } else {
                findings.join(", ")
            }
        );
    }
    for c in cards {
        section(&mut s, c);
    }
    s.push_str(&super::explore::section(explored));
    s.push_str(RECIPES);
    s
}

/// How a target is added, at the end of `docs/AUDITS.md`.
const RECIPES: &str = "
## Adding a target

A target is a directory under `audits/` holding `recipe.toml` and, when the target is a
library, the glue app that serves it (a few dozen lines in the target's own language, its
settings read from the environment). The recipe says:

- `description`, `upstream`: what the target is and where it comes from;
- `[install]`: `npm` packages (`name@version`, installed into the recipe's directory),
  `pip` packages (`name==version`), `cargo` crates (the recipe's directory is then a Cargo
  package, its glue app, built into its own `target/`; the versions of the crates named are
  read from its Cargo.lock), the Debian packages (`apt`) that give the `programs` it runs;
- `store`: `redis`, `memcached` or `none`, started privately on a free loopback port;
- `[instance]`: the `command` that starts one instance, its `env`, how many (`count`), and
  `templates` (configuration files written for each instance); `{port}`, `{store_url}`,
  `{store_host}`, `{store_port}`, `{instance}`, `{dir}` and `{run_dir}` are replaced, and
  `{peer_port}`, `{port_N}` and `{peer_port_N}` (instance N's ports) for peers that sync;
- `[probe]`: the `url` of an instance, the `key_header` that carries the key, the `policy`
  it is configured with (in `ratelab probe --policy`'s grammar), the `deny_status`es, the
  `reset_unit` of `X-RateLimit-Reset`, the `clock_resolution` of its decisions, and
  `epoch_windows = true` where its windows start at multiples of the window in Unix time;
- `failure_mode`: `fail-open`, `fail-closed` or `local-fallback`, as its configuration
  declares; `recovery`: how long after its store is back it may take to limit again, as its
  store client's documentation gives it (a reconnect or retry delay; 1 s if absent);
- `[[known]]`: what a finding of a given check (and containing a given text) is, and its
  `cause` (`logic`, `client-config`, `design`, `server` or `glue`): an upstream `issue` it
  rediscovers, with its `kind` (`issue` or `pull-request`), `title` and the sentence of it
  that `matches`; or the target's documented design (`by_design`, why); or a `note` saying
  what does it; the first that matches a failure line names it; `[[searched]]` records a
  search of the tracker (`tracker`, `query`, `on`) behind \"not known upstream\";
- `[[variant]]`: each a target of its own (`NAME/VARIANT`): its `env`, and where they
  differ, its `policy`, `count`, `store`, `templates`, `clock_resolution`,
  `failure_mode` and `recovery`; `by_design`
  says why a variant fails by design (instances that each count alone).

`ratelab audit NAME` installs, starts, probes and writes the results; `ratelab audit
--render` writes this page again from the results without probing.
";

/// A heading's anchor as GitHub makes it.
fn anchor(target: &str) -> String {
    target
        .chars()
        .filter_map(|ch| match ch {
            'a'..='z' | '0'..='9' | '-' | '_' => Some(ch),
            'A'..='Z' => Some(ch.to_ascii_lowercase()),
            ' ' => Some('-'),
            _ => None,
        })
        .collect()
}

fn section(s: &mut String, c: &Card) {
    let _ = writeln!(s, "\n## {}\n\n{}\n", c.target, c.description);
    let versions: Vec<String> = c.versions.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let _ = writeln!(
        s,
        "Upstream: {}. Installed: {}. {} instance(s) on {}; held to `{}`, its decisions' clock allowed to lag by {}; declared failure mode: {}.\n",
        c.upstream,
        versions.join(", "),
        c.instances,
        c.store,
        c.policy,
        c.clock_resolution,
        c.failure_mode
    );
    let _ = writeln!(s, "| | |\n|---|---|");
    let ladder: Vec<String> = c
        .steps
        .iter()
        .map(|st| format!("{} clients: {}/{}", st.clients, st.admitted, st.requests))
        .collect();
    let _ = writeln!(s, "| verdict | {} |", c.conclusion);
    let _ = writeln!(
        s,
        "| requests | {} ({} admitted, {} denied, {} without a decision) in {:.1} s |",
        c.requests, c.admitted, c.denied, c.failed, c.seconds
    );
    let _ = writeln!(
        s,
        "| overshoot against concurrency (admitted/sent) | {}; largest excess over the claim {} |",
        ladder.join(", "),
        c.max_excess
    );
    let _ = writeln!(
        s,
        "| linearizability | {} |",
        c.linearizable.map_or_else(
            || "not checked".to_owned(),
            |(k, v, u)| format!("{k} keys, {v} violations, {u} unknown")
        )
    );
    let _ = writeln!(
        s,
        "| phantom denials | {} (steady client under the rate: {} of {} denied) |",
        c.phantom_denials, c.steady_denied, c.steady_requests
    );
    let _ = writeln!(
        s,
        "| expiry (burst after idling past the policy's time to forget) | {} of {} denied |",
        c.idle_burst.1, c.idle_burst.0
    );
    let _ = writeln!(
        s,
        "| boundary (four times the rate across two windows) | {} of {} admitted |",
        c.boundary.1, c.boundary.0
    );
    let dialects: Vec<String> = c.dialects.iter().map(|(d, n)| format!("{d} {n}")).collect();
    let _ = writeln!(
        s,
        "| fields | {} answers checked ({}), {} contradictions |",
        c.fields.0,
        if dialects.is_empty() {
            "no rate-limit fields".to_owned()
        } else {
            dialects.join(", ")
        },
        c.fields.1
    );
    let _ = writeln!(
        s,
        "| Retry-After honesty | {} of {} admitted after waiting exactly the time announced |",
        c.retry_after.1, c.retry_after.0
    );
    match &c.faults {
        Some(f) => {
            let _ = writeln!(
                s,
                "| store frozen, killed, restarted (admitted/denied/no decision) | healthy {}/{}/{}; down {}/{}/{}; after recovery {}/{}/{}; sent while down and held until it was back {} (the longest {} ms) |",
                f.healthy.admitted,
                f.healthy.denied,
                f.healthy.failed,
                f.down.admitted,
                f.down.denied,
                f.down.failed,
                f.recovered.admitted,
                f.recovered.denied,
                f.recovered.failed,
                f.held,
                f.held_longest_ms
            );
        }
        None => {
            let _ = writeln!(s, "| store faults | not run (no store the audit starts) |");
        }
    }
    if !c.skipped.is_empty() {
        let _ = writeln!(
            s,
            "| skipped | {} |",
            c.skipped.join("; ").replace('|', "\\|")
        );
    }
    if c.findings.is_empty() {
        let _ = writeln!(s, "\nNo finding: every check held.");
        return;
    }
    let _ = writeln!(s, "\nFindings (reproduce with `{}`):\n", c.command);
    for f in &c.findings {
        let _ = writeln!(
            s,
            "- **{}** ({} failures; {}): `{}`",
            f.check,
            f.count,
            provenance(f),
            f.witness.replace('`', "'")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(check: &str, contains: Option<&str>, issue: &str) -> Known {
        Known {
            check: check.into(),
            contains: contains.map(Into::into),
            cause: Some(crate::audit::recipe::Cause::Logic),
            issue: Some(issue.into()),
            kind: Some(crate::audit::recipe::ItemKind::Issue),
            title: Some(format!("{issue}'s title")),
            matches: Some(format!("{issue}'s sentence")),
            note: None,
            by_design: None,
            variants: Vec::new(),
        }
    }

    #[test]
    fn each_line_is_matched_to_a_known_issue_on_its_own() {
        let lines = [
            "linearizable: key \"a\": request 1: denied at 5; the spec admits it",
            "fields: key \"a\": requests [2]: retry-after 5 where the spec gives 1",
            "linearizable: key \"b\": request 9: admitted at 7; the spec denies it",
            "linearizable: key \"c\": request 12: denied at 9; the spec admits it",
            "failure-mode: declared fail-closed, but 3 requests were held",
            "recovery: 1 of 9 requests got no decision",
        ];
        let phantom = known("linearizable", Some("the spec admits it"), "o/r#1");
        let any_field = known("fields", None, "o/r#2");
        let documented = Known {
            cause: None,
            issue: None,
            kind: None,
            title: None,
            matches: None,
            by_design: Some("it waits for its store".into()),
            ..known("failure-mode", None, "")
        };
        let searched = [crate::audit::recipe::Searched {
            tracker: "https://example.org/issues".into(),
            query: "no decision".into(),
            on: "2026-12-06".into(),
        }];
        let f = group(
            lines.iter().map(|l| (*l).to_owned()),
            &[&phantom, &any_field, &documented],
            Some("two instances"),
            &searched,
        );
        let summary: Vec<(&str, usize, Option<&str>, bool, &str)> = f
            .iter()
            .map(|f| {
                (
                    f.check.as_str(),
                    f.count,
                    f.upstream.as_ref().map(|u| u.issue.as_str()),
                    f.by_design.is_some(),
                    f.witness.as_str(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("failure-mode", 1, None, true, lines[4]),
                ("fields", 1, Some("o/r#2"), false, lines[1]),
                ("linearizable", 1, None, true, lines[2]),
                ("linearizable", 2, Some("o/r#1"), false, lines[0]),
                ("recovery", 1, None, false, lines[5]),
            ]
        );
        // A known design names its own reason; the variant's covers only the policy's
        // checks.
        assert_eq!(f[0].by_design.as_deref(), Some("it waits for its store"));
        assert_eq!(f[2].by_design.as_deref(), Some("two instances"));
        // Each names its cause; what nothing known explains says where it was searched for.
        assert_eq!(
            f[3].cause.as_deref(),
            Some(crate::audit::recipe::Cause::Logic.name())
        );
        assert!(
            provenance(&f[3])
                .contains("rediscovers issue o/r#1 (o/r#1's title): \"o/r#1's sentence\"")
        );
        assert_eq!(
            f[0].cause.as_deref(),
            Some("a documented design or limitation")
        );
        assert_eq!(f[4].cause, None);
        assert_eq!(
            provenance(&f[4]),
            "not known upstream (searched https://example.org/issues for \"no decision\" on 2026-12-06)"
        );
        assert!(f[1].searched.is_empty() && f[2].searched.is_empty());
    }

    #[test]
    fn a_failure_line_belongs_to_its_check() {
        assert_eq!(check_of("fields: key \"k\": requests [3]: x"), "fields");
        assert_eq!(check_of("envelope: key"), "envelope");
        assert_eq!(check_of("odd"), "odd");
        assert_eq!(
            anchor("rate-limiter-flexible/non-atomic"),
            "rate-limiter-flexiblenon-atomic"
        );
    }
}
