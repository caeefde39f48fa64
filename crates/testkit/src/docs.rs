//! Figures in the docs that a test produces: each sits between
//! `<!-- BEGIN figures:NAME -->` and `<!-- END figures:NAME -->` in a file of the repository,
//! and the test that computes it checks the block is exactly what it computed today. With
//! `RATELAB_BLESS=1` the test writes the block instead (that is how the figures are made:
//! `RATELAB_BLESS=1 cargo test`), so no figure in a block is ever typed by hand.
//!
//! Used by each test crate that owns a block.

use std::path::PathBuf;

/// The repository root, from any crate of the workspace.
pub fn repo_root() -> PathBuf {
    let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    while !dir.join(".git").exists() && !dir.join("sim-scenarios").is_dir() {
        if !dir.pop() {
            panic!("no repository root above {}", env!("CARGO_MANIFEST_DIR"));
        }
    }
    dir
}

/// Checks (or, under `RATELAB_BLESS=1`, writes) block `name` of `doc` (relative to the
/// repository root) to be `content`, which should end with a newline.
pub fn check_block(doc: &str, name: &str, content: &str) {
    // Tests of one binary run in parallel and may write blocks of the same file: one at a time.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let path = repo_root().join(doc);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{doc}: {e}"));
    let (before, current, after) = split(&text, name).unwrap_or_else(|e| panic!("{doc}: {e}"));
    if current == content {
        return;
    }
    if std::env::var_os("RATELAB_BLESS").is_some_and(|v| v == "1") {
        let updated = format!("{before}{content}{after}");
        std::fs::write(&path, updated).unwrap_or_else(|e| panic!("{doc}: {e}"));
        eprintln!("wrote figures:{name} in {doc}");
        return;
    }
    panic!(
        "{doc}: the figures in block `{name}` are not what today's code gives.\n--- in the doc ---\n{current}--- today ---\n{content}---\nregenerate with: RATELAB_BLESS=1 cargo test"
    );
}

/// The text before the block's content, the content, and the text from its END marker on.
fn split<'a>(text: &'a str, name: &str) -> Result<(&'a str, &'a str, &'a str), String> {
    let begin = format!("<!-- BEGIN figures:{name} -->\n");
    let end = format!("<!-- END figures:{name} -->");
    let b = text
        .find(&begin)
        .ok_or_else(|| format!("no `{}` marker", begin.trim_end()))?
        + begin.len();
    let e = text[b..]
        .find(&end)
        .ok_or_else(|| format!("no `{end}` marker"))?
        + b;
    Ok((&text[..b], &text[b..e], &text[e..]))
}
