//! `deltabench import`: runs an importer, then says what was written, what was skipped and why,
//! and which `deltabench validate` to run next.

use std::fmt::Write as _;

use super::args::ImportArgs;
use super::exit::Exit;
use super::{CliError, print_stdout};
use crate::import::{self, Format, ImportOptions, ImportReport};

pub(super) async fn import(args: ImportArgs) -> Result<Exit, CliError> {
    let format = args.format;
    let options = ImportOptions {
        format,
        source: args.source,
        out: args.out,
        repos: args.repos,
        env: args.env,
        instances: args.instance,
        repo_filter: args.repo,
        images: args.images,
        force: args.force,
        run_solutions: args.run_solutions,
        progress: Box::new(|step| eprintln!("{step} ...")),
    };
    let report = import::import(&options).await?;
    print_stdout(&summary(&report, format));
    if report.suites.is_empty() {
        return Err(CliError::harness(
            "nothing imported: every task was skipped (reasons above)",
        ));
    }
    Ok(Exit::Ok)
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

fn summary(report: &ImportReport, format: Format) -> String {
    let mut out = String::new();
    match report.suites.as_slice() {
        [] => {}
        [one] => {
            let _ = writeln!(
                out,
                "imported {} ({format}) into {}",
                plural(one.tasks, "task"),
                one.dir.display()
            );
        }
        several => {
            let _ = writeln!(
                out,
                "imported {} ({format}) into {} suites, one per repository:",
                plural(report.tasks(), "task"),
                several.len()
            );
            for suite in several {
                let _ = writeln!(
                    out,
                    "  {}: {}",
                    suite.dir.display(),
                    plural(suite.tasks, "task")
                );
            }
        }
    }
    if !report.skipped.is_empty() {
        let _ = writeln!(out, "skipped {}:", plural(report.skipped.len(), "task"));
        for skipped in &report.skipped {
            let _ = writeln!(out, "  {}: {}", skipped.task, skipped.reason);
        }
    }
    for note in &report.notes {
        let _ = writeln!(out, "note: {note}");
    }
    if !report.suites.is_empty() {
        let _ = writeln!(
            out,
            "next, check that each task fails on its base and passes with its reference:"
        );
        for suite in &report.suites {
            let _ = writeln!(
                out,
                "  deltabench validate {}",
                crate::support::shell_quote(&suite.dir.to_string_lossy())
            );
        }
    }
    out
}
