//! `ratelab audit`: the rate limiters people deploy, from the recipes under `audits/`.

use ratelab_probe::audit::{self, Settings, card, explore};
use ratelab_probe::commands::{EXIT_BAD_INPUT, EXIT_FAILED};
use std::path::PathBuf;
use std::process::ExitCode;

/// `ratelab audit`.
#[derive(clap::Args, Debug)]
pub struct AuditArgs {
    /// Targets: NAME for each of a recipe's variants, NAME/VARIANT for one (default: every
    /// target).
    targets: Vec<String>,
    /// Where the recipes are.
    #[arg(long, default_value = "audits")]
    recipes: PathBuf,
    /// Where results go: DOCS/results/audits/*.json and DOCS/AUDITS.md.
    #[arg(long, default_value = "docs")]
    docs: PathBuf,
    /// Do not install missing packages: say what to install instead.
    #[arg(long)]
    no_install: bool,
    /// The short audit the tests run (a smaller ladder, a shorter steady phase).
    #[arg(long)]
    bounded: bool,
    /// The linearizability search's budget per key (states, 1 to 10^8): past it a key is
    /// unknown.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    budget: Option<u64>,
    /// Print the targets and exit.
    #[arg(long)]
    list: bool,
    /// Write DOCS/AUDITS.md again from the results in DOCS/results/audits, probing nothing.
    #[arg(long, conflicts_with_all = ["install_only", "list"])]
    render: bool,
    /// Install what the targets need, print the versions installed, and exit.
    #[arg(long, conflicts_with = "no_install")]
    install_only: bool,
    /// Explore each target instead: seeded schedules (keys, pacing, bursts, idle gaps,
    /// instances, store faults), every answer judged, each finding repeated, shrunk and
    /// written out with a standalone reproducer (DOCS/results/explore/).
    #[arg(long, conflicts_with_all = ["render", "install_only", "list"])]
    explore: bool,
    /// Exploring: the first seed.
    #[arg(long, default_value_t = 1, requires = "explore")]
    first_seed: u64,
    /// Exploring: seeds per target, at most (1 to 100000).
    #[arg(long, requires = "explore", value_parser = clap::value_parser!(u64).range(1..=100_000))]
    seeds: Option<u64>,
    /// Exploring: runs of a failing schedule (n of "k of n", 1 to 20).
    #[arg(long, requires = "explore", value_parser = clap::value_parser!(u32).range(1..=20))]
    repeats: Option<u32>,
    /// Exploring: seconds per target after which no seed starts (1 to 86400).
    #[arg(long, requires = "explore", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    seconds: Option<u64>,
    /// Exploring: seconds a finding's shrinking may take (0: not shrunk; at most 3600).
    #[arg(long, requires = "explore", value_parser = clap::value_parser!(u64).range(0..=3_600))]
    shrink_seconds: Option<u64>,
    /// Exploring: run the schedule in FILE (a finding's, as the campaign wrote it) REPEATS
    /// times against the one target named, and say which checks failed in how many runs.
    #[arg(long, requires = "explore")]
    replay: Option<PathBuf>,
    /// Exploring: run each finding's standalone reproducer (DOCS/results/explore/) REPEATS
    /// times against the target started afresh, outside ratelab, and record how often it
    /// reproduced.
    #[arg(long, requires = "explore", conflicts_with = "replay")]
    confirm: bool,
}

/// Runs `ratelab audit`: exit 0 when every target ran (findings are its results, not
/// failures), 1 if a target could not be installed or started, 2 on bad input.
pub fn audit_command(a: AuditArgs) -> ExitCode {
    if a.render {
        return match card::render(&a.docs, &a.recipes) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(EXIT_FAILED)
            }
        };
    }
    let targets = match audit::select(&a.recipes, &a.targets) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    if a.list {
        for t in &targets {
            println!("{}\t{}", t.name(), t.variant().description);
        }
        return ExitCode::SUCCESS;
    }
    if a.install_only {
        let mut seen = std::collections::BTreeSet::new();
        for t in targets
            .iter()
            .filter(|t| seen.insert(t.loaded.name.clone()))
        {
            match audit::install::ensure(&t.loaded, true) {
                Ok(versions) => {
                    for (k, v) in versions {
                        println!("{}\t{k}\t{v}", t.loaded.name);
                    }
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(EXIT_FAILED);
                }
            }
        }
        return ExitCode::SUCCESS;
    }
    if a.explore {
        return explore_command(&a, &targets);
    }
    let mut s = if a.bounded {
        Settings::bounded()
    } else {
        Settings::full()
    };
    s.install = !a.no_install;
    if let Some(b) = a.budget {
        s.budget = b;
    }
    let rt = runtime();
    let (mut cards, mut broken) = (0usize, Vec::new());
    for (i, t) in targets.iter().enumerate() {
        eprintln!("[{}/{}] {}", i + 1, targets.len(), t.name());
        let bar = indicatif::ProgressBar::new(1);
        bar.set_style(
            indicatif::ProgressStyle::with_template("  ladder {bar:30} {pos}/{len} requests")
                .expect("a valid template"),
        );
        let shown = bar.clone();
        let result = rt.block_on(audit::audit(t, &s, move |done, total| {
            shown.set_length(total);
            shown.set_position(done);
        }));
        bar.finish_and_clear();
        // Each result is written as it comes, so a later target that cannot run loses none.
        // A target that could not run keeps its earlier result, if any, and the run fails.
        match result {
            Ok(done) => {
                let c = card::card(&done);
                print!("{}", card::text(&c));
                cards += 1;
                if let Err(e) = card::save(&a.docs, &c) {
                    eprintln!("error: {e}");
                    return ExitCode::from(EXIT_FAILED);
                }
            }
            Err(e) => {
                eprintln!(
                    "{}: could not be audited (an earlier result for it, if any, is left as it was): {e}",
                    t.name()
                );
                broken.push(t.name());
            }
        }
    }
    if let Err(e) = card::render(&a.docs, &a.recipes) {
        eprintln!("error: {e}");
        return ExitCode::from(EXIT_FAILED);
    }
    eprintln!(
        "wrote {} results to {} and {}",
        cards,
        a.docs.join("results/audits").display(),
        a.docs.join("AUDITS.md").display()
    );
    if broken.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("not audited: {}", broken.join(", "));
        ExitCode::from(EXIT_FAILED)
    }
}

/// `ratelab audit --explore`: exit 0 when every campaign ran (findings are results), 1 if a
/// target could not run, 2 on bad input; with `--replay`, exit 1 when a check failed.
fn explore_command(a: &AuditArgs, targets: &[audit::Target]) -> ExitCode {
    let mut s = if a.bounded {
        explore::Settings::bounded()
    } else {
        explore::Settings::full()
    };
    s.install = !a.no_install;
    s.first = a.first_seed;
    s.seeds = a.seeds.unwrap_or(s.seeds);
    s.repeats = a.repeats.unwrap_or(s.repeats);
    s.time = a.seconds.map_or(s.time, std::time::Duration::from_secs);
    s.shrink = a
        .shrink_seconds
        .map_or(s.shrink, std::time::Duration::from_secs);
    if let Some(b) = a.budget {
        s.budget = b;
    }
    let rt = runtime();
    if let Some(file) = &a.replay {
        let [t] = targets else {
            eprintln!(
                "error: --replay runs one schedule against one target; {} selected",
                targets.len()
            );
            return ExitCode::from(EXIT_BAD_INPUT);
        };
        let schedule = match explore::read_schedule(file) {
            Ok(schedule) => schedule,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(EXIT_BAD_INPUT);
            }
        };
        return match rt.block_on(explore::replay(t, &s, file, &schedule)) {
            Ok((failed, n)) if failed.is_empty() => {
                println!("{}: every check held in {n} of {n} runs", t.name());
                ExitCode::SUCCESS
            }
            Ok((failed, n)) => {
                for (check, k) in failed {
                    println!("{}: {check} failed in {k} of {n} runs", t.name());
                }
                ExitCode::from(EXIT_FAILED)
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(EXIT_FAILED)
            }
        };
    }
    let out = a.docs.join("results/explore");
    let mut broken = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        let doing = if a.confirm { "confirming" } else { "exploring" };
        eprintln!("[{}/{}] {} ({doing})", i + 1, targets.len(), t.name());
        let progress = |line: &str| eprintln!("  {line}");
        let done = if a.confirm {
            rt.block_on(explore::confirm::confirm(t, &s, &out, progress))
        } else {
            rt.block_on(explore::explore(t, &s, &out, progress))
        };
        match done {
            Ok(e) => {
                print!("{}", explore::text(&e));
                if let Err(why) = explore::save(&out, &e) {
                    eprintln!("error: {why}");
                    return ExitCode::from(EXIT_FAILED);
                }
                if e.could_not_run.is_some() {
                    broken.push(t.name());
                }
            }
            Err(e) => {
                eprintln!("{}: could not be explored: {e}", t.name());
                broken.push(t.name());
            }
        }
    }
    if let Err(e) = card::render(&a.docs, &a.recipes) {
        eprintln!("error: {e}");
        return ExitCode::from(EXIT_FAILED);
    }
    if broken.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("could not run: {}", broken.join(", "));
        ExitCode::from(EXIT_FAILED)
    }
}

/// The runtime the audits run on (several threads: a store's restart blocks one). An
/// interrupt (SIGINT, SIGTERM) stops every process the audit started before it exits: the
/// targets' own stops would not run.
fn runtime() -> tokio::runtime::Runtime {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime starts");
    rt.spawn(async {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            return;
        };
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        eprintln!("interrupted: stopping every process the audit started");
        audit::instances::stop_everything();
        std::process::exit(130);
    });
    rt
}
