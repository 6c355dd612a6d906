//! `deltabench gc`: reap what dead runs left, found through their lease files.

use super::{CliError, EXIT_CHECK_FAILED, EXIT_OK, GcArgs, print_stdout};
use crate::store::{Reaped, leases, reap};

pub(super) fn gc(args: &GcArgs) -> Result<u8, CliError> {
    let cache = match (&args.cache, &args.workdir) {
        (Some(cache), _) => cache.clone(),
        (None, workdir) => workdir
            .clone()
            .unwrap_or_else(std::env::temp_dir)
            .join("deltabench-cache"),
    };
    let verb = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
    let mut text = String::new();
    let mut failed = 0;
    for found in leases(&cache) {
        if found.is_alive() {
            text.push_str(&format!(
                "in use: {} (pid {})\n",
                found.lease.run_dir.display(),
                found.lease.pid
            ));
            continue;
        }
        let reaped = reap(&found, args.dry_run);
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
                "{verb} lease of dead run {} (pid {})\n",
                found.lease.run_dir.display(),
                found.lease.pid
            ));
        }
    }
    for cgroup in crate::process::tidy_dead_cgroups(args.dry_run) {
        text.push_str(&format!("{verb} empty cgroup {}\n", cgroup.display()));
    }
    if text.is_empty() {
        text.push_str(&format!("nothing to clean in {}\n", cache.display()));
    }
    print_stdout(&text);
    Ok(if failed > 0 {
        EXIT_CHECK_FAILED
    } else {
        EXIT_OK
    })
}
