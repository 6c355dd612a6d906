//! [`HarnessAgent`]: a real coding-agent CLI wearing the [`CodingAgent`] interface.
//!
//! One run: write the CLI's config files into its private HOME, spawn it in the workspace with
//! stdin closed and a cleared environment ([`invocation`]), feed each stdout line to the kind's
//! [`StreamParser`] as it arrives and emit the events, then resolve the [`CodingResult`] from the
//! parser's verdict, the exit code and what deltabench itself saw (abort, timeout, an enforced
//! turn limit). The raw stdout is kept in `agent.stdout` and stderr in `agent.stderr`, beside the
//! trial's `events.jsonl`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::ParsedRun;
use super::adapter::{CliRun, Finished, RunStart};
use super::config::{HarnessConfig, HarnessKind, TurnLimit};
use super::invocation::{DUMMY_API_KEY, Invocation, RunPaths, invocation};
use super::pricing::{self, price_table};
use super::status::{Seen, run_result};
use crate::agent::builtin::command::{confined_spec, confinement_failure};
use crate::agent::{
    BudgetStop, CodingAgent, CodingError, CodingHandle, CodingOutput, CodingResult, CodingTask,
    ErrorCode, RunContext, StreamEvent, Usage, new_session_id,
};
use crate::process::{self, CommandSpec, StdoutLines};
use crate::workspace::{Confinement, ContainerPolicy, ImageNeed};

/// The CLI's wall-clock limit when neither the agent nor the task sets one: a CLI that waits
/// forever on an unreachable API must not hold the run forever.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// How often a CLI's side output (mini-swe-agent's trajectory file) is re-read while it runs.
const TRAJECTORY_POLL: Duration = Duration::from_millis(500);

/// Where the CLIs are found when `binary:` is not set and they are not on PATH:
/// `$DELTABENCH_AGENT_TOOLS`, else `~/.cache/deltabench/agents` (what `.ci/install-agents` fills).
pub fn agent_tool_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DELTABENCH_AGENT_TOOLS") {
        return Some(PathBuf::from(dir));
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| Some(PathBuf::from(std::env::var_os("HOME")?).join(".cache")))?;
    Some(cache.join("deltabench/agents"))
}

/// Why a CLI's executable was not found: where deltabench looked, and how to install it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProgramError {
    /// `binary:` is a path (the one given) that is missing or not executable: fix the path.
    #[error("`binary: {}` is not an executable file", .0.display())]
    NotExecutable(PathBuf),
    /// `binary:` is a bare name (the one given) that no PATH directory holds.
    #[error("`binary: {}` is not on PATH", .0.display())]
    NotOnPath(PathBuf),
    #[error(
        "cannot find `{program}` on PATH{}; install it (`{install}`, or `bash .ci/install-agents` for every pinned CLI) or set `binary:`",
        tools.as_ref().map(|dir| format!(" or in {}", dir.display())).unwrap_or_default()
    )]
    /// No `binary:`, and the CLI's default executable is neither on PATH nor in the tools
    /// directory: install it.
    NotInstalled {
        /// The executable looked for.
        program: &'static str,
        /// The tools directory searched ([`agent_tool_dir`]), when there is one.
        tools: Option<PathBuf>,
        /// The command that installs the pinned version.
        install: String,
    },
}

/// A harness's config file that could not be written before the CLI ran.
#[derive(Debug, thiserror::Error)]
#[error("cannot {action} {}: {source}", path.display())]
struct ConfigFileError {
    action: &'static str,
    path: PathBuf,
    #[source]
    source: std::io::Error,
}

/// The CLI's executable: `binary` (a path, or a name on PATH), else the kind's program on PATH,
/// else in [`agent_tool_dir`]. The error says where it looked and how to install it.
pub fn find_program(kind: HarnessKind, binary: Option<&Path>) -> Result<PathBuf, ProgramError> {
    let on_path = |name: &Path| -> Option<PathBuf> {
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|dir| dir.join(name))
            .find(|candidate| is_executable(candidate))
    };
    if let Some(binary) = binary {
        if binary.components().count() > 1 {
            return if is_executable(binary) {
                Ok(binary.to_owned())
            } else {
                Err(ProgramError::NotExecutable(binary.to_owned()))
            };
        }
        return on_path(binary).ok_or_else(|| ProgramError::NotOnPath(binary.to_owned()));
    }
    let name = Path::new(kind.program());
    if let Some(found) = on_path(name) {
        return Ok(found);
    }
    let tools = agent_tool_dir();
    if let Some(found) = tools.as_ref().and_then(|dir| {
        ["npm/node_modules/.bin", "venv/bin"]
            .iter()
            .map(|sub| dir.join(sub).join(name))
            .find(|candidate| is_executable(candidate))
    }) {
        return Ok(found);
    }
    Err(ProgramError::NotInstalled {
        program: kind.program(),
        tools,
        install: kind.install_hint(),
    })
}

/// The version of `kind`'s package that `program` belongs to, read from the installation it is
/// part of (`node_modules/PKG/package.json`, a virtualenv's `PKG-VERSION.dist-info`); `None`
/// when it belongs to neither.
pub fn installed_version(kind: HarnessKind, program: &Path) -> Option<String> {
    let package = kind.package()?;
    let real = program.canonicalize().ok();
    let candidates = std::iter::once(program).chain(real.as_deref());
    for path in candidates {
        for dir in path.ancestors() {
            if dir.file_name().is_some_and(|n| n == "node_modules") {
                let manifest = dir.join(package.name).join("package.json");
                if let Some(version) = std::fs::read_to_string(manifest)
                    .ok()
                    .and_then(|text| serde_json::from_str::<Value>(&text).ok())
                    .and_then(|json| json.get("version")?.as_str().map(str::to_owned))
                {
                    return Some(version);
                }
            }
            if dir.join("pyvenv.cfg").is_file() {
                let prefix = format!("{}-", package.name.replace('-', "_"));
                let libs = std::fs::read_dir(dir.join("lib")).into_iter().flatten();
                for lib in libs.flatten() {
                    let site = lib.path().join("site-packages");
                    for entry in std::fs::read_dir(site).into_iter().flatten().flatten() {
                        let name = entry.file_name().to_string_lossy().into_owned();
                        if let Some(version) = name
                            .strip_prefix(&prefix)
                            .and_then(|rest| rest.strip_suffix(".dist-info"))
                        {
                            return Some(version.to_owned());
                        }
                    }
                }
            }
        }
    }
    None
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether `url` points at this machine, where a dummy API key is fine.
pub fn is_loopback(url: &str) -> bool {
    let host = url
        .split("://")
        .nth(1)
        .unwrap_or(url)
        .split(['/', '?'])
        .next()
        .unwrap_or_default();
    let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
    host == "localhost" || host == "[::1]" || host.starts_with("127.")
}

/// A real CLI agent bound to one workspace.
#[derive(Debug, Clone)]
pub struct HarnessAgent {
    name: String,
    kind: HarnessKind,
    config: HarnessConfig,
    program: PathBuf,
    endpoint: Option<String>,
    workspace: PathBuf,
    scratch: PathBuf,
    confinement: Confinement,
    budget: Option<BudgetStop>,
    /// The endpoint is deltabench's gateway, which holds the real key.
    gateway: bool,
}

impl HarnessAgent {
    /// `scratch` must exist outside the workspace: it receives the CLI's HOME (`home/`, kept so
    /// a later run can resume) and the raw output. `endpoint` is the resolved root URL (for a
    /// `scripted:` endpoint, the started server's).
    pub fn new(
        name: &str,
        kind: HarnessKind,
        config: HarnessConfig,
        program: PathBuf,
        workspace: PathBuf,
        scratch: PathBuf,
        endpoint: Option<String>,
    ) -> Self {
        // Relative paths would resolve inside the workspace, where the CLI runs.
        let absolute = |path: PathBuf| std::path::absolute(&path).unwrap_or(path);
        Self {
            name: name.to_owned(),
            kind,
            config,
            program: absolute(program),
            endpoint,
            workspace: absolute(workspace),
            scratch: absolute(scratch),
            confinement: Confinement::Host,
            budget: None,
            gateway: false,
        }
    }

    /// Points the CLI at deltabench's gateway (`url`, the trial's root there) with a
    /// placeholder key, and stops it when `stop` trips (the gateway refused a call past the
    /// budget); the run then resolves `budget_exceeded`.
    pub fn through_gateway(mut self, url: String, stop: BudgetStop) -> Self {
        self.endpoint = Some(url);
        self.gateway = true;
        self.budget = Some(stop);
        self
    }

    /// Runs the CLI confined (whose home must be this agent's [`Self::home`]) with the agent's
    /// network there (so call it after [`Self::through_gateway`]): in the task's container its
    /// installation is mounted read-only at its host paths ([`container_mounts`]), in the
    /// sandbox it is readable ([`install_roots`]).
    pub fn confined(mut self, confinement: Confinement) -> Self {
        let roots = match &confinement {
            Confinement::Host => Vec::new(),
            Confinement::Sandbox(_) => install_roots(&self.program),
            Confinement::Container(_) => container_mounts(&self.program),
        };
        let mut confinement = confinement.agent_network(self.config.network, self.gateway);
        for root in roots {
            confinement = confinement.readable(root);
        }
        self.confinement = confinement;
        self
    }

    /// The CLI's wall-clock limit: the configured one, else 30 minutes.
    pub fn timeout(&self) -> Duration {
        self.config.timeout.unwrap_or(DEFAULT_TIMEOUT)
    }

    /// The CLI's private HOME.
    pub fn home(&self) -> PathBuf {
        self.scratch.join("home")
    }

    fn api_key(&self) -> Option<String> {
        if self.gateway {
            return Some(DUMMY_API_KEY.to_owned());
        }
        if let Some(key) = &self.config.api_key {
            return Some(key.clone());
        }
        match &self.endpoint {
            Some(url) if is_loopback(url) => Some(DUMMY_API_KEY.to_owned()),
            _ => std::env::var(self.config.key_env(self.kind)).ok(),
        }
    }

    /// Why a run asking to `resume` cannot, when this CLI keeps no session it can continue.
    fn resume_refusal(&self, resume: Option<&str>) -> Option<CodingError> {
        let kind = self.kind;
        (resume.is_some() && !kind.can_resume()).then(|| {
            let why = kind.cli().map_or("it keeps no session of its own", |cli| {
                cli.no_resume_reason()
            });
            CodingError::new(
                ErrorCode::SdkError,
                format!("{kind} cannot resume a session: {why}; run the task without a session_id"),
            )
        })
    }

    async fn execute(self, ctx: RunContext, task: String, resume: Option<String>) -> CodingResult {
        let kind = self.kind;
        let fallback_session = resume.clone().unwrap_or_else(new_session_id);
        if let Some(refusal) = self.resume_refusal(resume.as_deref()) {
            return CodingResult::failed(fallback_session, refusal);
        }
        let (home, api_key) = (self.home(), self.api_key());
        let run = RunPaths {
            task: &task,
            resume: resume.as_deref(),
            new_session: &fallback_session,
            home: &home,
            workspace: &self.workspace,
            scratch: &self.scratch,
            endpoint: self.endpoint.as_deref(),
            api_key: api_key.as_deref(),
        };
        let inv = invocation(kind, &self.config, &run);
        let (lines_tx, lines) = mpsc::unbounded_channel();
        let spec = self
            .prepare(&inv)
            .map_err(|err| CodingError::new(ErrorCode::SdkError, err.to_string()))
            .and_then(|()| self.command_spec(&inv, lines_tx));
        let spec = match spec {
            Ok(spec) => spec,
            Err(err) => return CodingResult::failed(fallback_session, err),
        };
        ctx.emit(self.spawn_event(&inv)).await;
        let mut cli = self.config.adapter(kind).begin(&RunStart {
            home: &home,
            workspace: &self.workspace,
            resume: resume.as_deref(),
            trajectory: inv.trajectory.as_deref(),
        });
        let mut watch = Watch::new(&self, &ctx);
        let (ended, budget_heard) = self.drive(&ctx, &spec, &mut cli, &mut watch, lines).await;
        let ended = match ended {
            Ok(ended) => ended,
            Err(err) => {
                let message = format!("cannot start {}: {err}", self.program.display());
                let error = CodingError::new(ErrorCode::SdkError, message);
                return CodingResult::failed(fallback_session, error);
            }
        };
        ctx.emit(exit_event(&ended)).await;
        if let Some(failed) = confinement_failure(&self.confinement, &fallback_session, &ended) {
            return failed;
        }
        let local_price = cli.echoes_local_price();
        let (parsed, session) = self.finish(cli, &ended, resume, fallback_session);
        let model = inv.model.clone().or(watch.model.clone());
        let usage = self
            .usage(&ctx, &parsed, model.as_deref(), local_price)
            .await;
        let seen = self.seen(&ctx, &ended, &watch, budget_heard).await;
        let mut result = run_result(session, seen, &parsed);
        result.usage = usage;
        result.output = CodingOutput {
            text: parsed.text,
            modified_files: parsed.modified_files,
            metadata: BTreeMap::from([
                ("cli".to_owned(), json!(kind)),
                ("exit_code".to_owned(), json!(ended.exit_code)),
                ("tool_calls".to_owned(), json!(watch.tool_calls)),
            ]),
        };
        result
    }

    /// What deltabench saw of the run; a spent budget the run loop did not hear of yet (and
    /// that decides the run) is said now.
    async fn seen(
        &self,
        ctx: &RunContext,
        ended: &process::ProcessOutput,
        watch: &Watch,
        budget_heard: bool,
    ) -> Seen {
        let seen = Seen {
            cancelled: ctx.cancel.is_cancelled(),
            timed_out: ended.timed_out.then(|| {
                let limit = humantime::format_duration(self.timeout());
                format!("{} exceeded its timeout of {limit}", self.kind)
            }),
            budget_stop: self.budget.as_ref().and_then(BudgetStop::tripped),
            turn_limit_hit: watch.turn_limit_hit,
        };
        if let (false, None, Some(reason)) = (seen.cancelled, &seen.timed_out, &seen.budget_stop)
            && !budget_heard
            && !crate::agent::is_replay_mismatch(reason)
        {
            ctx.emit(crate::agent::stop_event(reason)).await;
        }
        seen
    }

    /// The CLI's verdict once it exited, with the run's session (the one it named, else the
    /// one resumed, else `fallback`), and what the CLI's module does once that is known.
    fn finish(
        &self,
        cli: Box<dyn CliRun>,
        ended: &process::ProcessOutput,
        resume: Option<String>,
        fallback: String,
    ) -> (ParsedRun, String) {
        let Finished { parsed, after } = cli.finish(ended.exit_code, &ended.output.text());
        let parsed = parsed.relative_to(match self.confinement.container() {
            // The CLI saw the workspace at the workdir.
            Some(policy) => &policy.workdir,
            None => &self.workspace,
        });
        let session = (parsed.session_id.clone().or(resume)).unwrap_or(fallback);
        if let Some(after) = after {
            after(&session);
        }
        (parsed, session)
    }

    /// The command that runs the CLI: cleared environment, its timeout and logs, confined.
    fn command_spec(
        &self,
        inv: &Invocation,
        lines: mpsc::UnboundedSender<String>,
    ) -> Result<CommandSpec, CodingError> {
        let mut spec = CommandSpec::argv(
            std::iter::once(self.program.clone().into_os_string())
                .chain(inv.args.iter().map(Into::into)),
            &self.workspace,
        )
        .clear_env()
        .timeout(Some(self.timeout()))
        .log_path(Some(self.scratch.join("agent.stderr")))
        .stdout_lines(StdoutLines {
            raw_path: self.scratch.join("agent.stdout"),
            lines,
        });
        for (key, value) in &inv.env {
            // In a container the image's PATH finds the task's tools; the CLI is run by its path.
            if self.confinement.container().is_some() && key == "PATH" {
                continue;
            }
            spec = spec.env(key, value);
        }
        match self.confinement.container() {
            Some(policy) => self.contained_spec(policy, inv, spec),
            None => confined_spec(&self.confinement, &self.workspace, spec),
        }
    }

    fn spawn_event(&self, inv: &Invocation) -> StreamEvent {
        StreamEvent::System {
            subtype: "spawn".into(),
            message: format!(
                "{}{} {}",
                self.confinement.place(),
                self.program.display(),
                inv.args.join(" ")
            ),
            data: Some(json!({ "cli": self.kind, "endpoint": self.endpoint })),
        }
    }

    /// Runs the CLI to its end, feeding its lines (and its side output, polled) to `cli` and
    /// stopping it when its budget is spent; returns how it ended and whether the budget's
    /// stop was already said.
    async fn drive(
        &self,
        ctx: &RunContext,
        spec: &CommandSpec,
        cli: &mut Box<dyn CliRun>,
        watch: &mut Watch,
        mut lines: mpsc::UnboundedReceiver<String>,
    ) -> (std::io::Result<process::ProcessOutput>, bool) {
        let stop = watch.stop.clone();
        let run = process::run(spec, &stop);
        tokio::pin!(run);
        let mut poll = tokio::time::interval(TRAJECTORY_POLL);
        let budget = self.budget.clone().unwrap_or_default();
        let mut budget_heard = self.budget.is_none();
        let ended = loop {
            tokio::select! {
                ended = &mut run => break ended,
                () = budget.wait(), if !budget_heard => {
                    budget_heard = true;
                    stop.cancel();
                    let reason = budget.tripped().unwrap_or_default();
                    ctx.emit(crate::agent::stop_event(&reason)).await;
                }
                Some(line) = lines.recv() => {
                    let events = cli.line(&line);
                    watch.emit_all(ctx, events).await;
                }
                _ = poll.tick() => {
                    let events = cli.poll();
                    watch.emit_all(ctx, events).await;
                }
            }
        };
        while let Ok(line) = lines.try_recv() {
            let events = cli.line(&line);
            watch.emit_all(ctx, events).await;
        }
        let events = cli.poll();
        watch.emit_all(ctx, events).await;
        (ended, budget_heard)
    }

    /// The run's usage, priced; a model with no price is warned of.
    async fn usage(
        &self,
        ctx: &RunContext,
        parsed: &ParsedRun,
        model: Option<&str>,
        local_price: bool,
    ) -> Option<Usage> {
        let usage = parsed
            .usage
            .clone()
            .map(|usage| self.priced(usage, model, local_price));
        if let Some(usage) = &usage
            && usage.cost_usd.is_none()
        {
            ctx.emit(StreamEvent::System {
                subtype: "warning".into(),
                message: format!(
                    "no price for model {} in deltabench's price table (checked {}); set \
                     `price:` on the agent to estimate its cost",
                    model.unwrap_or("(unnamed)"),
                    price_table().checked
                ),
                data: None,
            })
            .await;
        }
        usage
    }

    /// `spec` wrapped in `policy`'s container, with the files of the trial the invocation names
    /// outside the CLI's home (mini-swe-agent's trajectory, aider's history files) created and
    /// mounted read-write at their paths.
    fn contained_spec(
        &self,
        policy: &ContainerPolicy,
        inv: &Invocation,
        spec: CommandSpec,
    ) -> Result<CommandSpec, CodingError> {
        let fail = |err: std::io::Error| {
            CodingError::new(
                ErrorCode::SdkError,
                format!("cannot prepare the container's files: {err}"),
            )
        };
        let mut policy = policy.clone();
        for path in scratch_files(inv, &self.scratch, &self.home()) {
            if !path.exists() {
                std::fs::File::create(&path).map_err(fail)?;
            }
            policy = policy.writable(path);
        }
        policy.wrap(&self.workspace, spec).map_err(fail)
    }

    /// Writes the invocation's config files.
    fn prepare(&self, inv: &Invocation) -> Result<(), ConfigFileError> {
        let failed = |action, path: &Path| {
            let path = path.to_owned();
            move |source| ConfigFileError {
                action,
                path,
                source,
            }
        };
        let write = |path: &Path, text: &str| -> Result<(), ConfigFileError> {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(failed("create", dir))?;
            }
            std::fs::write(path, text).map_err(failed("write", path))
        };
        let home = self.home();
        std::fs::create_dir_all(&home).map_err(failed("create", &home))?;
        for (path, text) in &inv.files {
            write(path, text)?;
        }
        Ok(())
    }

    /// Prices `usage` when the CLI reported no cost (or only echoed a zero price from the local
    /// config deltabench wrote).
    fn priced(&self, mut usage: Usage, model: Option<&str>, local_price: bool) -> Usage {
        if local_price && usage.cost_usd == Some(0.0) {
            usage.cost_usd = None;
        }
        pricing::estimate(&mut usage, model, self.config.price);
        usage
    }
}

impl CodingAgent for HarnessAgent {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        self.kind.description()
    }

    fn run(&self, task: CodingTask) -> CodingHandle {
        let agent = self.clone();
        let (text, resume) = (task.task.clone(), task.session_id.clone());
        CodingHandle::spawn(&self.name, &task, false, move |ctx| {
            agent.execute(ctx, text, resume)
        })
    }
}

/// What the adapter itself watches in the stream.
struct Watch {
    /// `max_turns` when deltabench enforces it (the CLI has no limit of its own).
    enforced_turns: Option<u32>,
    tool_calls: u32,
    turn_limit_hit: bool,
    /// The model the CLI said it uses (its init event), for pricing.
    model: Option<String>,
    stop: tokio_util::sync::CancellationToken,
}

/// The `exit` event: how the CLI's process ended.
fn exit_event(ended: &process::ProcessOutput) -> StreamEvent {
    StreamEvent::System {
        subtype: "exit".into(),
        message: ended.ending(),
        data: Some(json!({
            "exit_code": ended.exit_code,
            "signal": ended.signal,
            "timed_out": ended.timed_out,
            "leaked": ended.leaked,
        })),
    }
}

impl Watch {
    fn new(agent: &HarnessAgent, ctx: &RunContext) -> Self {
        Self {
            enforced_turns: (agent.config.turn_limit(agent.kind) == TurnLimit::Enforced)
                .then_some(agent.config.max_turns)
                .flatten(),
            tool_calls: 0,
            turn_limit_hit: false,
            model: None,
            stop: ctx.cancel.child_token(),
        }
    }

    async fn emit_all(&mut self, ctx: &RunContext, events: Vec<StreamEvent>) {
        for event in events {
            match &event {
                StreamEvent::ToolCall { .. } => {
                    self.tool_calls += 1;
                    if let Some(limit) = self.enforced_turns
                        && self.tool_calls > limit
                        && !self.turn_limit_hit
                    {
                        self.turn_limit_hit = true;
                        self.stop.cancel();
                        ctx.emit(StreamEvent::System {
                            subtype: "max_turns".into(),
                            message: format!(
                                "stopped at tool call {} (max_turns: {limit})",
                                self.tool_calls
                            ),
                            data: None,
                        })
                        .await;
                    }
                }
                StreamEvent::System {
                    subtype,
                    data: Some(data),
                    ..
                } if subtype == "init" && self.model.is_none() => {
                    self.model = data.get("model").and_then(Value::as_str).map(str::to_owned);
                }
                _ => {}
            }
            ctx.emit(event).await;
        }
    }
}

/// The files of the trial's own folder (`scratch`, outside `home`) that the invocation's
/// arguments name: the CLI writes or reads them, so a container mounts them.
fn scratch_files(inv: &Invocation, scratch: &Path, home: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = inv
        .args
        .iter()
        .map(|arg| match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => value,
            _ => arg.as_str(),
        })
        .map(PathBuf::from)
        .filter(|path| path.starts_with(scratch) && !path.starts_with(home) && path != scratch)
        .collect();
    files.extend(inv.trajectory.iter().cloned());
    files.sort();
    files.dedup();
    files
}

/// What of a CLI's installation a container mounts at its host paths: the folders
/// [`install_roots`] finds, but never a system folder (`/usr`, `/usr/local/bin`, ...), which
/// would cover the image's own; a CLI or Python installed there must be in the image.
pub fn container_mounts(program: &Path) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = install_roots(program)
        .into_iter()
        .filter(|path| mountable_in_container(path))
        .collect();
    roots.sort();
    roots.dedup();
    roots
}

/// Whether a host path may be mounted at the same path in a task's container: a file, or a
/// folder that is not a system folder (mounting the host's `/usr/bin` would cover the image's).
pub fn mountable_in_container(path: &Path) -> bool {
    path.is_file() || !is_system_folder(path)
}

fn is_system_folder(path: &Path) -> bool {
    const TOPS: [&str; 14] = [
        "usr", "bin", "sbin", "lib", "lib32", "lib64", "etc", "opt", "var", "run", "tmp", "proc",
        "sys", "dev",
    ];
    let parts: Vec<String> = path
        .components()
        .skip(1)
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    match parts.first() {
        None => true,
        Some(top) if TOPS.contains(&top.as_str()) => {
            // `/usr/bin`, `/usr/local/lib`: shared by everything in the image.
            let shared = ["bin", "sbin", "lib", "lib64", "share", "include", "local"];
            parts.len() == 1
                || (parts.len() == 2 && shared.contains(&parts[1].as_str()))
                || (parts.len() == 3 && parts[1] == "local" && shared.contains(&parts[2].as_str()))
        }
        Some(_) => false,
    }
}

/// Node.js of at least `major`, which `kind`'s code needs.
fn node_need(kind: HarnessKind, major: u32) -> ImageNeed {
    ImageNeed {
        tool: format!("Node.js {major} or newer"),
        why: format!("{kind}'s code does not parse on older versions"),
        test: format!("node -e 'process.exit(parseInt(process.versions.node) >= {major} ? 0 : 1)'"),
        hint: format!("install Node.js {major} or newer in the image (Debian 12's nodejs is 18)"),
    }
}

/// What `program` (the CLI `kind` runs) needs from an image besides its installation, which
/// is mounted: the interpreter its `#!` line names (`node` for Codex and Gemini CLI), or for a
/// virtualenv's script its Python, which must run there. A native program needs nothing.
pub fn image_needs(kind: HarnessKind, program: &Path) -> Vec<ImageNeed> {
    let real = program
        .canonicalize()
        .unwrap_or_else(|_| program.to_owned());
    let mut head = [0u8; 256];
    let read = std::fs::File::open(&real)
        .and_then(|mut file| std::io::Read::read(&mut file, &mut head))
        .unwrap_or(0);
    let head = &head[..read];
    let Some(line) = head
        .strip_prefix(b"#!")
        .and_then(|rest| rest.split(|&b| b == b'\n').next())
    else {
        return Vec::new();
    };
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    let Some(interpreter) = words.next() else {
        return Vec::new();
    };
    let name = if Path::new(interpreter)
        .file_name()
        .is_some_and(|n| n == "env")
    {
        words.find(|w| !w.starts_with('-')).map(str::to_owned)
    } else {
        None
    };
    let shown = program.display();
    if let Some(name) = name {
        let mut needs = vec![ImageNeed {
            tool: name.clone(),
            why: format!("{shown} is a `#!/usr/bin/env {name}` script"),
            test: format!("command -v {}", crate::support::shell_quote(&name)),
            hint: match name.as_str() {
                "node" => "add Node.js to the image (Debian: apt-get install nodejs)".to_owned(),
                other => format!("install {other} in the image, on its PATH"),
            },
        }];
        if name == "node"
            && let Some(major) = kind.cli().and_then(|cli| cli.min_node())
        {
            needs.push(node_need(kind, major));
        }
        return needs;
    }
    let interpreter = Path::new(interpreter);
    let venv = interpreter
        .ancestors()
        .find(|dir| dir.join("pyvenv.cfg").is_file());
    match venv {
        Some(venv) => {
            let cfg = std::fs::read_to_string(venv.join("pyvenv.cfg")).unwrap_or_default();
            let field = |key: &str| {
                cfg.lines()
                    .filter_map(|line| line.split_once('='))
                    .find(|(k, _)| k.trim() == key)
                    .map(|(_, v)| v.trim().to_owned())
                    .unwrap_or_default()
            };
            let (version, home) = (field("version"), field("home"));
            let system = is_system_folder(Path::new(&home))
                || Path::new(&home).parent().is_some_and(is_system_folder);
            vec![ImageNeed {
                tool: format!("Python {version}"),
                why: format!(
                    "{shown} runs in the virtualenv {}, made from the Python in {home}",
                    venv.display()
                ),
                test: format!(
                    "{} -c 'import ssl'",
                    crate::support::shell_quote(&interpreter.to_string_lossy())
                ),
                hint: if system {
                    format!(
                        "install Python {version} in the image at {home}, or make the virtualenv from a Python outside the system folders (it is then mounted)"
                    )
                } else {
                    format!(
                        "the Python in {home} is mounted but does not run there: use an image whose C library is at least as new as this machine's"
                    )
                },
            }]
        }
        None => vec![ImageNeed {
            tool: interpreter.display().to_string(),
            why: format!("{shown} is a `#!{}` script", interpreter.display()),
            test: format!(
                "test -x {}",
                crate::support::shell_quote(&interpreter.to_string_lossy())
            ),
            hint: format!("install {} in the image", interpreter.display()),
        }],
    }
}

/// What a sandboxed CLI must be able to read: its whole installation (the `node_modules` or
/// virtualenv its launcher belongs to), not just the launcher, and for a virtualenv the Python
/// installation its interpreter links to (`home =` in `pyvenv.cfg`).
fn install_roots(program: &Path) -> Vec<PathBuf> {
    // A launcher that links elsewhere (gptme's, into its own virtualenv) is shown by the folder
    // holding it; bubblewrap cannot mount over a symlink.
    let launcher = if program.is_symlink() {
        program
            .canonicalize()
            .unwrap_or_else(|_| program.to_owned())
    } else {
        program.to_owned()
    };
    let mut roots = vec![launcher];
    for candidate in [
        program.to_owned(),
        program.canonicalize().unwrap_or_default(),
    ] {
        let Some(root) = candidate.ancestors().find(|dir| {
            dir.file_name().is_some_and(|n| n == "node_modules") || dir.join("pyvenv.cfg").is_file()
        }) else {
            roots.extend(candidate.parent().map(Path::to_owned));
            continue;
        };
        roots.push(root.to_owned());
        let python_home = std::fs::read_to_string(root.join("pyvenv.cfg"))
            .ok()
            .and_then(|cfg| {
                cfg.lines()
                    .filter_map(|line| line.split_once('='))
                    .find(|(key, _)| key.trim() == "home")
                    .map(|(_, value)| PathBuf::from(value.trim()))
            });
        if let Some(bin) = python_home {
            // `home` is the interpreter's bin dir; the standard library sits beside it.
            roots.extend(bin.parent().map(Path::to_owned));
            roots.push(bin);
        }
    }
    roots
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(name: &str) -> HarnessKind {
        HarnessKind::parse(name).unwrap()
    }

    #[test]
    fn loopback_urls_get_the_dummy_key() {
        assert!(is_loopback("http://127.0.0.1:8765"));
        assert!(is_loopback("http://localhost:1/v1"));
        assert!(is_loopback("http://[::1]:80"));
        assert!(!is_loopback("https://api.anthropic.com"));
    }

    #[test]
    fn a_missing_program_names_where_it_looked_and_how_to_install() {
        let err = find_program(kind("aider"), Some(Path::new("/nonexistent/aider"))).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/aider"), "{err}");
        let err = find_program(kind("codex"), Some(Path::new("no-such-codex-binary"))).unwrap_err();
        assert!(err.to_string().contains("not on PATH"), "{err}");
        assert!(find_program(kind("codex"), Some(Path::new("sh"))).is_ok());
    }

    #[test]
    fn a_container_never_mounts_a_system_folder() {
        for system in [
            "/",
            "/usr",
            "/usr/bin",
            "/usr/local/bin",
            "/usr/local",
            "/opt",
            "/lib64",
        ] {
            assert!(is_system_folder(Path::new(system)), "{system}");
        }
        for own in [
            "/root/.pyenv/versions/3.11.7",
            "/root/.cache/deltabench/agents/npm/node_modules",
            "/usr/lib/node_modules",
            "/opt/node",
        ] {
            assert!(!is_system_folder(Path::new(own)), "{own}");
        }
    }

    #[test]
    fn image_needs_follow_the_programs_interpreter() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let node = write("codex.js", "#!/usr/bin/env node\nconsole.log(1)\n");
        let needs = image_needs(kind("codex"), &node);
        assert_eq!(needs.len(), 1, "{needs:?}");
        assert_eq!(needs[0].tool, "node");
        assert_eq!(needs[0].test, "command -v node");
        // Gemini CLI also needs a recent Node.js.
        assert_eq!(image_needs(kind("gemini-cli"), &node).len(), 2);
        let native = write("claude.exe", "\x7fELF\x02\x01\x01");
        assert_eq!(image_needs(kind("claude-code"), &native), []);
        // A virtualenv's script: its Python must run in the image.
        let venv = dir.path().join("venv");
        std::fs::create_dir_all(venv.join("bin")).unwrap();
        std::fs::write(
            venv.join("pyvenv.cfg"),
            "home = /usr/bin\nversion = 3.11.2\n",
        )
        .unwrap();
        let python = venv.join("bin/python3");
        let aider = write("aider", &format!("#!{}\nimport aider\n", python.display()));
        let needs = image_needs(kind("aider"), &aider);
        assert_eq!(needs.len(), 1, "{needs:?}");
        assert_eq!(needs[0].tool, "Python 3.11.2");
        assert!(
            needs[0].test.ends_with("/venv/bin/python3 -c 'import ssl'"),
            "{needs:?}"
        );
        assert!(needs[0].hint.contains("at /usr/bin"), "{needs:?}");
    }
}
