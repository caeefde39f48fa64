//! Hot reload of the limits file: on a change (polled, and applied only once it has settled)
//! and at once on SIGHUP. A change settles when its writer is done with it: on Linux, when the
//! kernel's notices told of it and no write to the file is open — whoever wrote it has closed
//! it, or it was renamed into place ([`crate::writers`]) — and no write came while it was
//! read, however long a writer paused in the middle. A change no notice told of (or where
//! the notices cannot be had, or the path is a symlink, whose target's writes land in another
//! directory) settles when it reads the same at consecutive polls at least [`SETTLE`] apart,
//! so a file truncated then written is not judged half-written.
//!
//! The file is read whole and validated first; only a file that validates, and whose limits'
//! stores could be opened, replaces the running set, in one swap ([`Gateway::replace_limits`]):
//! a request decides against the set it started with, so requests in flight are unaffected.
//! A bad edit is refused, logged on stderr with its location, counted in
//! `ratelab_limits_reloads_total{result="rejected"}`, and the old limits keep running; each
//! distinct bad content is reported once (until an edit applies), not at every poll.
//!
//! The file is polled (inotify only tells whether a write is open): a poll sees every way a
//! file is replaced (an editor's rename, a Kubernetes ConfigMap's symlink swap, a copy over
//! it) and costs one small read per interval.

use crate::limit_set::file_set;
use crate::limits;
use crate::rls::config::Domains;
use crate::stores::Stores;
use ratelab_gateway::http::TokioEnv;
use ratelab_gateway::{Gateway, GatewayConfig};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a changed file must read the same before it is applied: longer than a writer's
/// pause between truncating a file and writing it. At the default poll interval (1 s) two
/// polls in a row are already this far apart.
pub const SETTLE: Duration = Duration::from_millis(500);

/// How many distinct rejected contents are remembered (so each is reported once).
const REMEMBERED_REJECTIONS: usize = 64;

/// A content's fingerprint, to remember rejected contents by.
fn digest(seen: &Seen) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut h = siphasher::sip::SipHasher13::new();
    match seen {
        Seen::Bytes(b) => (0u8, b).hash(&mut h),
        Seen::Unreadable(e) => (1u8, e).hash(&mut h),
    }
    h.finish()
}

/// What the last look at the file found.
#[derive(PartialEq, Eq)]
enum Seen {
    Bytes(Vec<u8>),
    Unreadable(String),
}

/// The most bytes a limits file may have: a longer one is refused unread past the bound.
const MAX_FILE_BYTES: u64 = 4 << 20;

/// Reads the limits file, refusing without reading anything that is not a regular file (a
/// FIFO would block the read until a writer came; a device would never end) or that is
/// longer than [`MAX_FILE_BYTES`]. Called off the runtime's workers.
fn read(path: &std::path::Path) -> Seen {
    use std::io::Read as _;
    let unreadable = |e: String| Seen::Unreadable(e);
    match std::fs::metadata(path) {
        Err(e) => return unreadable(e.to_string()),
        Ok(m) if !m.is_file() => {
            return unreadable("not a regular file: expected a file (or a symlink to one)".into());
        }
        Ok(_) => {}
    }
    // Opened without blocking, then checked again: a regular file swapped for a FIFO between
    // the two looks is refused here rather than waited on.
    let file = {
        use std::os::unix::fs::OpenOptionsExt as _;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
    };
    let file = match file {
        Ok(f) => f,
        Err(e) => return unreadable(e.to_string()),
    };
    match file.metadata() {
        Ok(m) if m.is_file() => {}
        Ok(_) => return unreadable("not a regular file: expected a file".into()),
        Err(e) => return unreadable(e.to_string()),
    }
    let mut bytes = Vec::new();
    match file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes) {
        Ok(_) if bytes.len() as u64 > MAX_FILE_BYTES => unreadable(format!(
            "longer than {MAX_FILE_BYTES} bytes: expected a limits file"
        )),
        Ok(_) => Seen::Bytes(bytes),
        Err(e) => unreadable(e.to_string()),
    }
}

fn describe() {
    metrics::describe_counter!(
        "ratelab_limits_reloads_total",
        "Reloads of the limits file, by result: applied, or rejected (the old limits kept)."
    );
    metrics::describe_gauge!("ratelab_limits_loaded", "Limits being applied.");
}

/// Starts watching `path`, whose text `loaded` is the one `gateway` runs: every `interval`,
/// and at once on SIGHUP.
pub fn start<S: Stores>(
    gateway: Arc<Gateway<S::Client, TokioEnv>>,
    stores: S,
    path: PathBuf,
    loaded: &str,
    interval: Duration,
    config: GatewayConfig,
    rls: Option<Rls<S>>,
) {
    describe();
    for result in ["applied", "rejected"] {
        metrics::counter!("ratelab_limits_reloads_total", "result" => result).increment(0);
    }
    metrics::gauge!("ratelab_limits_loaded").set(gateway.limits().len() as f64);
    let mut seen = Seen::Bytes(loaded.as_bytes().to_vec());
    // A change not yet settled, and when it was first read.
    let mut pending: Option<(Seen, Instant)> = None;
    let mut rejected: Vec<u64> = Vec::new();
    let symlink = std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink());
    let mut writers = match symlink {
        true => None,
        false => crate::writers::Writers::watch(&path),
    };
    if writers.is_none() && !symlink {
        eprintln!(
            "ratelab-server: cannot watch {} for writers (inotify): a change is applied once it \
             has read the same for {} ms",
            path.display(),
            SETTLE.as_millis()
        );
    }
    // Installed before the server announces itself: SIGHUP's default action ends the process.
    let mut hup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(h) => Some(h),
        Err(e) => {
            eprintln!(
                "ratelab-server: cannot handle SIGHUP ({e}): the limits file reloads on change only, and SIGHUP stops the server"
            );
            None
        }
    };
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            let forced = tokio::select! {
                _ = tick.tick() => false,
                Some(()) = async { match hup.as_mut() { Some(h) => h.recv().await, None => None } } => true,
            };
            if let Some(w) = writers.as_mut() {
                w.drain();
            }
            // Read on the blocking pool: whatever the path now names, the server's workers
            // never wait on it.
            let now = {
                let path = path.clone();
                tokio::task::spawn_blocking(move || read(&path))
                    .await
                    .unwrap_or_else(|e| Seen::Unreadable(format!("the read failed: {e}")))
            };
            // Notices that came while the file was read: it may be half of a write.
            let written_during = writers.as_mut().is_some_and(|w| w.drain());
            if !forced {
                if now == seen {
                    pending = None;
                    // Notices of a write that changed nothing tell of no later change.
                    if let Some(w) = writers.as_mut().filter(|w| !w.writing()) {
                        w.reset();
                    }
                    continue;
                }
                // Where writers are watched, a change is acted on once no write is open and
                // none came during the read; at once when the notices told of it, else once
                // it has settled: read the same at consecutive polls for at least SETTLE.
                let told = match &writers {
                    Some(w) if matches!(now, Seen::Bytes(_)) => {
                        if w.writing() || written_during {
                            continue;
                        }
                        w.told()
                    }
                    _ => false,
                };
                if !told {
                    match &pending {
                        Some((p, since)) if *p == now => {
                            if since.elapsed() < SETTLE {
                                continue;
                            }
                        }
                        _ => {
                            pending = Some((now, Instant::now()));
                            continue;
                        }
                    }
                }
            }
            // Notices that came during the read tell of content it may not have seen.
            if let Some(w) = writers.as_mut().filter(|_| !written_during) {
                w.reset();
            }
            pending = None;
            let fingerprint = digest(&now);
            if !forced && rejected.contains(&fingerprint) {
                // Already reported.
                seen = now;
                continue;
            }
            let outcome = match &now {
                Seen::Bytes(bytes) => {
                    apply(&gateway, &stores, &path, bytes, &config, rls.as_ref()).await
                }
                Seen::Unreadable(e) => Err(format!("{}: cannot read: {e}", path.display())),
            };
            seen = now;
            match outcome {
                Ok(n) => {
                    rejected.clear();
                    metrics::counter!("ratelab_limits_reloads_total", "result" => "applied")
                        .increment(1);
                    metrics::gauge!("ratelab_limits_loaded").set(n as f64);
                    eprintln!(
                        "ratelab-server: limits reloaded from {}: {n} limits",
                        path.display()
                    );
                }
                Err(e) => {
                    if rejected.len() == REMEMBERED_REJECTIONS {
                        rejected.remove(0);
                    }
                    rejected.push(fingerprint);
                    metrics::counter!("ratelab_limits_reloads_total", "result" => "rejected")
                        .increment(1);
                    eprintln!(
                        "ratelab-server: limits file rejected, keeping the {} limits running: {e}",
                        gateway.limits().len()
                    );
                }
            }
        }
    });
}

/// The rate limit service's tables, and the domains of its YAML files (which a reload of the
/// limits file keeps).
pub type Rls<S> = (
    Arc<arc_swap::ArcSwap<crate::rls::Tables<<S as Stores>::Client>>>,
    Domains,
);

/// Validates `bytes` and swaps the new limits in (and the new domains, when the rate limit
/// service runs); the number of limits applied.
async fn apply<S: Stores>(
    gateway: &Gateway<S::Client, TokioEnv>,
    stores: &S,
    path: &std::path::Path,
    bytes: &[u8],
    config: &GatewayConfig,
    rls: Option<&Rls<S>>,
) -> Result<usize, String> {
    let text =
        std::str::from_utf8(bytes).map_err(|e| format!("{}: not UTF-8: {e}", path.display()))?;
    let file = path.display().to_string();
    let (parsed, mut domains) = limits::parse_all(&file, text)?;
    stores.check(&file, text, &parsed, &domains)?;
    let tables = match rls {
        None if !domains.is_empty() => {
            return Err(format!(
                "{file}: [[domain]]s need the rate limit service, which this server does not run (--grpc-listen)"
            ));
        }
        None => None,
        Some((_, yaml)) => {
            domains.merge(yaml.iter().cloned()).map_err(|r| {
                format!(
                    "{file}: domain {:?} is also in an --rls-config file: expected each domain once",
                    r.name
                )
            })?;
            Some(crate::rls::build(stores, &domains, config).await?)
        }
    };
    let set = file_set(stores, &gateway.limits(), parsed, config).await?;
    let n = set.len();
    gateway.replace_limits(set);
    if let (Some((swap, _)), Some(t)) = (rls, tables) {
        gateway.export_zeros_for(&t.limits());
        swap.store(Arc::new(t));
    }
    Ok(n)
}
