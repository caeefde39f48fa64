//! The marked blocks of the docs (`<!-- BEGIN TAG -->` … `<!-- END TAG -->`): the figures a
//! command writes into a page go between its markers, and nothing else of the page changes.

/// Replaces the text between `<!-- BEGIN TAG -->` and `<!-- END TAG -->` with `content`.
pub fn replace_block(text: &str, tag: &str, content: &str) -> Result<String, String> {
    let begin = format!("<!-- BEGIN {tag} -->");
    let end = format!("<!-- END {tag} -->");
    let b = text
        .find(&begin)
        .ok_or_else(|| format!("marker {begin} not found"))?;
    let e = text[b..]
        .find(&end)
        .ok_or_else(|| format!("marker {end} not found"))?
        + b;
    Ok(format!(
        "{}{begin}\n{}\n{}",
        &text[..b],
        content.trim_end(),
        &text[e..]
    ))
}
