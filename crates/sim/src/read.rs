//! Reading a scenario: the file's text to a validated [`Scenario`], every error located at
//! its file, path, line and column ([`crate::validate`] checks the rules across fields).

use crate::locate::{PathSeg, locate, render};
use crate::scenario::{MAX_FILE_BYTES, Scenario, ScenarioError, ScenarioSpec};
use crate::validate::validate;
use std::path::Path;

impl Scenario {
    /// Validates `spec` as if it were the contents of `file`: the way to change a scenario in
    /// code (load it, edit a copy of [`Scenario::spec`], make a new one).
    pub fn from_spec(file: &Path, spec: ScenarioSpec) -> Result<Scenario, ScenarioError> {
        let text = serde_json::to_string_pretty(&spec).map_err(|e| ScenarioError {
            file: file.to_owned(),
            path: ".".into(),
            line: 0,
            column: 0,
            message: e.to_string(),
        })?;
        Scenario::parse(file, &text)
    }

    /// Reads and validates the scenario at `file`.
    pub fn load(file: &Path) -> Result<Scenario, ScenarioError> {
        let fail = |message: String| ScenarioError {
            file: file.to_owned(),
            path: ".".into(),
            line: 0,
            column: 0,
            message,
        };
        let meta = std::fs::metadata(file).map_err(|e| fail(format!("cannot read: {e}")))?;
        if meta.len() > MAX_FILE_BYTES {
            return Err(fail(format!(
                "file is {} bytes: expected at most {MAX_FILE_BYTES}",
                meta.len()
            )));
        }
        let text = std::fs::read_to_string(file).map_err(|e| fail(format!("cannot read: {e}")))?;
        Scenario::parse(file, &text)
    }

    /// Validates scenario `text`, attributing errors to `file`.
    pub fn parse(file: &Path, text: &str) -> Result<Scenario, ScenarioError> {
        let mut de = serde_json::Deserializer::from_str(text);
        let located_serde = |path: String, inner: &serde_json::Error| {
            let message = inner.to_string();
            // serde_json appends " at line L column C"; the location has its own fields.
            let message = match message.rfind(" at line ") {
                Some(i) => message[..i].to_owned(),
                None => message,
            };
            ScenarioError {
                file: file.to_owned(),
                path: if path.is_empty() { ".".into() } else { path },
                line: inner.line(),
                column: inner.column(),
                message,
            }
        };
        let spec: ScenarioSpec = serde_path_to_error::deserialize(&mut de)
            .map_err(|e| located_serde(e.path().to_string(), e.inner()))?;
        de.end().map_err(|e| located_serde(String::new(), &e))?;
        let name = file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "scenario".into());
        let located = |path: Vec<PathSeg>, message: String| {
            let (line, column) = locate(text, &path).unwrap_or((1, 1));
            ScenarioError {
                file: file.to_owned(),
                path: render(&path),
                line,
                column,
                message,
            }
        };
        validate(spec, file, name, &located)
    }
}
