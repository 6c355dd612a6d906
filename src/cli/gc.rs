//! `deltabench gc`: reap what dead runs left, found through their lease files.

use super::args::{GcArgs, Places};
use super::exit::Exit;
use super::{CliError, print_stdout};
use crate::store::{Reaped, leases, reap, registered_caches};

pub(super) fn gc(args: &GcArgs) -> Result<Exit, CliError> {
    // Without --cache or --workdir: every cache a run registered, wherever its workdir was.
    let caches = match (&args.places.cache, &args.places.workdir) {
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
    };
    let verb = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
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
        let Some(reaped) = reap(&found, args.dry_run) else {
            text.push_str(&format!(
                "reaped by another process: {} (pid {})\n",
                found.lease.run_dir.display(),
                found.lease.pid
            ));
            continue;
        };
        let lease_failed = reaped.iter().any(|r| matches!(r, Reaped::Failed { .. }));
        for reaped in reaped {
            match &reaped {
                Reaped::Failed { .. } => {
                    failed += 1;
                    text.push_str(&format!("could not remove {reaped}\n"));
                }
                Reaped::Killed { .. } if args.dry_run => {
                    text.push_str(&format!("would kill {reaped}\n"));
                }
                Reaped::Killed { .. } => text.push_str(&format!("killed {reaped}\n")),
                Reaped::Cgroup(_) if args.dry_run => {
                    text.push_str(&format!("would kill and remove {reaped}\n"));
                }
                Reaped::Cgroup(_) => text.push_str(&format!("killed and removed {reaped}\n")),

                Reaped::Unmounted(_) if args.dry_run => {
                    text.push_str(&format!("would unmount {reaped}\n"));
                }
                Reaped::Unmounted(_) => text.push_str(&format!("unmounted {reaped}\n")),
                _ => text.push_str(&format!("{verb} {reaped}\n")),
            }
        }
        if !args.dry_run && !lease_failed {
            text.push_str(&format!(
                "{verb} lease of dead {} {} (pid {})\n",
                what_held(&found.lease),
                found.lease.run_dir.display(),
                found.lease.pid
            ));
        }
    }
    if let Some(max) = args.places.cache_max {
        for cache in &caches {
            match crate::runner::trim_templates(cache, max, args.dry_run) {
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

/// What took a lease: a run, or `validate` for its scratch folder (which it removes or, when a
/// task was bad, keeps and releases; a lease left on one means validate died).
fn what_held(lease: &crate::store::Lease) -> &'static str {
    let scratch = lease
        .run_dir
        .file_name()
        .is_some_and(|name| name.to_string_lossy().starts_with("deltabench-validate-"));
    if scratch { "validate" } else { "run" }
}
