//! Each finding's reproducer run outside ratelab (`ratelab audit --explore TARGET --confirm`):
//! each reproducer written again from its finding (the schedule, the failure line), then the
//! target started as its campaign started it, and nothing but `python3 CHECK.py URL …
//! --store-pid PID --restart CMD --redis-port PORT`, `n` times. The script drives the target
//! and applies the faults itself, and judges with its own few lines: exit 1 with its verdict
//! `reproduced` printed counts as reproduced, exit 0 as not this time, anything else (a
//! crash, which exits 1 too but prints no verdict) as a run that did not finish; what it
//! printed is kept.

use super::schedule::FaultKind;
use super::{Bench, Explored, Settings, logs_dir, read_schedule, slug};
use crate::audit::Target;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What a finding's reproducer did when run outside ratelab.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outside {
    /// Runs in which it printed the violation and exited 1.
    pub k: u32,
    /// Runs.
    pub n: u32,
    /// Runs in which it did not finish with 0 or 1 (a crash, or out of time): neither
    /// reproduced nor not.
    pub errors: u32,
    /// What it printed, from its first run that reproduced (its last run if none did).
    pub said: Vec<String>,
}

impl Outside {
    /// `k of n`, and how many runs did not finish if any did not.
    pub fn summary(&self) -> String {
        let mut s = format!("{} of {}", self.k, self.n);
        if self.errors > 0 {
            s.push_str(&format!(", {} did not finish", self.errors));
        }
        s
    }
}

/// The lines of a reproducer's output kept, at most.
const KEPT_LINES: usize = 12;

/// Runs each reproducer of `t`'s campaign saved under `out` `s.repeats` times against a
/// freshly started `t`, and returns the campaign with each finding's [`Outside`] filled in.
/// `progress` is told each finding's outcome.
pub async fn confirm(
    t: &Target,
    s: &Settings,
    out: &Path,
    progress: impl Fn(&str),
) -> Result<Explored, String> {
    let path = out.join(format!("{}.json", slug(&t.name())));
    let text = std::fs::read_to_string(&path).map_err(|e| {
        format!(
            "{}: {e} (run `ratelab audit --explore {}` first)",
            path.display(),
            t.name()
        )
    })?;
    let mut e: Explored =
        serde_json::from_str(&text).map_err(|x| format!("{}: {x}", path.display()))?;
    let dir = out.join(slug(&t.name()));
    let n = s.repeats.max(1);
    for f in e.findings.iter_mut() {
        let script = dir.join(format!("{}.py", f.check));
        let schedule = read_schedule(&dir.join(format!("{}.json", f.check)))?;
        let restarts = schedule.faults.iter().any(|x| x.kind == FaultKind::Restart);
        let mut outside = Outside {
            n,
            ..Outside::default()
        };
        let mut bench: Option<Bench> = None;
        let (mut first, mut last) = (None, Vec::new());
        for run in 0..n {
            if bench.is_none() {
                bench = Some(
                    Bench::start(t, s, &logs_dir(&t.name()))
                        .await?
                        .map_err(|why| format!("{}: could not run: {why}", t.name()))?,
                );
            }
            let b = bench.as_mut().expect("started above");
            if run == 0 {
                // Written again by today's generator, from the finding's own line.
                super::write_script(b, t, &schedule, &f.line, &f.replay, &script)?;
            }
            let pidfile = std::env::temp_dir()
                .join(format!("ratelab-confirm-{}-{run}.pid", std::process::id()));
            let args = arguments(b, &pidfile);
            // Its schedule, the wait for a window's start, and each request's own time limit.
            let limit = Duration::from_micros(schedule.end_us())
                + Duration::from_micros(schedule.align_us)
                + Duration::from_secs(30);
            let (status, reproduced, said) = run_script(script.clone(), args, limit).await?;
            // A store the script started again is its own: stopped here, and the target
            // started afresh for the next run.
            if let Ok(pid) = std::fs::read_to_string(&pidfile) {
                std::fs::remove_file(&pidfile).ok();
                // Only the store it started: the pid may have gone to another process since.
                let store = b
                    .started
                    .running
                    .store
                    .as_ref()
                    .map(|s| s.command()[0].clone());
                if let (Ok(pid), Some(store)) = (pid.trim().parse::<u32>(), store)
                    && std::fs::read(format!("/proc/{pid}/cmdline"))
                        .is_ok_and(|c| c.starts_with(store.as_bytes()))
                {
                    ratelab_procs::redis::signal(pid, "KILL").ok();
                }
            }
            if restarts {
                bench = None;
            }
            // Exit 1 with its verdict printed; a crash exits 1 too, and prints none.
            match (status, reproduced) {
                (Some(1), true) => outside.k += 1,
                (Some(0), false) => {}
                _ => outside.errors += 1,
            }
            if reproduced && first.is_none() {
                first = Some(said);
            } else {
                last = said;
            }
        }
        outside.said = first.unwrap_or(last);
        progress(&format!(
            "{}: reproduced outside ratelab in {}",
            f.check,
            outside.summary()
        ));
        f.outside = Some(outside);
    }
    Ok(e)
}

/// The reproducer's arguments against `b`: its instances' URLs, its store's pid, the command
/// that starts the store again (recording the new one's pid in `pidfile`, its output away
/// from the script's, which would otherwise stay open while it runs), its Redis port.
fn arguments(b: &Bench, pidfile: &Path) -> Vec<String> {
    let mut args: Vec<String> = b.target.urls().to_vec();
    if let Some(store) = &b.started.running.store {
        if let Some(pid) = store.pid() {
            args.extend(["--store-pid".to_owned(), pid.to_string()]);
        }
        let quoted: Vec<String> = store
            .command()
            .iter()
            .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
            .collect();
        args.extend([
            "--restart".to_owned(),
            format!(
                "sh -c \"echo $$ > {}; exec {} </dev/null >/dev/null 2>&1\"",
                pidfile.display(),
                quoted.join(" ")
            ),
        ]);
        if matches!(store, crate::audit::instances::Store::Redis(_)) {
            args.extend(["--redis-port".to_owned(), store.port().to_string()]);
        }
    }
    args
}

/// Runs `python3 script args…` for at most `limit`: its exit status (`None` if a signal
/// ended it or it ran out of time, killed then), whether it printed its verdict
/// `reproduced`, and the lines it printed (stderr's after stdout's), at most [`KEPT_LINES`].
/// Its output goes to files, which a process it starts cannot hold open the way it would a
/// pipe.
async fn run_script(
    script: PathBuf,
    args: Vec<String>,
    limit: Duration,
) -> Result<(Option<i32>, bool, Vec<String>), String> {
    let shown = script.display().to_string();
    let files = |what: &str| {
        std::env::temp_dir().join(format!("ratelab-confirm-{}-{what}.txt", std::process::id()))
    };
    let (out, err) = (files("stdout"), files("stderr"));
    let (o, e) = (out.clone(), err.clone());
    let ran = tokio::task::spawn_blocking(move || -> std::io::Result<Option<i32>> {
        let mut child = Command::new("python3")
            .arg(&script)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&o)?)
            .stderr(std::fs::File::create(&e)?)
            .spawn()?;
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(status.code());
            }
            if Instant::now() > deadline {
                child.kill().ok();
                child.wait()?;
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
    .map_err(|e| format!("{shown}: {e}"))?
    .map_err(|e| format!("python3 {shown}: {e}"))?;
    let read = |p: &Path| {
        let text = std::fs::read_to_string(p).unwrap_or_default();
        std::fs::remove_file(p).ok();
        text
    };
    let (out, err) = (read(&out), read(&err));
    let reproduced = out.lines().any(|l| l == "reproduced");
    let said = out
        .lines()
        .chain(err.lines())
        .filter(|l| !l.trim().is_empty())
        .take(KEPT_LINES)
        .map(str::to_owned)
        .collect();
    Ok((ran, reproduced, said))
}
