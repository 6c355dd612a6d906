//! What a suite file names: ids safe as file names, and agent scripts beside the file.

use serde_saphyr::Spanned;

use super::diagnostics::{Source, SuiteError};
use crate::support::shell_quote;

/// Letters, digits, `.`, `_` and `-`, and neither `.` nor `..`: safe as a folder name.
pub(super) fn is_safe_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// Makes a leading `./x` or `../x` in a command line absolute, relative to the defining file:
/// the command runs in the workspace, not next to the suite.
pub(super) fn resolve_command(
    source: &Source,
    run: &Spanned<String>,
) -> Result<String, SuiteError> {
    let line = run.value.trim();
    if line.is_empty() {
        return Err(source.at(run, "`run` is empty"));
    }
    let (first, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    if !(first.starts_with("./") || first.starts_with("../")) {
        return Ok(line.to_owned());
    }
    let path = source.dir.join(first);
    if !path.is_file() {
        return Err(source.at(
            run,
            format!("agent script '{first}' does not exist ({})", path.display()),
        ));
    }
    let path = path.canonicalize().unwrap_or(path);
    let quoted = shell_quote(&path.to_string_lossy());
    Ok(if rest.is_empty() {
        quoted
    } else {
        format!("{quoted} {rest}")
    })
}
