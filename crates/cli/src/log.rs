//! `ratelab log scan`: the request log lines in a time range, from one gateway's log or
//! several merged in id order (the scan is `ratelab_gateway::reqlog`'s).

use ratelab_lab::commands::EXIT_BAD_INPUT;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// `ratelab log`'s subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum LogCommand {
    /// Print the request log lines whose id time is in [--from, --to), from one gateway's log
    /// or several merged in id order. Each file is searched by binary search on its ids; only
    /// the lines in the range are parsed.
    Scan {
        /// Request logs, one per gateway.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Start (inclusive): Unix ms or RFC 3339 (2026-01-01T00:00:00.250Z).
        #[arg(long)]
        from: String,
        /// End (exclusive): Unix ms or RFC 3339.
        #[arg(long)]
        to: String,
        /// Only this API key.
        #[arg(long)]
        key: Option<String>,
        /// Only this decision.
        #[arg(long, value_parser = [
            "allowed", "denied", "failed_open", "bypassed", "rejected", "bad_request",
            "unavailable",
        ])]
        decision: Option<String>,
    },
}

/// `ratelab log`.
pub fn log_command(command: LogCommand) -> ExitCode {
    match command {
        LogCommand::Scan {
            files,
            from,
            to,
            key,
            decision,
        } => scan_command(&files, &from, &to, key, decision),
    }
}

/// `ratelab log scan`.
fn scan_command(
    files: &[PathBuf],
    from: &str,
    to: &str,
    key: Option<String>,
    decision: Option<String>,
) -> ExitCode {
    use ratelab_gateway::reqlog::{ScanQuery, parse_time, scan};
    let bad = |msg: String| {
        eprintln!("error: {msg}");
        ExitCode::from(EXIT_BAD_INPUT)
    };
    let (from_ms, to_ms) = match (parse_time(from), parse_time(to)) {
        (Ok(f), Ok(t)) => (f, t),
        (Err(e), _) => return bad(format!("--from {e}")),
        (_, Err(e)) => return bad(format!("--to {e}")),
    };
    if to_ms <= from_ms {
        return bad(format!(
            "--to ({to_ms} ms) must be after --from ({from_ms} ms)"
        ));
    }
    let q = ScanQuery {
        from_ms,
        to_ms,
        key,
        decision,
    };
    let result = match scan(files, &q) {
        Ok(r) => r,
        Err(e) => return bad(e.to_string()),
    };
    let mut out = std::io::stdout().lock();
    for l in &result.lines {
        let _ = writeln!(out, "{}", l.text);
    }
    let mut by_decision = std::collections::BTreeMap::<&str, u64>::new();
    for l in &result.lines {
        let d = l.fields.get("decision").and_then(|v| v.as_str());
        *by_decision.entry(d.unwrap_or("?")).or_default() += 1;
    }
    eprintln!("{} lines matched {by_decision:?}", result.lines.len());
    for f in &result.files {
        eprintln!(
            "  {}: {} bytes, {} ids read by the binary search, {} lines in the range parsed",
            f.file.display(),
            f.bytes,
            f.probes,
            f.in_range
        );
    }
    ExitCode::SUCCESS
}
