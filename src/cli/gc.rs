//! `deltabench gc`: reap what dead runs left, found through their lease files.

use std::path::PathBuf;

use super::args::{GcArgs, Places};
use super::exit::Exit;
use super::{CliError, print_stdout};
use crate::store::{Reaped, leases, reap, registered_caches};

pub(super) fn gc(args: &GcArgs) -> Result<Exit, CliError> {
    let caches = caches_to_clean(&args.places);
    let verb = verb(args.dry_run);
    let (mut text, mut failed) = reap_dead(&caches, args.dry_run);
    if let Some(max) = args.places.cache_max {
        let (trimmed, trim_failed) = trim_caches(&caches, max, args.dry_run);
        text.push_str(&trimmed);
        failed += trim_failed;
    }
    if text.is_empty() {
        let places: Vec<String> = caches.iter().map(|c| c.display().to_string()).collect();
        text.push_str(&format!("nothing to clean in {}\n", places.join(", ")));
    }
    // Machine-wide, beside the caches: a killed run's empty cgroup, whichever cache it used.
    for cgroup in crate::process::tidy_dead_cgroups(args.dry_run) {
        text.push_str(&format!("{verb} empty cgroup {}\n", cgroup.display()));
    }
    print_stdout(&text);
    Ok(if failed > 0 { Exit::Unscored } else { Exit::Ok })
}

fn verb(dry_run: bool) -> &'static str {
    if dry_run { "would remove" } else { "removed" }
}

/// The caches to clean: the one `--cache` or `--workdir` names; without either, every cache a
/// run registered, wherever its workdir was, and the default one.
fn caches_to_clean(places: &Places) -> Vec<PathBuf> {
    match (&places.cache, &places.workdir) {
        (Some(cache), _) => vec![cache.clone()],
        (None, Some(workdir)) => vec![Places::default_cache(workdir)],
        (None, None) => {
            let mut caches = registered_caches();
            let default = Places::default_cache(&std::env::temp_dir());
            if !caches.contains(&default) {
                caches.push(default);
            }
            caches
        }
    }
}

/// Reaps what each dead lease of `caches` holds: the lines to print, and how many things could
/// not be removed.
fn reap_dead(caches: &[PathBuf], dry_run: bool) -> (String, usize) {
    let verb = verb(dry_run);
    let mut text = String::new();
    let mut failed = 0;
    for found in caches.iter().flat_map(|cache| leases(cache)) {
        if found.is_alive() {
            text.push_str(&format!(
                "in use: {} (pid {})\n",
                found.lease.run_dir.display(),
                found.lease.pid
            ));
            continue;
        }
        let Some(reaped) = reap(&found, dry_run) else {
            text.push_str(&format!(
                "reaped by another process: {} (pid {})\n",
                found.lease.run_dir.display(),
                found.lease.pid
            ));
            continue;
        };
        let lease_failed = reaped.iter().any(|r| matches!(r, Reaped::Failed { .. }));
        for reaped in reaped {
            failed += usize::from(matches!(reaped, Reaped::Failed { .. }));
            text.push_str(&reaped_line(&reaped, dry_run));
        }
        if !dry_run && !lease_failed {
            text.push_str(&format!(
                "{verb} lease of dead {} {} (pid {})\n",
                what_held(&found.lease),
                found.lease.run_dir.display(),
                found.lease.pid
            ));
        }
    }
    (text, failed)
}

/// The line that says what was (or, with `dry_run`, would be) done to `reaped`.
fn reaped_line(reaped: &Reaped, dry_run: bool) -> String {
    match reaped {
        Reaped::Failed { .. } => format!("could not remove {reaped}\n"),
        Reaped::Killed { .. } if dry_run => format!("would kill {reaped}\n"),
        Reaped::Killed { .. } => format!("killed {reaped}\n"),
        Reaped::Cgroup(_) if dry_run => format!("would kill and remove {reaped}\n"),
        Reaped::Cgroup(_) => format!("killed and removed {reaped}\n"),
        Reaped::Unmounted(_) if dry_run => format!("would unmount {reaped}\n"),
        Reaped::Unmounted(_) => format!("unmounted {reaped}\n"),
        _ => format!("{} {reaped}\n", verb(dry_run)),
    }
}

/// `--cache-max`: evicts each cache's least recently used templates down to `max` bytes.
fn trim_caches(caches: &[PathBuf], max: u64, dry_run: bool) -> (String, usize) {
    let verb = verb(dry_run);
    let mut text = String::new();
    let mut failed = 0;
    for cache in caches {
        match crate::runner::trim_templates(cache, max, dry_run) {
            Ok(evicted) => {
                for template in evicted {
                    text.push_str(&format!(
                        "{verb} template {} ({}{}), least recently used\n",
                        template.dir.display(),
                        bytesize::ByteSize::b(template.bytes).display().iec(),
                        template
                            .made
                            .map(|image| format!(", and its image {image}"))
                            .unwrap_or_default()
                    ));
                }
            }
            Err(err) => {
                failed += 1;
                text.push_str(&format!(
                    "could not trim the templates of {}: {err}\n",
                    cache.display()
                ));
            }
        }
    }
    (text, failed)
}

/// What took a lease: a run, or `validate` for its scratch folder (which it removes or, when a
/// task was bad, keeps and releases; a lease left on one means validate died).
fn what_held(lease: &crate::store::Lease) -> &'static str {
    let scratch = lease
        .run_dir
        .file_name()
        .is_some_and(|name| name.to_string_lossy().starts_with("deltabench-validate-"));
    if scratch { "validate" } else { "run" }
}
