//! `deltabench agents`: the built-in CLI kinds, their pinned versions, and what is installed.

use crate::agent::harness::{HarnessKind, Registry, find_program, installed_version};

/// The table `deltabench agents` prints.
pub(super) fn list() -> String {
    let mut rows = vec![[
        "KIND".to_owned(),
        "PROGRAM".to_owned(),
        "PINNED".to_owned(),
        "INSTALLED HERE".to_owned(),
    ]];
    for &kind in HarnessKind::ALL {
        let package = kind.package().expect("every built-in kind has a package");
        let pin = match package.registry {
            Registry::Npm => format!("npm {}@{}", package.name, package.version),
            Registry::PyPi => format!("PyPI {}=={}", package.name, package.version),
        };
        let installed = match find_program(kind, None) {
            Ok(path) => match installed_version(kind, &path) {
                Some(version) if version == package.version => {
                    format!("yes, {version} ({})", path.display())
                }
                Some(version) => format!(
                    "{version}, not the pinned version ({}): `bash .ci/install-agents`",
                    path.display()
                ),
                None => format!("yes, version unknown ({})", path.display()),
            },
            Err(_) => "no: `bash .ci/install-agents`".to_owned(),
        };
        rows.push([kind.to_string(), kind.program().to_owned(), pin, installed]);
    }
    let widths: Vec<usize> = (0..3)
        .map(|col| rows.iter().map(|row| row[col].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        for (col, width) in widths.iter().enumerate() {
            out += &format!("{:<width$}  ", row[col]);
        }
        out += &row[3];
        out.push('\n');
    }
    out += "\nAny other CLI: `kind: cli` with its command template, dialect and output parser \
            (docs/agents.md, \"A CLI of your own\").\n";
    out
}
