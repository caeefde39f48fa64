//! Which of the outside programs ratelab's tests drive are installed, asked twice: by the
//! build script of each package whose tests need one, which marks those tests ignored when
//! the program is missing (they show as `ignored` in cargo's summary, with the reason), and
//! at run time by the test itself (`ratelab_testkit::require`), the second line of defence.
//!
//! A package's `build.rs` is one call, naming what its tests need:
//!
//! ```no_run
//! use ratelab_procs::installed::{NGINX, REDIS, build_script};
//! build_script(&[&REDIS, &NGINX]);
//! ```
//!
//! and each test carries the cfg of the component it needs:
//!
//! ```text
//! #[test]
//! #[cfg_attr(ratelab_missing_redis, ignore = "redis-server is not installed (Debian: apt-get install redis-server)")]
//! fn a_test_on_redis() { /* … */ }
//! ```
//!
//! `cfg(ratelab_missing_NAME)` is set when the program is not found on `PATH` and the
//! component's `RATELAB_REQUIRE_*` variable is not `1`: with the variable set (as `.ci/run`
//! sets them all), the test is never marked ignored, runs, and fails loudly. The script runs
//! again when `PATH` or a `RATELAB_REQUIRE_*` variable changes, and, while something is
//! missing, when a directory of `PATH`, `/usr/sbin` or Python's system packages changes (a
//! program installed since; a Python package installed elsewhere, as with `pip --user`, is
//! seen at the next clean build or change of `PATH`).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// An outside program (or set of them) some tests need.
#[derive(Debug)]
pub struct Component {
    /// The cfg's suffix: the tests that need it carry `cfg_attr(ratelab_missing_NAME, ignore)`.
    pub name: &'static str,
    /// What is looked for, for messages.
    pub what: &'static str,
    /// The variable that, at `1`, makes its absence a failure rather than a skip.
    pub require_var: &'static str,
    /// How to install it.
    pub how: &'static str,
    /// Whether it is installed, given the value of `PATH`.
    found: fn(&OsStr) -> bool,
}

/// `redis-server`, for the tests on a private server.
pub const REDIS: Component = Component {
    name: "redis",
    what: "redis-server",
    require_var: "RATELAB_REQUIRE_REDIS",
    how: "Debian: apt-get install redis-server",
    found: |path| all_on_path(&["redis-server"], path),
};

/// `redis-server` and `redis-cli` (which creates a cluster), for the tests on a private Redis
/// Cluster.
pub const REDIS_CLUSTER: Component = Component {
    name: "redis_cluster",
    what: "redis-server and redis-cli",
    require_var: "RATELAB_REQUIRE_REDIS",
    how: "Debian: apt-get install redis-server",
    found: |path| all_on_path(&["redis-server", "redis-cli"], path),
};

/// nginx, on `PATH` or in `/usr/sbin` (where Debian puts it).
pub const NGINX: Component = Component {
    name: "nginx",
    what: "nginx",
    require_var: "RATELAB_REQUIRE_NGINX",
    how: "Debian: apt-get install nginx-light",
    found: |path| nginx_binary(path).is_some(),
};

/// HAProxy, on `PATH` or in `/usr/sbin`: a second real proxy in front of the server (it
/// appends its own `X-Forwarded-For` line rather than extending the client's).
pub const HAPROXY: Component = Component {
    name: "haproxy",
    what: "haproxy",
    require_var: "RATELAB_REQUIRE_HAPROXY",
    how: "Debian: apt-get install haproxy",
    found: |path| haproxy_binary(path).is_some(),
};

/// A headless Chromium (`chromium`, `chromium-browser` or `google-chrome`).
pub const CHROMIUM: Component = Component {
    name: "chromium",
    what: "chromium",
    require_var: "RATELAB_REQUIRE_CHROMIUM",
    how: "Debian: apt-get install chromium",
    found: |path| {
        ["chromium", "chromium-browser", "google-chrome"]
            .iter()
            .any(|b| on_path(b, path).is_some())
    },
};

/// binutils' `nm`.
pub const NM: Component = Component {
    name: "nm",
    what: "nm (binutils)",
    require_var: "RATELAB_REQUIRE_NM",
    how: "Debian: apt-get install binutils",
    found: |path| on_path("nm", path).is_some(),
};

/// A `python3` (on `PATH`, or `/usr/bin/python3`) that imports `grpc` and `grpc_tools`.
pub const GRPCIO: Component = Component {
    name: "grpcio",
    what: "python3 with grpcio and grpc_tools",
    require_var: "RATELAB_REQUIRE_GRPCIO",
    how: "Debian: apt-get install python3-grpcio python3-grpc-tools",
    found: |path| grpc_python(path).is_some(),
};

/// Every component, for the tests of this module and for a script that wants them all.
pub const ALL: [&Component; 7] = [
    &REDIS,
    &REDIS_CLUSTER,
    &NGINX,
    &HAPROXY,
    &CHROMIUM,
    &NM,
    &GRPCIO,
];

impl Component {
    /// `ratelab_missing_NAME`.
    pub fn cfg(&self) -> String {
        format!("ratelab_missing_{}", self.name)
    }

    /// Whether it is installed, with `path` as the value of `PATH`.
    pub fn installed_on(&self, path: &OsStr) -> bool {
        (self.found)(path)
    }

    /// Whether it is installed, on this process's `PATH`.
    pub fn installed(&self) -> bool {
        self.installed_on(&std::env::var_os("PATH").unwrap_or_default())
    }
}

/// `program` in a directory of `path` (a `PATH` value), as a file.
pub fn on_path(program: &str, path: &OsStr) -> Option<PathBuf> {
    std::env::split_paths(path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

fn all_on_path(programs: &[&str], path: &OsStr) -> bool {
    programs.iter().all(|p| on_path(p, path).is_some())
}

/// `program`, on `path` or in `/usr/sbin` (where Debian puts servers, off a user's `PATH`).
fn on_path_or_sbin(program: &str, path: &OsStr) -> Option<PathBuf> {
    on_path(program, path).or_else(|| {
        let sbin = Path::new("/usr/sbin").join(program);
        sbin.is_file().then_some(sbin)
    })
}

/// The HAProxy binary, on `path` or in `/usr/sbin`.
pub fn haproxy_binary(path: &OsStr) -> Option<PathBuf> {
    on_path_or_sbin("haproxy", path)
}

/// The nginx binary, on `path` or in `/usr/sbin`.
pub fn nginx_binary(path: &OsStr) -> Option<PathBuf> {
    on_path_or_sbin("nginx", path)
}

/// A Python, `python3` on `path` or `/usr/bin/python3`, that imports `grpc` and
/// `grpc_tools`.
pub fn grpc_python(path: &OsStr) -> Option<PathBuf> {
    on_path("python3", path)
        .into_iter()
        .chain([PathBuf::from("/usr/bin/python3")])
        .find(|p| {
            Command::new(p)
                .args(["-c", "import grpc, grpc_tools"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
}

/// What a build script prints for `components`: the cfg each may set, declared; the cfg of
/// each that is not `installed` and whose `RATELAB_REQUIRE_*` variable (`require(var)`) is
/// not `1`; and when to run again (`PATH`, the variables, and, while something is missing,
/// the directories of `path`).
pub fn build_lines(
    components: &[&Component],
    path: &OsStr,
    installed: impl Fn(&Component) -> bool,
    require: impl Fn(&str) -> Option<String>,
) -> Vec<String> {
    let mut lines = vec!["cargo::rerun-if-env-changed=PATH".to_owned()];
    let mut missing = false;
    for c in components {
        lines.push(format!("cargo::rerun-if-env-changed={}", c.require_var));
        lines.push(format!("cargo::rustc-check-cfg=cfg({})", c.cfg()));
        if installed(c) {
            continue;
        }
        missing = true;
        // Required: the test runs, and its runtime check fails it.
        if require(c.require_var).as_deref() != Some("1") {
            lines.push(format!("cargo::rustc-cfg={}", c.cfg()));
        }
    }
    if missing {
        // A program installed since this ran lands in one of these: a directory of `PATH`,
        // `/usr/sbin` (nginx), or Python's system packages (grpcio).
        let fixed = [
            "/usr/sbin",
            "/usr/lib/python3/dist-packages",
            "/usr/local/lib",
        ]
        .map(PathBuf::from);
        for dir in std::env::split_paths(path)
            .chain(fixed)
            .filter(|d| d.is_absolute() && d.is_dir())
        {
            lines.push(format!("cargo::rerun-if-changed={}", dir.display()));
        }
    }
    lines.dedup();
    lines
}

/// The whole build script of a package whose tests need `components`: prints
/// [`build_lines`] for this machine.
pub fn build_script(components: &[&Component]) {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let lines = build_lines(
        components,
        &path,
        |c| c.installed_on(&path),
        |var| std::env::var(var).ok(),
    );
    for line in lines {
        println!("{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(installed: bool, require: Option<&str>) -> Vec<String> {
        build_lines(
            &[&REDIS, &NGINX],
            OsStr::new(""),
            |c| installed || c.name == "nginx",
            |_| require.map(str::to_owned),
        )
    }

    #[test]
    fn a_missing_program_sets_its_cfg_and_only_its_own() {
        let l = lines(false, None);
        assert!(l.contains(&"cargo::rustc-cfg=ratelab_missing_redis".to_owned()));
        assert!(
            !l.iter()
                .any(|l| l == "cargo::rustc-cfg=ratelab_missing_nginx")
        );
        for cfg in ["ratelab_missing_redis", "ratelab_missing_nginx"] {
            assert!(l.contains(&format!("cargo::rustc-check-cfg=cfg({cfg})")));
        }
        assert!(l.contains(&"cargo::rerun-if-env-changed=PATH".to_owned()));
        assert!(l.contains(&"cargo::rerun-if-env-changed=RATELAB_REQUIRE_REDIS".to_owned()));
    }

    #[test]
    fn a_required_program_is_never_marked_ignored() {
        let l = lines(false, Some("1"));
        assert!(
            !l.iter().any(|l| l.starts_with("cargo::rustc-cfg=")),
            "{l:?}"
        );
        // Any other value is not a requirement.
        let l = lines(false, Some("0"));
        assert!(l.contains(&"cargo::rustc-cfg=ratelab_missing_redis".to_owned()));
    }

    #[test]
    fn an_installed_program_sets_no_cfg_and_watches_no_directory() {
        let l = lines(true, None);
        assert!(
            !l.iter()
                .any(|l| l.starts_with("cargo::rustc-cfg=") || l.contains("rerun-if-changed")),
            "{l:?}"
        );
    }

    #[test]
    fn programs_are_found_only_on_the_path_given() {
        let dir = std::env::temp_dir().join(format!("ratelab-installed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("redis-server"), "").unwrap();
        let path = std::env::join_paths([&dir]).unwrap();
        assert!(REDIS.installed_on(&path));
        assert!(!REDIS_CLUSTER.installed_on(&path), "no redis-cli there");
        assert!(!REDIS.installed_on(OsStr::new("")));
        assert!(!NM.installed_on(&path));
        let l = build_lines(&[&NM], &path, |c| c.installed_on(&path), |_| None);
        assert!(l.contains(&"cargo::rustc-cfg=ratelab_missing_nm".to_owned()));
        assert!(l.contains(&format!("cargo::rerun-if-changed={}", dir.display())));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn every_component_has_its_own_cfg() {
        let cfgs: std::collections::BTreeSet<String> = ALL.iter().map(|c| c.cfg()).collect();
        assert_eq!(cfgs.len(), ALL.len());
    }
}
