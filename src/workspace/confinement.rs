//! Where a trial's commands run: on this machine, in the sandbox, or in the task's container.
//! Chosen once per trial and passed down, so no caller decides it again.

use std::path::Path;

use crate::process::{CommandSpec, ProcessOutput};

use super::{ContainerPolicy, Network, SandboxPolicy, container_started, sandbox_started};

/// Where a trial's commands run, with the policy that wraps them.
#[derive(Debug, Clone, Default)]
pub enum Confinement {
    /// On this machine, as the harness runs.
    #[default]
    Host,
    /// In bubblewrap (`isolation: sandbox` without an environment).
    Sandbox(SandboxPolicy),
    /// In a container of the task's image (an `environment`), which is then the sandbox too.
    Container(ContainerPolicy),
}

impl Confinement {
    /// `spec` rewritten to run inside, with `workspace` as its workspace.
    pub fn wrap(&self, workspace: &Path, spec: CommandSpec) -> std::io::Result<CommandSpec> {
        match self {
            Self::Host => Ok(spec),
            Self::Sandbox(policy) => policy.wrap(workspace, spec),
            Self::Container(policy) => policy.wrap(workspace, spec),
        }
    }

    /// The same, with `paths` (files inside the workspace) mounted read-only over the
    /// workspace's writable mount: a write to one fails inside. On the host nothing can be
    /// mounted; the caller watches them instead.
    pub fn read_only(self, paths: &[std::path::PathBuf]) -> Self {
        match self {
            Self::Host => Self::Host,
            Self::Sandbox(mut policy) => {
                policy.read_only = paths.to_vec();
                Self::Sandbox(policy)
            }
            Self::Container(mut policy) => {
                policy.read_only = paths.to_vec();
                Self::Container(policy)
            }
        }
    }

    /// Mounts the host folder `host` at `inside`, writable, in a container (a sandbox and the
    /// host see it where it is).
    pub fn bind(self, host: &std::path::Path, inside: &std::path::Path) -> Self {
        match self {
            Self::Container(policy) => {
                Self::Container(policy.bind(host.to_owned(), inside.to_owned(), true))
            }
            other => other,
        }
    }

    /// Whether a wrapped command reached its own program; `false` is the wrapper's failure
    /// (the runtime or bubblewrap could not start it), never the command's.
    pub fn started(&self, ended: &ProcessOutput) -> bool {
        match self {
            Self::Host => true,
            Self::Sandbox(_) => sandbox_started(ended),
            Self::Container(_) => container_started(ended),
        }
    }

    /// Who starts the command, for messages: "the sandbox", "the container runtime".
    pub fn starter(&self) -> &'static str {
        match self {
            Self::Host => "this machine",
            Self::Sandbox(_) => "the sandbox",
            Self::Container(_) => "the container runtime",
        }
    }

    /// The home the command gets, when it has one of its own.
    pub fn home(&self) -> Option<&Path> {
        match self {
            Self::Host => None,
            Self::Sandbox(policy) => Some(&policy.home),
            Self::Container(policy) => Some(&policy.home),
        }
    }

    /// "in the container IMAGE: ", "in the sandbox: " or nothing: where a spawn line says it ran.
    pub fn place(&self) -> String {
        match self {
            Self::Host => String::new(),
            Self::Sandbox(_) => "in the sandbox: ".to_owned(),
            Self::Container(policy) => format!("in the container {}: ", policy.image),
        }
    }

    /// With `path` readable inside (mounted at the same path); nothing changes on the host.
    pub fn readable(self, path: impl Into<std::path::PathBuf>) -> Self {
        match self {
            Self::Host => Self::Host,
            Self::Sandbox(policy) => Self::Sandbox(policy.readable(path)),
            Self::Container(policy) => Self::Container(policy.readable(path)),
        }
    }

    /// With an agent's network: in a container [`Network::in_container`]'s, in the sandbox
    /// [`Network::for_agent`]'s (the host has the host's).
    pub fn agent_network(self, configured: Option<Network>, through_gateway: bool) -> Self {
        match self {
            Self::Host => Self::Host,
            Self::Sandbox(policy) => {
                Self::Sandbox(policy.network(Network::for_agent(configured, through_gateway)))
            }
            Self::Container(policy) => {
                let network = Network::in_container(policy.network, configured, through_gateway);
                Self::Container(policy.network(network))
            }
        }
    }

    /// True when commands run unwrapped on this machine.
    pub fn is_host(&self) -> bool {
        matches!(self, Self::Host)
    }

    /// The container policy, when commands run in the task's container.
    pub fn container(&self) -> Option<&ContainerPolicy> {
        match self {
            Self::Container(policy) => Some(policy),
            _ => None,
        }
    }
}
