//! One task of a suite file: each of its values checked on its own, the default filled in.

use std::path::PathBuf;
use std::time::Duration;

use serde_saphyr::Spanned;
use strum::VariantNames as _;

use super::diagnostics::{Errors, Source, SuiteError};
use super::environment::environment;
use super::names::{is_safe_name, resolve_command};
use super::raw::{RawDefaults, RawMetric, RawSuite, RawTask, RawVerify, loc};
use super::read::Lost;
use super::types::{Located, MetricKind, MetricSpec, Task};
use crate::delta::VerifySpec;
use crate::support::parse_duration;
use crate::workspace::{Environment, Isolation, Overlay};

/// The default grader timeout.
const GRADER_TIMEOUT: Duration = Duration::from_secs(60);

/// One task, each of its values checked; None when any is wrong, every error kept.
pub(super) fn task(
    source: &Source,
    raw: &RawSuite,
    lost: &Lost,
    t: &RawTask,
    errors: &mut Errors,
) -> Option<Task> {
    let check = Check {
        source,
        suite: raw,
        defaults: &raw.defaults,
        t,
        id: &t.id.value,
        lost,
        lost_keys: lost.keys_near(loc(&t.id)),
    };
    let found = errors.count();
    errors.keep(check.id());
    let instruction = check.instruction(errors);
    let base = check.base();
    let tests = errors.keep(check.overlay(&t.tests, "tests"));
    let solution = errors.keep(check.overlay(&t.solution, "solution"));
    let verify = check.verify(errors);
    let metric = errors.keep(check.metric());
    let isolation = errors.keep(check.isolation());
    let environment = check.environment(errors);
    // What needs a container is checked once the environment is known to be sound.
    if let (Some(verify), Some(environment)) = (&verify, &environment) {
        check.container_needs(verify, environment.as_ref(), errors);
    }
    let timeout = errors.keep(check.timeout());
    let in_container = environment.as_ref().map(Option::is_some);
    let prepare = errors
        .keep(check.prepare(isolation, in_container))
        .flatten();
    let solution_script = errors.keep(check.solution_script());
    if errors.count() > found {
        return None;
    }
    Some(Task {
        id: check.id.to_owned(),
        instruction: instruction?,
        base,
        setup: check.setup(),
        prepare: prepare?,
        tests: tests?,
        protected: t.protected.clone(),
        verify: verify?,
        solution: solution?,
        solution_script: solution_script?,
        metric: metric?,
        tags: check.tags(),
        timeout: timeout?,
        isolation: isolation?,
        environment: environment?,
        mutants: check.mutants(),
    })
}

/// A task as written, with what it needs to check each of its values.
struct Check<'a> {
    source: &'a Source<'a>,
    suite: &'a RawSuite,
    defaults: &'a RawDefaults,
    t: &'a RawTask,
    id: &'a str,
    lost: &'a Lost,
    /// Whether the task lost keys for their errors: such a key is not also missing.
    lost_keys: bool,
}

impl Check<'_> {
    fn id(&self) -> Result<(), SuiteError> {
        if is_safe_name(self.id) {
            return Ok(());
        }
        Err(self.source.at(
            &self.t.id,
            format!(
                "task id '{}' is not allowed: use letters, digits, '.', '_' and '-'",
                self.id
            ),
        ))
    }

    /// `instruction` or `instruction_file`, exactly one, not blank.
    fn instruction(&self, errors: &mut Errors) -> Option<String> {
        let (source, t, id) = (self.source, self.t, self.id);
        let instruction = match (&t.instruction, &t.instruction_file) {
            (Some(text), None) => Some(text.value.clone()),
            (None, Some(file)) => errors.keep(instruction_file(source, file)),
            (Some(_), Some(file)) => {
                errors.push(source.at(
                    file,
                    format!("task '{id}' sets both `instruction` and `instruction_file`; keep one"),
                ));
                None
            }
            (None, None) => {
                if !self.lost_keys {
                    errors.push(source.at(
                        &t.id,
                        format!("task '{id}' has no `instruction` or `instruction_file`"),
                    ));
                }
                None
            }
        };
        if instruction
            .as_ref()
            .is_some_and(|text| text.trim().is_empty())
        {
            errors.push(source.at(&t.id, format!("task '{id}' has an empty instruction")));
        }
        instruction
    }

    /// The task's base, else the defaults', else the suite's, else `HEAD` (located at `repo`).
    fn base(&self) -> Located<String> {
        let written = (self.t.base.as_ref())
            .or(self.defaults.base.as_ref())
            .or(self.suite.base.as_ref());
        let (value, (line, column)) = match written {
            Some(b) => (b.value.clone(), loc(b)),
            None => ("HEAD".into(), loc(&self.suite.repo)),
        };
        Located {
            value,
            line,
            column,
        }
    }

    /// `tests` or `solution`: an existing folder or patch.
    fn overlay(
        &self,
        field: &Option<Spanned<String>>,
        what: &str,
    ) -> Result<Option<Overlay>, SuiteError> {
        field
            .as_ref()
            .map(|p| self.source.existing_path(p, what).map(Overlay::from_path))
            .transpose()
    }

    fn verify_at(&self) -> Option<&Spanned<RawVerify>> {
        self.t.verify.as_ref().or(self.defaults.verify.as_ref())
    }

    /// `verify`, on the task or under `defaults:`.
    fn verify(&self, errors: &mut Errors) -> Option<VerifySpec> {
        if let Some(v) = self.verify_at() {
            return errors.keep(verify_spec(self.source, v));
        }
        if !self.lost_keys && !self.lost.under("defaults") {
            errors.push(self.source.at(
                &self.t.id,
                format!(
                    "task '{}' has no `verify` command; set it on the task or under `defaults:`",
                    self.id
                ),
            ));
        }
        None
    }

    fn metric(&self) -> Result<MetricSpec, SuiteError> {
        match self.t.metric.as_ref().or(self.defaults.metric.as_ref()) {
            Some(m) => metric_spec(self.source, m),
            None => Ok(MetricSpec::Delta),
        }
    }

    fn isolation(&self) -> Result<Isolation, SuiteError> {
        match self
            .t
            .isolation
            .as_ref()
            .or(self.defaults.isolation.as_ref())
        {
            Some(s) => {
                (s.value.parse::<Isolation>()).map_err(|err| self.source.at(s, format!("{err}")))
            }
            None => Ok(Isolation::Worktree),
        }
    }

    /// The task's `environment:`, else the defaults': a task's mapping replaces the default's
    /// whole, with no key-by-key merge. Some(None) when neither sets one.
    fn environment(&self, errors: &mut Errors) -> Option<Option<Environment>> {
        match (self.t.environment.as_ref()).or(self.defaults.environment.as_ref()) {
            Some(e) => environment(self.source, e, self.lost, errors).map(Some),
            None => Some(None),
        }
    }

    /// `in_place` and an absolute `reward` folder need a container.
    fn container_needs(
        &self,
        verify: &VerifySpec,
        environment: Option<&Environment>,
        errors: &mut Errors,
    ) {
        let (Some(at), None) = (self.verify_at(), environment) else {
            return;
        };
        let id = self.id;
        if verify.in_place {
            errors.push(self.source.at(
                at,
                format!(
                    "task '{id}' sets `in_place: true`, which runs verify in the agent's own container, and has no `environment:`; give it one, or drop `in_place`"
                ),
            ));
        }
        if let Some(reward) = &verify.reward
            && reward.is_absolute()
        {
            errors.push(self.source.at(
                at,
                format!(
                    "task '{id}' reads its reward from {}, a container path, and has no `environment:`; give it one, or name a folder of the workspace (such as .deltabench/logs/verifier)",
                    reward.display()
                ),
            ));
        }
    }

    fn timeout(&self) -> Result<Option<Duration>, SuiteError> {
        (self.t.timeout.as_ref())
            .or(self.defaults.timeout.as_ref())
            .map(|d| self.source.duration(d))
            .transpose()
    }

    fn setup(&self) -> Option<String> {
        (self.t.setup.as_ref())
            .or(self.defaults.setup.as_ref())
            .map(|s| s.value.clone())
    }

    /// `prepare`, as written or by default (true in a container, unless under `session`);
    /// Ok(None) when the isolation or environment it defaults from is wrong.
    fn prepare(
        &self,
        isolation: Option<Isolation>,
        in_container: Option<bool>,
    ) -> Result<Option<bool>, SuiteError> {
        match (self.t.prepare.as_ref()).or(self.defaults.prepare.as_ref()) {
            Some(p) if p.value && isolation == Some(Isolation::Session) => Err(self.source.at(
                p,
                "`prepare: true` needs a cached template, which the `session` strategy never uses \
                 (it works in your own tree); use `worktree` or `sandbox`, or drop `prepare`",
            )),
            Some(p) => Ok(Some(p.value)),
            None => Ok(isolation.and_then(|isolation| {
                in_container.map(|in_container| in_container && isolation != Isolation::Session)
            })),
        }
    }

    /// `solution_script`: a file, and not beside a `solution`.
    fn solution_script(&self) -> Result<Option<PathBuf>, SuiteError> {
        let Some(script) = &self.t.solution_script else {
            return Ok(None);
        };
        if self.t.solution.is_some() {
            return Err(self.source.at(
                script,
                "the task sets both `solution` and `solution_script`; keep one",
            ));
        }
        let path = self.source.existing_path(script, "solution_script")?;
        if !path.is_file() {
            return Err(self.source.at(
                script,
                format!("solution_script '{}' is not a file", script.value),
            ));
        }
        Ok(Some(path.canonicalize().unwrap_or(path)))
    }

    /// The defaults' tags, then the task's own that are new.
    fn tags(&self) -> Vec<String> {
        let mut tags = self.defaults.tags.clone().unwrap_or_default();
        for tag in self.t.tags.iter().flatten() {
            if !tags.contains(tag) {
                tags.push(tag.clone());
            }
        }
        tags
    }

    fn mutants(&self) -> u32 {
        (self.t.mutants.as_ref())
            .or(self.defaults.mutants.as_ref())
            .map_or(crate::delta::DEFAULT_MUTANTS, |n| n.value)
    }
}

/// The text of an `instruction_file`, which must exist.
fn instruction_file(source: &Source, file: &Spanned<String>) -> Result<String, SuiteError> {
    let path = source.existing_path(file, "instruction_file")?;
    std::fs::read_to_string(&path)
        .map_err(|err| source.at(file, format!("cannot read {}: {err}", path.display())))
}

fn verify_spec(source: &Source, v: &Spanned<RawVerify>) -> Result<VerifySpec, SuiteError> {
    if v.value.run.trim().is_empty() {
        return Err(source.at(v, "the verify command is empty"));
    }
    let timeout = v
        .value
        .timeout
        .as_deref()
        .map(|t| parse_duration(t).map_err(|message| source.at(v, message.to_string())))
        .transpose()?;
    let reward = match v.value.reward.as_deref().map(str::trim) {
        None => None,
        Some(dir) if dir.is_empty() || dir == "/" || dir.split('/').any(|p| p == "..") => {
            return Err(source.at(
                v,
                format!(
                    "invalid reward folder '{dir}': use a container path such as /logs/verifier, or a folder of the workspace without `..`"
                ),
            ));
        }
        Some(dir) => Some(PathBuf::from(dir.trim_start_matches("./"))),
    };
    Ok(VerifySpec {
        run: v.value.run.clone(),
        timeout,
        in_place: v.value.in_place,
        reward,
    })
}

fn metric_spec(source: &Source, m: &Spanned<RawMetric>) -> Result<MetricSpec, SuiteError> {
    match &m.value {
        RawMetric::Named(name) => match name.parse::<MetricKind>() {
            Ok(MetricKind::Delta) => Ok(MetricSpec::Delta),
            Ok(MetricKind::DeltaToken) => Ok(MetricSpec::DeltaToken),
            Ok(MetricKind::ExitCode) => Ok(MetricSpec::ExitCode),
            Ok(MetricKind::Grader) | Err(_) => {
                let grader: &str = MetricKind::Grader.into();
                let named: Vec<&str> = MetricKind::VARIANTS
                    .iter()
                    .copied()
                    .filter(|kind| *kind != grader)
                    .collect();
                Err(source.at(
                    m,
                    format!(
                        "unknown metric '{name}'. Valid metrics: {}, or {{grader: COMMAND}}",
                        named.join(", ")
                    ),
                ))
            }
        },
        RawMetric::Grader { command, timeout } => {
            let spanned = Spanned {
                value: command.clone(),
                referenced: m.referenced,
                defined: m.defined,
            };
            Ok(MetricSpec::Grader {
                command: resolve_command(source, &spanned)?,
                written: command.trim().to_owned(),
                timeout: Some(
                    timeout
                        .as_deref()
                        .map(|t| {
                            parse_duration(t).map_err(|message| source.at(m, message.to_string()))
                        })
                        .transpose()?
                        .unwrap_or(GRADER_TIMEOUT),
                ),
            })
        }
    }
}
