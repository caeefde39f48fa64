//! The guide's claim about this example's size, counted from the files themselves.

fn code_lines(path: &str) -> usize {
    let text = std::fs::read_to_string(path).unwrap();
    let code = |l: &&str| !l.trim().is_empty() && !l.trim_start().starts_with("//");
    text.lines().filter(code).count()
}

#[test]
fn the_user_code_is_under_100_lines_as_the_guide_says() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let n = code_lines(&format!("{dir}/src/lib.rs"))
        + code_lines(&format!("{dir}/tests/suite/harnesses.rs"));
    assert!(n < 100, "{n} lines of user code");
    let guide = std::fs::read_to_string(format!("{dir}/../../docs/BRING-YOUR-OWN.md")).unwrap();
    let stated = guide
        .split("<!-- size -->")
        .nth(1)
        .and_then(|s| s.split("<!--").next());
    assert_eq!(
        stated,
        Some(n.to_string().as_str()),
        "docs/BRING-YOUR-OWN.md states the size"
    );
}
