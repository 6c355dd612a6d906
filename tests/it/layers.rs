//! The crate's modules form one-way layers: a module may name only modules of a lower layer
//! (docs/decisions.md says why this order). This reads every `crate::NAME` in `src/` and fails on
//! one that points up or sideways, naming the file and line.

use std::collections::BTreeSet;
use std::path::Path;

use crate::common::rust_files;

/// Lowest first. Modules on one line are siblings: neither may name the other.
const LAYERS: &[&[&str]] = &[
    &["support"],
    &["process"],
    &["model"],
    &["workspace"],
    &["agent"],
    &["gateway", "trajectory"],
    &["delta"],
    &["metric"],
    &["lifecycle"],
    &["suite"],
    &["store"],
    &["stats"],
    &["runner"],
    &["report", "import"],
    &["cli"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// The top-level module a file under `src/` belongs to; `None` for the crate roots.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).unwrap();
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(name, "lib" | "main")).then(|| name.to_owned())
}

/// Every `crate::NAME` the code names, with its 0-based line: a path (`crate::store::x`) or
/// each member of a group (`use crate::{store, support::x};`, over several lines too). Comments
/// are not imports.
fn crate_paths_in(text: &str) -> Vec<(usize, &str)> {
    let code: Vec<&str> = text
        .lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect();
    let mut found = Vec::new();
    for (number, line) in code.iter().enumerate() {
        for (at, prefix) in line.match_indices("crate::") {
            // Skip `$crate::` in macros.
            if line[..at].ends_with('$') {
                continue;
            }
            let rest = &line[at + prefix.len()..];
            if rest.starts_with('{') {
                found.extend(group_members(&code, number, at + prefix.len() + 1));
            } else if let Some(name) = leading_name(rest) {
                found.push((number, name));
            }
        }
    }
    found
}

/// The first name of each top-level member of the group that opens before `code[line][from]`.
fn group_members<'a>(code: &[&'a str], line: usize, from: usize) -> Vec<(usize, &'a str)> {
    let mut members = Vec::new();
    let (mut depth, mut expecting) = (1, true);
    for (number, text) in code.iter().enumerate().skip(line) {
        let start = if number == line { from } else { 0 };
        for (offset, c) in text[start..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 1 => expecting = true,
                c if expecting && depth == 1 && !c.is_whitespace() => {
                    expecting = false;
                    if let Some(name) = leading_name(&text[start + offset..]) {
                        members.push((number, name));
                    }
                }
                _ => {}
            }
            if depth == 0 {
                return members;
            }
        }
    }
    members
}

/// The identifier `text` starts with (`self` is the group's own module: none).
fn leading_name(text: &str) -> Option<&str> {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    Some(&text[..end]).filter(|name| !name.is_empty() && *name != "self")
}

fn crate_paths(line: &str) -> Vec<&str> {
    crate_paths_in(line)
        .into_iter()
        .map(|(_, name)| name)
        .collect()
}

#[test]
fn every_import_points_down_the_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut unplaced = BTreeSet::new();
    let mut upward = Vec::new();
    for file in &files {
        let Some(module) = module_of(&src, file) else {
            continue;
        };
        let Some(own) = layer_of(&module) else {
            unplaced.insert(module);
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        for (number, name) in crate_paths_in(&text) {
            if name == module {
                continue;
            }
            match layer_of(name) {
                Some(layer) if layer < own => {}
                Some(_) => upward.push(format!(
                    "{}:{}: {module} names crate::{name}, which is not below it",
                    file.strip_prefix(&src).unwrap().display(),
                    number + 1
                )),
                None => {
                    unplaced.insert(name.to_owned());
                }
            }
        }
    }
    assert!(
        unplaced.is_empty(),
        "modules missing from LAYERS in tests/it/layers.rs: {unplaced:?}"
    );
    assert!(
        upward.is_empty(),
        "imports against the layer order:\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_checker_sees_uses_paths_and_skips_comments() {
    assert_eq!(crate_paths("use crate::store::{self, Outcome};"), ["store"]);
    assert_eq!(
        crate_paths("    let x = crate::workspace::remove_tree(&crate::support::x);"),
        ["workspace", "support"]
    );
    assert!(crate_paths("//! see [`crate::lifecycle`]").is_empty());
    assert!(crate_paths("    foo(); // crate::runner does this").is_empty());
    assert!(crate_paths("    $crate::delta::x").is_empty());
    assert_eq!(
        crate_paths("use crate::{import, store};"),
        ["import", "store"]
    );
    assert_eq!(
        crate_paths_in(
            "use crate::{\n    self,\n    cli::{a, b},\n    // crate::x\n    report::y,\n};"
        ),
        [(2, "cli"), (4, "report")]
    );
}
