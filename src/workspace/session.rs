//! The `session` backend: the agent works in the suite's own work tree.
//!
//! For a quick local look at one trial. The tree must be a clean, non-bare checkout at the
//! task's base commit; dispose leaves the agent's changes in place for the user.

use git2::{Repository, StatusOptions};

use super::{
    Isolation, ProvisionedWorkspace, WorkspaceBackend, WorkspaceBase, WorkspaceProvisionError,
};

/// Hands out the base repository's own work tree.
#[derive(Debug, Clone, Copy, Default)]
pub struct SessionBackend;

impl WorkspaceBackend for SessionBackend {
    fn provision(
        &self,
        base: &WorkspaceBase,
    ) -> Result<ProvisionedWorkspace, WorkspaceProvisionError> {
        let fail = |reason: String| WorkspaceProvisionError {
            isolation: Isolation::Session,
            base: base.repo.clone(),
            reason,
        };
        let repo = Repository::open(&base.repo).map_err(|err| fail(err.message().to_owned()))?;
        let Some(workdir) = repo.workdir().map(ToOwned::to_owned) else {
            return Err(fail(
                "it is a bare repository; `session` needs a work tree".into(),
            ));
        };
        let head = repo
            .head()
            .ok()
            .and_then(|head| head.peel_to_commit().ok())
            .map(|commit| commit.id().to_string());
        if head.as_deref() != Some(base.commit.as_str()) {
            return Err(fail(format!(
                "its HEAD is {}, not the task's base {}; check out the base first",
                head.as_deref().unwrap_or("unborn"),
                base.commit
            )));
        }
        let mut options = StatusOptions::new();
        options.include_untracked(true).include_ignored(false);
        let dirty = repo
            .statuses(Some(&mut options))
            .map_err(|err| fail(err.message().to_owned()))?
            .len();
        if dirty > 0 {
            return Err(fail(format!(
                "its work tree has {dirty} uncommitted change(s); commit or stash them first"
            )));
        }
        Ok(ProvisionedWorkspace::new(
            workdir,
            Isolation::Session,
            base.commit.clone(),
            || Ok(()),
        ))
    }
}
