//! What a recipe needs installed: its npm packages in its own directory, its PyPI packages in
//! the machine's `python3`, its glue app built from crates.io when it is a Rust program, and
//! the programs (from Debian) it starts. Missing packages are
//! installed from their registries at the versions the recipe pins, unless told not to;
//! missing programs are named with the `apt-get` line that installs them. The versions found
//! are recorded in the results.

use super::recipe::Loaded;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

/// `name@version` → (`name`, `version`); a scoped npm name keeps its leading `@`.
fn npm_split(spec: &str) -> (&str, &str) {
    match spec.get(1..).and_then(|t| t.rfind('@')) {
        Some(i) => (&spec[..=i], &spec[i + 2..]),
        None => (spec, ""),
    }
}

/// `name==version` → (`name`, `version`).
fn pip_split(spec: &str) -> (&str, &str) {
    spec.split_once("==").unwrap_or((spec, ""))
}

/// The version of npm package `name` installed under `dir`, if any.
fn npm_installed(dir: &Path, name: &str) -> Option<String> {
    let manifest = dir.join("node_modules").join(name).join("package.json");
    let text = std::fs::read_to_string(manifest).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v.get("version")?.as_str().map(str::to_owned)
}

/// The versions of the PyPI packages `names` that `python3` has, by lower-case name: one
/// interpreter reading the installed distributions' metadata for all of them
/// (`importlib.metadata`, about a tenth of what starting `pip show` costs).
fn pip_installed(names: &[&str]) -> BTreeMap<String, String> {
    const SHOW: &str = r"
import sys, importlib.metadata as m
for n in sys.argv[1:]:
    try:
        print(n + '\t' + m.version(n))
    except m.PackageNotFoundError:
        pass
";
    let mut out = BTreeMap::new();
    if names.is_empty() {
        return out;
    }
    let Ok(shown) = Command::new("python3")
        .args(["-c", SHOW])
        .args(names)
        .stderr(Stdio::null())
        .output()
    else {
        return out;
    };
    for line in String::from_utf8_lossy(&shown.stdout).lines() {
        if let Some((name, version)) = line.split_once('\t') {
            out.insert(pip_key(name), version.trim().to_owned());
        }
    }
    out
}

/// `name` as pip compares names.
fn pip_key(name: &str) -> String {
    name.to_lowercase().replace('_', "-")
}

fn on_path(program: &str) -> bool {
    locate(program).is_some()
}

/// Where `program` is: on the PATH, or in `/usr/sbin` or `/sbin`, where Debian puts the
/// servers (nginx, varnishd, haproxy) and which a user's PATH may lack.
pub fn locate(program: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    ratelab_procs::installed::on_path(program, &path).or_else(|| {
        ["/usr/sbin", "/sbin"]
            .iter()
            .map(|d| Path::new(d).join(program))
            .find(|p| p.is_file())
    })
}

fn run(cmd: &mut Command, what: &str) -> Result<(), String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(6).collect();
        Err(format!(
            "{what} failed ({}):\n{}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ))
    }
}

/// Checks (and with `install`, installs) what `r` needs; returns each package's installed
/// version and each program's path, or exactly what is missing and how to install it.
pub fn ensure(r: &Loaded, install: bool) -> Result<BTreeMap<String, String>, String> {
    let i = &r.recipe.install;
    let mut versions = BTreeMap::new();
    let missing_programs: Vec<&String> = i.programs.iter().filter(|p| !on_path(p)).collect();
    if !missing_programs.is_empty() {
        return Err(format!(
            "{}: {} not on the PATH; install with: apt-get install {}",
            r.name,
            missing_programs
                .iter()
                .map(|p| p.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            i.apt.join(" ")
        ));
    }
    let npm_missing: Vec<&String> = i
        .npm
        .iter()
        .filter(|s| {
            let (name, version) = npm_split(s);
            npm_installed(&r.dir, name).is_none_or(|v| !version.is_empty() && v != version)
        })
        .collect();
    if !npm_missing.is_empty() {
        let line = format!(
            "npm install --no-save --no-package-lock --no-audit --no-fund --prefix {} {}",
            r.dir.display(),
            npm_missing
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        );
        if !install {
            return Err(format!("{}: missing npm packages; run: {line}", r.name));
        }
        eprintln!("{}: {line}", r.name);
        run(
            Command::new("npm")
                .args([
                    "install",
                    "--no-save",
                    "--no-package-lock",
                    "--no-audit",
                    "--no-fund",
                    "--prefix",
                ])
                .arg(&r.dir)
                .args(i.npm.iter()),
            "npm install",
        )?;
    }
    let pip_names: Vec<&str> = i.pip.iter().map(|s| pip_split(s).0).collect();
    let have = pip_installed(&pip_names);
    let pip_missing: Vec<&String> = i
        .pip
        .iter()
        .filter(|s| {
            let (name, version) = pip_split(s);
            have.get(&pip_key(name))
                .is_none_or(|v| !version.is_empty() && v != version)
        })
        .collect();
    if !pip_missing.is_empty() {
        let pkgs: Vec<&str> = pip_missing.iter().map(|s| s.as_str()).collect();
        let line = format!("python3 -m pip install {}", pkgs.join(" "));
        if !install {
            return Err(format!("{}: missing PyPI packages; run: {line}", r.name));
        }
        eprintln!("{}: {line}", r.name);
        run(
            Command::new("python3")
                .args(["-m", "pip", "install", "-q"])
                .args(&pkgs),
            "pip install",
        )?;
    }
    if !i.cargo.is_empty() {
        versions.extend(cargo_build(r, install)?);
    }
    for s in &i.npm {
        let (name, _) = npm_split(s);
        let v = npm_installed(&r.dir, name)
            .ok_or_else(|| format!("{}: npm package {name} is not installed", r.name))?;
        versions.insert(format!("npm:{name}"), v);
    }
    let have = if pip_missing.is_empty() {
        have
    } else {
        pip_installed(&pip_names)
    };
    for name in &pip_names {
        let v = have
            .get(&pip_key(name))
            .ok_or_else(|| format!("{}: PyPI package {name} is not installed", r.name))?;
        versions.insert(format!("pypi:{name}"), v.clone());
    }
    for p in &i.programs {
        if let Some(v) = program_version(p) {
            versions.insert(format!("program:{p}"), v);
        }
    }
    for (package, v) in debian_versions(&i.apt) {
        versions.insert(format!("deb:{package}"), v);
    }
    Ok(versions)
}

/// Builds the recipe's Cargo package (its glue app) into its own `target/`: from crates.io
/// with `install`, else only from what is already fetched (saying what to run when that is
/// not enough); returns the versions of the crates the recipe names, from its Cargo.lock.
fn cargo_build(r: &Loaded, install: bool) -> Result<BTreeMap<String, String>, String> {
    let manifest = r.dir.join("Cargo.toml");
    let target = r.dir.join("target");
    let line = format!(
        "cargo build --release --locked --manifest-path {} --target-dir {}",
        manifest.display(),
        target.display()
    );
    let mut cmd = Command::new("cargo");
    cmd.args([
        "build",
        "--release",
        "--quiet",
        "--locked",
        "--manifest-path",
    ])
    .arg(&manifest)
    .arg("--target-dir")
    .arg(&target)
    // The workspace's own settings (its RUSTFLAGS) are not the glue app's.
    .env_remove("RUSTFLAGS")
    .env_remove("CARGO_ENCODED_RUSTFLAGS");
    if install {
        eprintln!("{}: {line}", r.name);
    } else {
        cmd.arg("--offline");
    }
    run(&mut cmd, "cargo build").map_err(|e| {
        if install {
            format!("{}: {e}", r.name)
        } else {
            format!("{}: the glue app is not built ({e}); run: {line}", r.name)
        }
    })?;
    let lock = r.dir.join("Cargo.lock");
    let text = std::fs::read_to_string(&lock).map_err(|e| format!("{}: {e}", lock.display()))?;
    r.recipe
        .install
        .cargo
        .iter()
        .map(|name| {
            locked_version(&text, name)
                .map(|v| (format!("crate:{name}"), v))
                .ok_or_else(|| format!("{}: {name} is not in {}", r.name, lock.display()))
        })
        .collect()
}

/// The version of `name` in a Cargo.lock's text (the first, if it holds several).
fn locked_version(lock: &str, name: &str) -> Option<String> {
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line.trim() == format!("name = \"{name}\"") {
            let v = lines.next()?.trim().strip_prefix("version = \"")?;
            return v.strip_suffix('"').map(str::to_owned);
        }
    }
    None
}

/// The first line a program prints for `-v`/`--version`, as its version.
/// The installed versions of the Debian packages `packages`, as dpkg records them (none
/// where dpkg is not there, or a package is not installed).
fn debian_versions(packages: &[String]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if packages.is_empty() {
        return out;
    }
    let Ok(shown) = Command::new("dpkg-query")
        .args(["-W", "-f=${Package}\t${Status}\t${Version}\n"])
        .args(packages)
        .stderr(Stdio::null())
        .output()
    else {
        return out;
    };
    for line in String::from_utf8_lossy(&shown.stdout).lines() {
        let mut fields = line.split('\t');
        if let (Some(package), Some(status), Some(version)) =
            (fields.next(), fields.next(), fields.next())
            && status.ends_with(" installed")
            && !version.is_empty()
        {
            out.insert(package.to_owned(), version.to_owned());
        }
    }
    out
}

fn program_version(program: &str) -> Option<String> {
    for flag in ["--version", "-v", "-V"] {
        if let Ok(out) = Command::new(program)
            .arg(flag)
            .stdin(Stdio::null())
            .output()
        {
            let text = if out.stdout.is_empty() {
                out.stderr
            } else {
                out.stdout
            };
            if out.status.success()
                && let Some(line) = String::from_utf8_lossy(&text).lines().next()
            {
                return Some(line.trim().to_owned());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_specs_split_into_name_and_version() {
        assert_eq!(npm_split("ioredis@5.4.1"), ("ioredis", "5.4.1"));
        assert_eq!(
            npm_split("@upstash/ratelimit@2.2.0"),
            ("@upstash/ratelimit", "2.2.0")
        );
        assert_eq!(npm_split("express"), ("express", ""));
        assert_eq!(pip_split("limits==5.8.0"), ("limits", "5.8.0"));
        assert_eq!(pip_split("flask"), ("flask", ""));
        let lock = "[[package]]\nname = \"axum\"\nversion = \"0.8.9\"\n\n[[package]]\nname = \"axum-core\"\nversion = \"0.5.6\"\n";
        assert_eq!(locked_version(lock, "axum-core").as_deref(), Some("0.5.6"));
        assert_eq!(locked_version(lock, "axum").as_deref(), Some("0.8.9"));
        assert_eq!(locked_version(lock, "tokio"), None);
    }
}
