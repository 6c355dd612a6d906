//! Prepared setup: a task's `setup` runs once per (source, base commit, setup, environment) in
//! a cached template, and every trial gets a copy-on-write view of what it left
//! (docs/environments.md, "Prepared setup").
//!
//! On the host that is the template's tree. In a container the tree is the workspace mount,
//! and what setup changed outside it (a package installed under /usr) is committed as an image
//! the trial's commands then run in.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::delta::commit_setup;
use crate::process::{self, CommandSpec};
use crate::store::layout;
use crate::workspace::{
    ContainerPolicy, EvictedTemplate, MADE, Prepare, PrepareError, Runtime, container_started,
    evict_templates, tail,
};

/// What the cache may hold in templates after a run, unless told otherwise.
pub(super) const DEFAULT_CACHE_MAX: u64 = 20 * 1024 * 1024 * 1024;

/// Removes the least recently used templates of `cache` (and the images their preparation
/// made) until the templates take at most `max_bytes`; templates a running run uses stay.
pub fn trim_templates(
    cache: &Path,
    max_bytes: u64,
    dry_run: bool,
) -> std::io::Result<Vec<EvictedTemplate>> {
    let evicted = evict_templates(&cache.join("templates"), max_bytes, dry_run)?;
    if !dry_run
        && evicted.iter().any(|e| e.made.is_some())
        && let Ok(runtime) = Runtime::discover()
    {
        for image in evicted.iter().filter_map(|e| e.made.as_deref()) {
            runtime.remove_image(image);
        }
    }
    Ok(evicted)
}

/// A task's setup, run once into a template.
#[derive(Debug)]
pub struct SetupPreparation {
    key: String,
    setup: String,
    timeout: Option<Duration>,
    /// The harness-owned repository that keeps the setup commit's objects.
    history: PathBuf,
    /// The container setup runs in (its image the environment's) and the image its result is
    /// committed as.
    container: Option<(ContainerPolicy, String)>,
}

impl SetupPreparation {
    /// `environment_id` is the environment image's id (not its name, which can be re-tagged),
    /// `None` on the host.
    pub fn new(
        setup: &str,
        timeout: Option<Duration>,
        history: &Path,
        commit: &str,
        container: Option<ContainerPolicy>,
        environment_id: Option<&str>,
    ) -> Self {
        let mut digest = Sha256::new();
        for part in [
            setup,
            commit,
            environment_id.unwrap_or("host"),
            &container
                .as_ref()
                .map(|c| format!("{}\0{}", c.workdir.display(), c.network))
                .unwrap_or_default(),
        ] {
            digest.update(part.as_bytes());
            digest.update([0]);
        }
        let key = format!("{:x}", digest.finalize())[..24].to_owned();
        let container = container.map(|policy| {
            let image = format!("localhost/deltabench-prepared:{}", &key[..16]);
            (policy, image)
        });
        Self {
            key,
            setup: setup.to_owned(),
            timeout,
            history: history.to_owned(),
            container,
        }
    }

    /// The image the trial's commands run in, when setup ran in a container.
    pub fn image(&self) -> Option<&str> {
        self.container.as_ref().map(|(_, image)| image.as_str())
    }

    fn run_setup(&self, tree: &Path, dir: &Path) -> Result<(), PrepareError> {
        let log = dir.join(layout::SETUP_LOG);
        let mut spec = CommandSpec::shell(&self.setup, tree)
            .timeout(self.timeout)
            .log_path(Some(log.clone()));
        let kept = format!("deltabench-prepare-{}", &self.key[..16]);
        if let Some((policy, _)) = &self.container {
            let policy = policy.clone().home(dir.join("home"));
            spec = policy.wrap_kept(tree, spec, &kept).map_err(|e| {
                PrepareError::from(format!("cannot prepare the setup's container: {e}"))
            })?;
            // Left by a run killed while preparing this template.
            policy.runtime.remove_container(&kept);
        }
        let ended = tokio::runtime::Handle::current()
            .block_on(process::run(&spec, &CancellationToken::new()))
            .map_err(|e| PrepareError::from(format!("cannot start the setup command: {e}")))?;
        let Some((policy, image)) = &self.container else {
            return ended_well(&ended, &self.setup, &log);
        };
        if !container_started(&ended) {
            policy.runtime.remove_container(&kept);
            return Err(format!(
                "the container runtime could not run the setup command: {}",
                ended.last_line()
            )
            .into());
        }
        if let Err(reason) = ended_well(&ended, &self.setup, &log) {
            policy.runtime.remove_container(&kept);
            return Err(reason);
        }
        policy.runtime.commit(&kept, image).map_err(|e| {
            PrepareError::from(format!("cannot save what the setup command made: {}", e.0))
        })?;
        std::fs::write(dir.join(MADE), image).map_err(|e| PrepareError::from(e.to_string()))
    }
}

fn ended_well(ended: &process::ProcessOutput, setup: &str, log: &Path) -> Result<(), PrepareError> {
    if ended.success() {
        return Ok(());
    }
    Err(setup_failed(ended, setup, log).into())
}

/// Why a setup command failed: how it ended, where its log is, and the log's last lines.
pub(super) fn setup_failed(ended: &process::ProcessOutput, setup: &str, log: &Path) -> String {
    let said = tail(&ended.output.text(), SETUP_TAIL_LINES);
    let ends = if said.is_empty() {
        String::new()
    } else {
        format!(", which ends with:\n{said}")
    };
    format!(
        "the setup command `{setup}` {}; see {}{ends}",
        ended.ending(),
        log.display()
    )
}

const SETUP_TAIL_LINES: usize = 5;

impl Prepare for SetupPreparation {
    fn key(&self) -> &str {
        &self.key
    }

    fn prepare(&self, tree: &Path, dir: &Path) -> Result<String, PrepareError> {
        self.run_setup(tree, dir)?;
        commit_setup(tree, &self.history).map_err(|e| {
            PrepareError::from(format!(
                "cannot record the tree after setup: {}",
                e.message()
            ))
        })
    }

    fn intact(&self, base: &str) -> bool {
        let recorded = git2::Repository::open_bare(&self.history).is_ok_and(|repo| {
            git2::Oid::from_str(base).is_ok_and(|oid| repo.find_commit(oid).is_ok())
        });
        recorded
            && self
                .container
                .as_ref()
                .is_none_or(|(policy, image)| policy.runtime.image_exists(image))
    }
}
