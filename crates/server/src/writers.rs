//! Whether someone is in the middle of writing the limits file, from the kernel's own
//! notices (Linux inotify on the file's directory): a write (`IN_MODIFY`) opens a write;
//! closing the file after writing (`IN_CLOSE_WRITE`) or a file renamed into its place
//! (`IN_MOVED_TO`, how editors and `mv` replace a file whole) finishes it and tells of a
//! whole change; the file's deletion or rename away ends it. A change a finished write told
//! of is applied when no write is open, however long the writer paused in between; no time
//! is waited for.
//!
//! A change no notice told of (a file bind-mounted from another mount namespace, NFS, FUSE,
//! a symlink's target in another directory, a watch lost with its directory) or one whose
//! notices overflowed the queue falls back to the reloader's settling rule
//! ([`crate::reload`]), as does a server where inotify cannot be had.

use inotify::{EventMask, Inotify, WatchMask};
use std::ffi::OsString;
use std::path::Path;

/// The notices about one file.
pub struct Writers {
    inotify: Inotify,
    name: OsString,
    /// A write was seen and its writer has not closed the file since.
    open_write: bool,
    /// A finished write to the file (closed, or renamed into place) was told of since the last
    /// [`Writers::reset`].
    noticed: bool,
    /// Notices were lost since the last [`Writers::reset`].
    overflowed: bool,
    buffer: Vec<u8>,
}

impl std::fmt::Debug for Writers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writers")
            .field("name", &self.name)
            .field("open_write", &self.open_write)
            .finish_non_exhaustive()
    }
}

impl Writers {
    /// Watches `path`'s directory for notices about `path`; `None` when inotify cannot be had
    /// (said on stderr by the caller's fallback).
    pub fn watch(path: &Path) -> Option<Writers> {
        let name = path.file_name()?.to_owned();
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
            _ => std::path::PathBuf::from("."),
        };
        let inotify = Inotify::init().ok()?;
        let mask = WatchMask::MODIFY
            | WatchMask::CLOSE_WRITE
            | WatchMask::MOVED_TO
            | WatchMask::MOVED_FROM
            | WatchMask::DELETE;
        inotify.watches().add(&dir, mask).ok()?;
        Some(Writers {
            inotify,
            name,
            open_write: false,
            noticed: false,
            overflowed: false,
            buffer: vec![0; 4096],
        })
    }

    /// Takes the notices that arrived since the last call: whether any concerned the file.
    pub fn drain(&mut self) -> bool {
        let mut any = false;
        loop {
            let events = match self.inotify.read_events(&mut self.buffer) {
                Ok(events) => events,
                // None pending (the descriptor does not block), or the queue overflowed: what
                // was read stands.
                Err(_) => return any,
            };
            let mut read = false;
            for e in events {
                read = true;
                if e.mask
                    .intersects(EventMask::Q_OVERFLOW | EventMask::IGNORED)
                {
                    // Notices were lost, or the watch with its directory: the settling rule
                    // decides until the next reset.
                    self.overflowed = true;
                    self.open_write = false;
                    any = true;
                    continue;
                }
                if e.name != Some(self.name.as_os_str()) {
                    continue;
                }
                any = true;
                if e.mask.contains(EventMask::MODIFY) {
                    self.open_write = true;
                }
                // A finished write tells of a whole change; a file gone (deleted, renamed
                // away) ends the write on it but tells of no content.
                if e.mask
                    .intersects(EventMask::CLOSE_WRITE | EventMask::MOVED_TO)
                {
                    self.open_write = false;
                    self.noticed = true;
                }
                if e.mask.intersects(EventMask::DELETE | EventMask::MOVED_FROM) {
                    self.open_write = false;
                }
            }
            if !read {
                return any;
            }
        }
    }

    /// Whether a write to the file is open: written to and not closed since.
    pub fn writing(&self) -> bool {
        self.open_write
    }

    /// Whether the notices since the last reset tell of a change, none lost: then a change
    /// with no write open is whole.
    pub fn told(&self) -> bool {
        self.noticed && !self.overflowed
    }

    /// Forgets the notices so far (a change was applied or judged).
    pub fn reset(&mut self) {
        self.noticed = false;
        self.overflowed = false;
    }
}

#[cfg(test)]
mod tests {
    use super::Writers;
    use std::io::Write as _;

    #[test]
    fn a_finished_write_tells_of_a_change_and_an_open_one_holds_it() {
        let dir = std::env::temp_dir().join(format!("ratelab-writers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("limits.toml");
        let mut w = Writers::watch(&file).expect("inotify on a temp directory");
        assert!(!w.drain() && !w.told() && !w.writing());
        // Written in place and left open: a write is open, nothing told.
        let mut f = std::fs::File::create(&file).unwrap();
        f.write_all(b"half").unwrap();
        assert!(w.drain());
        assert!(w.writing() && !w.told());
        // Closed: the write finished and told of a whole change.
        drop(f);
        w.drain();
        assert!(!w.writing() && w.told());
        w.reset();
        assert!(!w.told());
        // Renamed into place: told; deleted: no write open, nothing told.
        let tmp = dir.join("limits.toml.new");
        std::fs::write(&tmp, b"whole").unwrap();
        std::fs::rename(&tmp, &file).unwrap();
        w.drain();
        assert!(!w.writing() && w.told());
        w.reset();
        std::fs::remove_file(&file).unwrap();
        w.drain();
        assert!(!w.writing() && !w.told());
        // Another file's notices are not this one's.
        std::fs::write(dir.join("other"), b"x").unwrap();
        assert!(!w.drain());
        std::fs::remove_dir_all(&dir).ok();
    }
}
