//! Whether someone is in the middle of writing the limits file, from the kernel's own
//! notices (Linux inotify on the file's directory): a write (`IN_MODIFY`) or a creation opens
//! a write, closing the file after writing (`IN_CLOSE_WRITE`), or a file renamed into its
//! place (`IN_MOVED_TO`, how editors and `mv` replace a file whole), or its deletion, closes
//! it. A file written in place is applied when its writer closes it, however long the writer
//! paused in between; no time is waited for.
//!
//! Where inotify cannot be had (another kernel, or the user's watch limit reached), or the
//! file is reached through a symlink swapped in another directory (a Kubernetes ConfigMap),
//! the reloader falls back to its settling rule ([`crate::reload`]).

use inotify::{EventMask, Inotify, WatchMask};
use std::ffi::OsString;
use std::path::Path;

/// The notices about one file.
pub struct Writers {
    inotify: Inotify,
    name: OsString,
    /// A write was seen and its writer has not closed the file since.
    open_write: bool,
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
            | WatchMask::CREATE
            | WatchMask::MOVED_TO
            | WatchMask::DELETE;
        inotify.watches().add(&dir, mask).ok()?;
        Some(Writers {
            inotify,
            name,
            open_write: false,
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
                if e.mask.contains(EventMask::Q_OVERFLOW) {
                    // Notices were lost: a write may be open; the next close tells.
                    self.open_write = true;
                    any = true;
                    continue;
                }
                if e.name != Some(self.name.as_os_str()) {
                    continue;
                }
                any = true;
                if e.mask.intersects(EventMask::MODIFY | EventMask::CREATE) {
                    self.open_write = true;
                }
                if e.mask
                    .intersects(EventMask::CLOSE_WRITE | EventMask::MOVED_TO | EventMask::DELETE)
                {
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
}
