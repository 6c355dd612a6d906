//! The command line, environment and config files that run one CLI headless.
//!
//! A pure function of the agent's config and the run's paths, so each kind's invocation is
//! unit-tested without the CLI; `docs/agents.md` says how each was observed. Every CLI gets
//! a cleared environment with its own HOME (and XDG dirs) inside the trial directory, so host
//! credentials, config and plugins never leak in, and a later run with the same HOME and
//! workspace can resume its session.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::cli::{self, CliDefinition};
use super::config::{HarnessConfig, HarnessKind, TurnLimit};

/// The key deltabench gives CLIs talking to a loopback endpoint that needs none.
pub const DUMMY_API_KEY: &str = "sk-deltabench-local";

/// Variables passed through from deltabench's own environment when set.
const PASSTHROUGH_ENV: [&str; 12] = [
    "PATH",
    "LANG",
    "LC_ALL",
    "TZ",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "NODE_EXTRA_CA_CERTS",
];

/// Everything that differs between one run and the next.
#[derive(Debug, Clone)]
pub struct RunPaths<'a> {
    /// The instruction.
    pub task: &'a str,
    /// A session to continue (kinds that resume only).
    pub resume: Option<&'a str>,
    /// Claude's session id for a new run (Claude lets the caller choose it).
    pub new_session: &'a str,
    /// The CLI's private HOME.
    pub home: &'a Path,
    pub workspace: &'a Path,
    /// Where deltabench's own files for this run go (outside the workspace).
    pub scratch: &'a Path,
    /// The endpoint's root URL, already resolved (`scripted:` started).
    pub endpoint: Option<&'a str>,
    /// The API key: configured, passed through, or the loopback dummy.
    pub api_key: Option<&'a str>,
}

/// How to start the CLI.
#[derive(Debug, Clone, PartialEq)]
pub struct Invocation {
    pub args: Vec<String>,
    /// The whole environment (the child's is cleared first).
    pub env: Vec<(String, String)>,
    /// Config files to write before the start, with their contents.
    pub files: Vec<(PathBuf, String)>,
    /// mini-swe-agent's trajectory file, read while it runs.
    pub trajectory: Option<PathBuf>,
    /// The model name to price usage with, when known.
    pub model: Option<String>,
}

/// Builds the invocation of `kind` for one run.
pub fn invocation(kind: HarnessKind, config: &HarnessConfig, run: &RunPaths) -> Invocation {
    let mut inv = Invocation {
        args: Vec::new(),
        env: base_env(run.home),
        // Agents that commit (aider always does) need an identity; env vars are not enough
        // for aider, which reads `git config user.name`.
        files: vec![(
            run.home.join(".gitconfig"),
            "[user]\n\tname = deltabench agent\n\temail = agent@deltabench.invalid\n".into(),
        )],
        trajectory: None,
        model: config.model.clone(),
    };
    match kind {
        HarnessKind::ClaudeCode => claude(config, run, &mut inv),
        HarnessKind::Codex => codex(config, run, &mut inv),
        HarnessKind::GeminiCli => gemini(config, run, &mut inv),
        HarnessKind::Opencode => opencode(config, run, &mut inv),
        HarnessKind::MiniSweAgent => mini_swe(config, run, &mut inv),
        HarnessKind::Aider => aider(config, run, &mut inv),
        HarnessKind::QwenCode => qwen(config, run, &mut inv),
        HarnessKind::ContinueCli => continue_cli(config, run, &mut inv),
        HarnessKind::Pi => pi(config, run, &mut inv),
        HarnessKind::Gptme => gptme(config, run, &mut inv),
        HarnessKind::Cline => cline(config, run, &mut inv),
        HarnessKind::GrokCli => grok(config, run, &mut inv),
        HarnessKind::Cli => {
            if let Some(definition) = &config.cli {
                cli_invocation(definition, config, run, &mut inv);
            }
            // The template is the whole command line, the environment filled in above.
            return inv;
        }
    }
    inv.args.extend(config.args.iter().cloned());
    if matches!(
        kind,
        HarnessKind::Codex
            | HarnessKind::Opencode
            | HarnessKind::ClaudeCode
            | HarnessKind::ContinueCli
            | HarnessKind::Gptme
            | HarnessKind::Cline
    ) {
        // A positional prompt, after `--` so a task starting with `-` is not an option; the
        // others take it as `--flag=TASK`.
        inv.args.push("--".into());
        inv.args.push(run.task.to_owned());
    } else if kind == HarnessKind::Pi {
        // pi has no `--`: a message starting with `-` is an unknown option and one starting
        // with `@` a file to attach, so such a task gets a leading space.
        let space = if run.task.starts_with(['-', '@']) {
            " "
        } else {
            ""
        };
        inv.args.push(format!("{space}{}", run.task));
    }
    for (key, value) in &config.env {
        set_env(&mut inv.env, key, value);
    }
    inv
}

fn base_env(home: &Path) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = PASSTHROUGH_ENV
        .iter()
        .filter_map(|key| Some((key.to_string(), std::env::var(key).ok()?)))
        .collect();
    let home_str = home.display().to_string();
    for (key, value) in [
        ("HOME", home_str.clone()),
        ("XDG_CONFIG_HOME", format!("{home_str}/.config")),
        ("XDG_DATA_HOME", format!("{home_str}/.local/share")),
        ("XDG_STATE_HOME", format!("{home_str}/.local/state")),
        ("XDG_CACHE_HOME", format!("{home_str}/.cache")),
        ("TERM", "dumb".into()),
        ("NO_COLOR", "1".into()),
        // Agents that commit need an identity; the private HOME has no git config.
        ("GIT_AUTHOR_NAME", "deltabench agent".into()),
        ("GIT_AUTHOR_EMAIL", "agent@deltabench.invalid".into()),
        ("GIT_COMMITTER_NAME", "deltabench agent".into()),
        ("GIT_COMMITTER_EMAIL", "agent@deltabench.invalid".into()),
    ] {
        set_env(&mut env, key, &value);
    }
    env
}

pub(super) fn set_env(env: &mut Vec<(String, String)>, key: &str, value: &str) {
    env.retain(|(k, _)| k != key);
    env.push((key.to_owned(), value.to_owned()));
}

fn push(args: &mut Vec<String>, items: &[&str]) {
    args.extend(items.iter().map(|s| s.to_string()));
}

/// A TOML basic string (JSON's escapes are a subset TOML accepts).
fn toml_string(text: &str) -> String {
    serde_json::to_string(text).expect("a string serializes")
}

fn claude(config: &HarnessConfig, run: &RunPaths, inv: &mut Invocation) {
    let env = &mut inv.env;
    for (key, value) in [
        (
            "CLAUDE_CONFIG_DIR",
            format!("{}/.claude", run.home.display()),
        ),
        // Root may use bypassPermissions only inside a declared sandbox: the workspace is one.
        ("IS_SANDBOX", "1".into()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
        ("DISABLE_AUTOUPDATER", "1".into()),
        ("DISABLE_TELEMETRY", "1".into()),
        ("DISABLE_ERROR_REPORTING", "1".into()),
    ] {
        set_env(env, key, &value);
    }
    if let Some(url) = run.endpoint {
        set_env(env, "ANTHROPIC_BASE_URL", url);
    }
    if let Some(key) = run.api_key {
        set_env(env, "ANTHROPIC_API_KEY", key);
    }
    let args = &mut inv.args;
    push(args, &["-p", "--output-format", "stream-json", "--verbose"]);
    if let Some(mode) = config.permission_mode(HarnessKind::ClaudeCode) {
        push(args, &["--permission-mode", mode]);
    }
    if let Some(model) = &config.model {
        push(args, &["--model", model]);
    }
    if let Some(turns) = config.max_turns {
        push(args, &["--max-turns", &turns.to_string()]);
    }
    if let Some(prompt) = &config.append_system_prompt {
        push(args, &["--append-system-prompt", prompt]);
    }
    match run.resume {
        Some(id) => push(args, &["--resume", id]),
        None => push(args, &["--session-id", run.new_session]),
    }
}

fn codex(config: &HarnessConfig, run: &RunPaths, inv: &mut Invocation) {
    let codex_home = run.home.join(".codex");
    set_env(
        &mut inv.env,
        "CODEX_HOME",
        &codex_home.display().to_string(),
    );
    let mut toml = String::new();
    if let Some(model) = &config.model {
        toml += &format!("model = {}\n", toml_string(model));
    }
    toml += "approval_policy = \"never\"\n";
    let sandbox = config
        .permission_mode(HarnessKind::Codex)
        .unwrap_or("danger-full-access");
    toml += &format!("sandbox_mode = {}\n", toml_string(sandbox));
    toml += "check_for_update_on_startup = false\n";
    if let Some(prompt) = &config.append_system_prompt {
        toml += &format!("developer_instructions = {}\n", toml_string(prompt));
    }
    if run.endpoint.is_some() {
        toml += "model_provider = \"deltabench\"\n";
    }
    toml += "\n[analytics]\nenabled = false\n\n[feedback]\nenabled = false\n";
    match run.endpoint {
        Some(url) => {
            // A custom provider: the built-in one ignores OPENAI_BASE_URL and tries WebSockets.
            toml += &format!(
                "\n[model_providers.deltabench]\nname = \"deltabench endpoint\"\nbase_url = {}\nenv_key = \"DELTABENCH_CODEX_API_KEY\"\nwire_api = \"responses\"\n",
                toml_string(&format!("{url}/v1"))
            );
            if let Some(key) = run.api_key {
                set_env(&mut inv.env, "DELTABENCH_CODEX_API_KEY", key);
            }
        }
        None => {
            if let Some(key) = run.api_key {
                set_env(&mut inv.env, "OPENAI_API_KEY", key);
            }
        }
    }
    inv.files.push((codex_home.join("config.toml"), toml));
    push(&mut inv.args, &["exec", "--json", "--skip-git-repo-check"]);
    if let Some(id) = run.resume {
        push(&mut inv.args, &["resume", id]);
    }
}

fn gemini(config: &HarnessConfig, run: &RunPaths, inv: &mut Invocation) {
    let gemini_dir = run.home.join(".gemini");
    let mut settings = json!({
        "privacy": {"usageStatisticsEnabled": false},
        "telemetry": {"enabled": false},
        "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": false}},
        "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
    });
    if let Some(turns) = config.max_turns {
        settings["model"] = json!({ "maxSessionTurns": turns });
    }
    inv.files.push((
        gemini_dir.join("settings.json"),
        serde_json::to_string_pretty(&settings).expect("settings serialize"),
    ));
    if let Some(prompt) = &config.append_system_prompt {
        // The global context file is added to the system instruction of every session.
        inv.files
            .push((gemini_dir.join("GEMINI.md"), prompt.clone()));
    }
    set_env(&mut inv.env, "GEMINI_CLI_TRUST_WORKSPACE", "true");
    if let Some(url) = run.endpoint {
        set_env(&mut inv.env, "GOOGLE_GEMINI_BASE_URL", url);
    }
    if let Some(key) = run.api_key {
        set_env(&mut inv.env, "GEMINI_API_KEY", key);
    }
    let args = &mut inv.args;
    args.push(format!("--prompt={}", run.task));
    push(args, &["--output-format", "stream-json"]);
    if let Some(mode) = config.permission_mode(HarnessKind::GeminiCli) {
        push(args, &["--approval-mode", mode]);
    }
    if let Some(model) = &config.model {
        push(args, &["-m", model]);
    }
    if let Some(id) = run.resume {
        push(args, &["-r", id]);
    }
}

fn qwen(config: &HarnessConfig, run: &RunPaths, inv: &mut Invocation) {
    let settings = json!({
        "privacy": {"usageStatisticsEnabled": false},
        "telemetry": {"enabled": false},
        "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
        "security": {"folderTrust": {"enabled": false}},
    });
    inv.files.push((
        run.home.join(".qwen/settings.json"),
        serde_json::to_string_pretty(&settings).expect("settings serialize"),
    ));
    set_env(&mut inv.env, "QWEN_CODE_SUPPRESS_YOLO_WARNING", "1");
    if let Some(url) = run.endpoint {
        set_env(&mut inv.env, "OPENAI_BASE_URL", &format!("{url}/v1"));
    }
    if let Some(key) = run.api_key {
        set_env(&mut inv.env, "OPENAI_API_KEY", key);
    }
    let args = &mut inv.args;
    // Its positional prompt is not read after `--` (it then waits for stdin); `--prompt=` keeps
    // a task starting with `-` a value.
    args.push(format!("--prompt={}", run.task));
    push(
        args,
        &["--auth-type", "openai", "--output-format", "stream-json"],
    );
    if let Some(mode) = config.permission_mode(HarnessKind::QwenCode) {
        push(args, &["--approval-mode", mode]);
    }
    if let Some(model) = &config.model {
        push(args, &["--model", model]);
    }
    if let Some(turns) = config.max_turns {
        push(args, &["--max-session-turns", &turns.to_string()]);
    }
    if let Some(prompt) = &config.append_system_prompt {
        push(args, &["--append-system-prompt", prompt]);
    }
    match run.resume {
        Some(id) => push(args, &["--resume", id]),
        None => push(args, &["--session-id", run.new_session]),
    }
}

fn continue_cli(config: &HarnessConfig, run: &RunPaths, inv: &mut Invocation) {
    // One OpenAI-compatible model: the endpoint's, or OpenAI's own without one.
    let mut model = json!({
        "name": "deltabench",
        "provider": "openai",
        "model": config.model.clone().unwrap_or_else(|| "gpt-4.1".into()),
        "roles": ["chat", "edit", "apply"],
    });
    if let Some(url) = run.endpoint {
        model["apiBase"] = json!(format!("{url}/v1"));
    }
    if let Some(key) = run.api_key {
        model["apiKey"] = json!(key);
    } else if let Ok(key) = std::env::var("OPENAI_API_KEY") {
        model["apiKey"] = json!(key);
    }
    let mut file = json!({
        "name": "deltabench",
        "version": "0.0.1",
        "schema": "v1",
        "models": [model],
    });
    if let Some(prompt) = &config.append_system_prompt {
        file["rules"] = json!([prompt]);
    }
    let path = run.home.join(".continue/deltabench.yaml");
    // JSON is YAML: the config needs no YAML writer.
    inv.files.push((
        path.clone(),
        serde_json::to_string_pretty(&file).expect("config serializes"),
    ));
    set_env(&mut inv.env, "CONTINUE_CLI_ENABLE_TELEMETRY", "0");
    set_env(&mut inv.env, "CONTINUE_METRICS_ENABLED", "0");
    let args = &mut inv.args;
    push(args, &["-p", "--auto", "--format", "json", "--config"]);
    args.push(path.display().to_string());
    // It resumes the newest session of its HOME; the run checks that it was this one.
    if run.resume.is_some() {
        args.push("--resume".into());
    }
}

fn pi(config: &HarnessConfig, run: &RunPaths, inv: &mut Invocation) {
    let agent_dir = run.home.join(".pi/agent");
    // Its agent dir holds the settings and the models; sessions go where a resume finds them.
    set_env(
        &mut inv.env,
        "PI_CODING_AGENT_DIR",
        &agent_dir.display().to_string(),
    );
    // No update check, package check or install ping: the sandbox has no network for them.
    set_env(&mut inv.env, "PI_OFFLINE", "1");
    set_env(&mut inv.env, "PI_SKIP_VERSION_CHECK", "1");
    let settings = json!({"enableInstallTelemetry": false, "quietStartup": true});
    inv.files.push((
        agent_dir.join("settings.json"),
        serde_json::to_string_pretty(&settings).expect("settings serialize"),
    ));
    if let Some(key) = run.api_key {
        set_env(&mut inv.env, "OPENAI_API_KEY", key);
    }
    let args = &mut inv.args;
    push(
        args,
        &["-p", "--mode", "json", "--offline", "--session-dir"],
    );
    args.push(run.home.join(".pi/sessions").display().to_string());
    match run.endpoint {
        // One OpenAI-compatible provider with the model: its key is read from OPENAI_API_KEY.
        // No `cost` in the entry, so pi prices at zero and deltabench estimates.
        Some(url) => {
            let model = config.model.clone().unwrap_or_else(|| "gpt-4.1".into());
            let models = json!({"providers": {"deltabench": {
                "baseUrl": format!("{url}/v1"),
                "api": "openai-completions",
                "apiKey": "OPENAI_API_KEY",
                "compat": {"supportsDeveloperRole": false, "supportsReasoningEffort": false},
                "models": [{"id": model}],
            }}});
            inv.files.push((
                agent_dir.join("models.json"),
                serde_json::to_string_pretty(&models).expect("models serialize"),
            ));
            push(args, &["--provider", "deltabench", "--model", &model]);
        }
        None => {
            if let Some(model) = &config.model {
                push(args, &["--model", model]);
            }
        }
    }
    if let Some(prompt) = &config.append_system_prompt {
        push(args, &["--append-system-prompt", prompt]);
    }
    if let Some(id) = run.resume {
        push(args, &["--session", id]);
    }
}

fn gptme(config: &HarnessConfig, run: &RunPaths, inv: &mut Invocation) {
    for (key, value) in [
        // No tokenizer download (offline it waits for a timeout on every count).
        ("GPTME_TIKTOKEN_TIMEOUT", "0"),
        // The task is the prompt, not a list of files or URLs to include.
        ("GPTME_DISABLE_PATH_INCLUDE", "1"),
        ("GPTME_TELEMETRY_ENABLED", "false"),
    ] {
        set_env(&mut inv.env, key, value);
    }
    if let Some(key) = run.api_key {
        set_env(&mut inv.env, "OPENAI_API_KEY", key);
    }
    if let Some(turns) = config.max_turns {
        set_env(&mut inv.env, "GPTME_MAX_STEPS", &turns.to_string());
    }
    let args = &mut inv.args;
    // Native tool calls (`--tool-format tool`): gptme's default, markdown code blocks, leaves no
    // call ids to pair a call with its result.
    push(
        args,
        &["-n", "--output-format", "json", "--tool-format", "tool"],
    );
    match run.resume {
        Some(id) => push(args, &["--name", id, "--resume"]),
        None => push(args, &["--name", run.new_session]),
    }
    match (run.endpoint, &config.model) {
        // Its `local` provider is any OpenAI-compatible server at OPENAI_BASE_URL.
        (Some(url), model) => {
            set_env(&mut inv.env, "OPENAI_BASE_URL", &format!("{url}/v1"));
            let model = model.as_deref().unwrap_or("gpt-4.1");
            let bare = model
                .strip_prefix("openai/")
                .or_else(|| model.strip_prefix("local/"))
                .unwrap_or(model);
            push(args, &["-m", &format!("local/{bare}")]);
        }
        (None, Some(model)) => push(args, &["-m", model]),
        (None, None) => {}
    }
}

fn cline(config: &HarnessConfig, run: &RunPaths, inv: &mut Invocation) {
    let data = run.home.join(".cline/data/settings");
    // Its OpenAI-compatible provider, as `cline auth -p openai -b URL -k KEY -m MODEL` saves it
    // (observed with 3.0.65), so the key stays off the command line. Without a model it has no
    // provider but its own account, which needs `cline auth`.
    if let Some(model) = &config.model {
        let mut settings = json!({"provider": "openai-compatible", "model": model});
        if let Some(url) = run.endpoint {
            settings["baseUrl"] = json!(format!("{url}/v1"));
        }
        if let Some(key) = run.api_key {
            settings["apiKey"] = json!(key);
        }
        let providers = json!({
            "version": 1,
            "lastUsedProvider": "openai-compatible",
            "modes": {},
            // A file without `modes` or `updatedAt` is replaced by its default (its own backend).
            "providers": {"openai-compatible": {
                "settings": settings,
                "updatedAt": "1970-01-01T00:00:00.000Z",
                "tokenSource": "manual",
            }},
        });
        inv.files.push((
            data.join("providers.json"),
            serde_json::to_string_pretty(&providers).expect("settings serialize"),
        ));
    }
    inv.files.push((
        data.join("global-settings.json"),
        serde_json::to_string_pretty(&json!({"telemetryOptOut": true, "autoUpdateEnabled": false}))
            .expect("settings serialize"),
    ));
    // A global rule file is appended to its system prompt (`-s` would replace it).
    if let Some(prompt) = &config.append_system_prompt {
        inv.files.push((
            run.home.join("Documents/Cline/Rules/deltabench.md"),
            prompt.clone(),
        ));
    }
    // Without this it starts a hub daemon that outlives the run.
    set_env(&mut inv.env, "CLINE_SESSION_BACKEND_MODE", "local");
    set_env(&mut inv.env, "DO_NOT_TRACK", "1");
    push(&mut inv.args, &["--json", "--auto-approve", "true"]);
}

fn grok(config: &HarnessConfig, run: &RunPaths, inv: &mut Invocation) {
    // Through the environment, not `-u`/`-k`, which it would also save to its settings file.
    if let Some(url) = run.endpoint {
        set_env(&mut inv.env, "GROK_BASE_URL", &format!("{url}/v1"));
    }
    if let Some(key) = run.api_key {
        set_env(&mut inv.env, "GROK_API_KEY", key);
    }
    // Its global instructions file (a workspace's own `.grok/GROK.md` takes precedence).
    if let Some(prompt) = &config.append_system_prompt {
        inv.files
            .push((run.home.join(".grok/GROK.md"), prompt.clone()));
    }
    let args = &mut inv.args;
    // `--prompt=` keeps a task starting with `-` a value.
    args.push(format!("--prompt={}", run.task));
    if let Some(model) = &config.model {
        push(args, &["--model", model]);
    }
    if let Some(turns) = config.max_turns {
        push(args, &["--max-tool-rounds", &turns.to_string()]);
    }
}

fn opencode(config: &HarnessConfig, run: &RunPaths, inv: &mut Invocation) {
    let permission = config
        .permission_mode(HarnessKind::Opencode)
        .unwrap_or("allow");
    let mut file = json!({
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": false,
        "share": "disabled",
        "permission": {"edit": permission, "bash": permission, "webfetch": permission},
    });
    let model = match (run.endpoint, &config.model) {
        (Some(url), model) => {
            let id = model.clone().unwrap_or_else(|| "default".into());
            // A custom endpoint is one provider, named deltabench, serving the configured model.
            file["provider"] = json!({"deltabench": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "deltabench endpoint",
                "options": {"baseURL": format!("{url}/v1"), "apiKey": run.api_key.unwrap_or(DUMMY_API_KEY)},
                "models": {id.clone(): {"name": id, "tool_call": true, "limit": {"context": 200000, "output": 8192}}},
            }});
            Some(format!("deltabench/{id}"))
        }
        (None, model) => model.clone(),
    };
    if let Some(model) = &model {
        file["model"] = json!(model);
        file["small_model"] = json!(model);
    }
    if let Some(prompt) = &config.append_system_prompt {
        let path = run.home.join(".config/opencode/deltabench-instructions.md");
        file["instructions"] = json!([path.display().to_string()]);
        inv.files.push((path, prompt.clone()));
    }
    inv.files.push((
        run.home.join(".config/opencode/opencode.json"),
        serde_json::to_string_pretty(&file).expect("config serializes"),
    ));
    if run.endpoint.is_none()
        && let Some(key) = run.api_key
    {
        set_env(&mut inv.env, "OPENAI_API_KEY", key);
    }
    for key in [
        "OPENCODE_DISABLE_AUTOUPDATE",
        "OPENCODE_DISABLE_MODELS_FETCH",
        "OPENCODE_DISABLE_LSP_DOWNLOAD",
        "OPENCODE_DISABLE_SHARE",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS",
    ] {
        set_env(&mut inv.env, key, "1");
    }
    // The stored model id is bare for a custom endpoint; price it by what the user named.
    inv.model = config.model.clone();
    push(&mut inv.args, &["run", "--pure", "--format", "json"]);
    if let Some(id) = run.resume {
        push(&mut inv.args, &["--session", id]);
    }
}

/// litellm wants `provider/model`; against an OpenAI-compatible endpoint that is `openai/`,
/// whatever slashes the served model's own name has (`openai/qwen/qwen3-coder`).
fn litellm_model(config: &HarnessConfig, run: &RunPaths) -> Option<String> {
    config.model.as_ref().map(|model| {
        if run.endpoint.is_some() && !model.starts_with("openai/") {
            format!("openai/{model}")
        } else {
            model.clone()
        }
    })
}

fn openai_env(run: &RunPaths, inv: &mut Invocation, base_var: &str) {
    if let Some(url) = run.endpoint {
        set_env(&mut inv.env, base_var, &format!("{url}/v1"));
    }
    if let Some(key) = run.api_key {
        set_env(&mut inv.env, "OPENAI_API_KEY", key);
    }
    // litellm's price map comes from the package, not the network.
    set_env(&mut inv.env, "LITELLM_LOCAL_MODEL_COST_MAP", "True");
}

/// mini-swe-agent's own trajectory file, in the trial folder (`trajectory.json` there is
/// deltabench's ATIF trajectory of every agent).
pub const MINI_TRAJECTORY: &str = "mini-trajectory.json";

fn mini_swe(config: &HarnessConfig, run: &RunPaths, inv: &mut Invocation) {
    let trajectory = run.scratch.join(MINI_TRAJECTORY);
    openai_env(run, inv, "OPENAI_BASE_URL");
    for (key, value) in [
        (
            "MSWEA_GLOBAL_CONFIG_DIR",
            format!("{}/.config/mini-swe-agent", run.home.display()),
        ),
        ("MSWEA_CONFIGURED", "true".into()),
        ("MSWEA_SILENT_STARTUP", "1".into()),
        // An unpriced model must not end the run; deltabench estimates the cost instead.
        ("MSWEA_COST_TRACKING", "ignore_errors".into()),
    ] {
        set_env(&mut inv.env, key, &value);
    }
    let args = &mut inv.args;
    if let Some(model) = litellm_model(config, run) {
        push(args, &["-m", &model]);
    }
    args.push(format!("--task={}", run.task));
    push(args, &["-y", "--exit-immediately", "-o"]);
    args.push(trajectory.display().to_string());
    if let Some(turns) = config.max_turns
        && HarnessKind::MiniSweAgent.turn_limit() == TurnLimit::Native
    {
        // Any -c replaces the default config, so the default comes first.
        push(args, &["-c", "mini.yaml", "-c"]);
        args.push(format!("agent.step_limit={turns}"));
    }
    inv.trajectory = Some(trajectory);
}

fn aider(config: &HarnessConfig, run: &RunPaths, inv: &mut Invocation) {
    openai_env(run, inv, "OPENAI_API_BASE");
    let model = litellm_model(config, run);
    // Without it aider fetches litellm's price list from GitHub at every start.
    inv.files.push((
        run.home
            .join(".aider/caches/model_prices_and_context_window.json"),
        "{}".into(),
    ));
    let args = &mut inv.args;
    if let Some(model) = &model {
        push(args, &["--model", model, "--weak-model", model]);
        if run.endpoint.is_some() {
            let metadata = run.home.join(".aider/model-metadata.json");
            let entry = json!({ model.clone(): {
                "max_input_tokens": 200000, "max_output_tokens": 8192,
                "input_cost_per_token": 0.0, "output_cost_per_token": 0.0,
                "litellm_provider": "openai", "mode": "chat",
            }});
            inv.files.push((metadata.clone(), entry.to_string()));
            args.push(format!("--model-metadata-file={}", metadata.display()));
        }
    }
    args.push(format!("--message={}", run.task));
    push(
        args,
        &[
            "--yes-always",
            "--no-check-update",
            "--analytics-disable",
            "--no-show-model-warnings",
            "--no-pretty",
            "--no-fancy-input",
            "--no-detect-urls",
            "--no-gitignore",
            // A streamed reply carries no usage, and aider then counts tokens itself.
            "--no-stream",
        ],
    );
    if let Some(prompt) = &config.append_system_prompt {
        let path = run.scratch.join("aider-conventions.md");
        inv.files.push((path.clone(), prompt.clone()));
        args.push(format!("--read={}", path.display()));
    }
    // Its history files default to the repo root, where they would count as the agent's change.
    for (flag, name) in [
        ("--chat-history-file", "aider.chat.history.md"),
        ("--input-history-file", "aider.input.history"),
        ("--llm-history-file", "aider.llm.history"),
    ] {
        args.push(format!("{flag}={}", run.scratch.join(name).display()));
    }
}

/// The invocation of a `kind: cli` agent.
fn cli_invocation(
    definition: &CliDefinition,
    config: &HarnessConfig,
    run: &RunPaths,
    inv: &mut Invocation,
) {
    let values = [
        ("instruction", Some(run.task.to_owned())),
        ("model", config.model.clone()),
        ("max_turns", config.max_turns.map(|t| t.to_string())),
        ("workspace", Some(run.workspace.display().to_string())),
        ("home", Some(run.home.display().to_string())),
        (
            "session",
            Some(run.resume.unwrap_or(run.new_session).to_owned()),
        ),
        ("endpoint", run.endpoint.map(str::to_owned)),
        ("api_key", run.api_key.map(str::to_owned)),
    ];
    if let Some(url) = run.endpoint {
        for (key, value) in definition.dialect.env(url) {
            set_env(&mut inv.env, key, &value);
        }
    }
    if let Some(key) = run.api_key {
        set_env(&mut inv.env, definition.dialect.key_env(), key);
    }
    for (key, value) in &config.env {
        set_env(&mut inv.env, key, &cli::fill(value, &values));
    }
    inv.args = definition
        .args
        .iter()
        .map(|arg| cli::fill(arg, &values))
        .collect();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths<'a>(resume: Option<&'a str>, endpoint: Option<&'a str>) -> RunPaths<'a> {
        RunPaths {
            task: "-fix the bug",
            resume,
            new_session: "0f0e0d0c-0b0a-4908-8706-050403020100",
            home: Path::new("/t/home"),
            workspace: Path::new("/ws"),
            scratch: Path::new("/t"),
            endpoint,
            api_key: Some(DUMMY_API_KEY),
        }
    }

    fn env<'a>(inv: &'a Invocation, key: &str) -> Option<&'a str> {
        inv.env
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn file<'a>(inv: &'a Invocation, name: &str) -> &'a str {
        &inv.files
            .iter()
            .find(|(p, _)| p.ends_with(name))
            .unwrap_or_else(|| panic!("no {name} in {:?}", inv.files))
            .1
    }

    #[test]
    fn claude_runs_headless_with_a_preset_or_resumed_session() {
        let config = HarnessConfig {
            model: Some("claude-sonnet-4-5".into()),
            max_turns: Some(3),
            append_system_prompt: Some("Be brief.".into()),
            args: vec!["--bare".into()],
            ..HarnessConfig::default()
        };
        let local = "http://127.0.0.1:9";
        let inv = invocation(HarnessKind::ClaudeCode, &config, &paths(None, Some(local)));
        assert_eq!(
            inv.args.join(" "),
            "-p --output-format stream-json --verbose --permission-mode bypassPermissions \
             --model claude-sonnet-4-5 --max-turns 3 --append-system-prompt Be brief. \
             --session-id 0f0e0d0c-0b0a-4908-8706-050403020100 --bare -- -fix the bug"
        );
        assert_eq!(env(&inv, "ANTHROPIC_BASE_URL"), Some(local));
        assert_eq!(env(&inv, "HOME"), Some("/t/home"));
        assert_eq!(env(&inv, "IS_SANDBOX"), Some("1"));
        let resumed = invocation(
            HarnessKind::ClaudeCode,
            &HarnessConfig::default(),
            &paths(Some("abc"), None),
        );
        assert!(resumed.args.join(" ").contains("--resume abc -- -fix"));
        assert_eq!(env(&resumed, "ANTHROPIC_BASE_URL"), None);
    }

    #[test]
    fn pi_gets_a_provider_for_the_endpoint_and_a_session_dir_in_its_home() {
        let config = HarnessConfig {
            model: Some("fake-model".into()),
            append_system_prompt: Some("Be brief.".into()),
            args: vec!["--thinking".into(), "off".into()],
            ..HarnessConfig::default()
        };
        let local = "http://127.0.0.1:9";
        let inv = invocation(HarnessKind::Pi, &config, &paths(Some("s-1"), Some(local)));
        assert_eq!(
            inv.args.join(" "),
            "-p --mode json --offline --session-dir /t/home/.pi/sessions --provider deltabench \
             --model fake-model --append-system-prompt Be brief. --session s-1 --thinking off  \
             -fix the bug"
        );
        // The task is one argument, its leading `-` kept from being read as an option.
        assert_eq!(inv.args.last().unwrap(), " -fix the bug");
        let models: serde_json::Value =
            serde_json::from_str(file(&inv, ".pi/agent/models.json")).unwrap();
        let provider = &models["providers"]["deltabench"];
        assert_eq!(provider["baseUrl"], "http://127.0.0.1:9/v1");
        assert_eq!(provider["apiKey"], "OPENAI_API_KEY");
        assert_eq!(provider["models"][0]["id"], "fake-model");
        assert_eq!(env(&inv, "OPENAI_API_KEY"), Some(DUMMY_API_KEY));
        assert_eq!(env(&inv, "PI_CODING_AGENT_DIR"), Some("/t/home/.pi/agent"));
        assert_eq!(env(&inv, "PI_OFFLINE"), Some("1"));
        // Without an endpoint: pi's own providers, no models file.
        let own = invocation(HarnessKind::Pi, &config, &paths(None, None));
        assert!(own.args.join(" ").contains("--model fake-model"));
        assert!(!own.args.contains(&"--provider".to_owned()));
        assert!(!own.files.iter().any(|(p, _)| p.ends_with("models.json")));
    }

    #[test]
    fn gptme_runs_its_local_provider_at_the_endpoint_with_a_named_conversation() {
        let config = HarnessConfig {
            model: Some("openai/fake-model".into()),
            max_turns: Some(4),
            ..HarnessConfig::default()
        };
        let local = "http://127.0.0.1:9";
        let inv = invocation(HarnessKind::Gptme, &config, &paths(None, Some(local)));
        assert_eq!(
            inv.args.join(" "),
            "-n --output-format json --tool-format tool \
             --name 0f0e0d0c-0b0a-4908-8706-050403020100 -m local/fake-model -- -fix the bug"
        );
        assert_eq!(env(&inv, "OPENAI_BASE_URL"), Some("http://127.0.0.1:9/v1"));
        assert_eq!(env(&inv, "OPENAI_API_KEY"), Some(DUMMY_API_KEY));
        assert_eq!(env(&inv, "GPTME_MAX_STEPS"), Some("4"));
        assert_eq!(env(&inv, "GPTME_DISABLE_PATH_INCLUDE"), Some("1"));
        let resumed = invocation(HarnessKind::Gptme, &config, &paths(Some("c-1"), None));
        assert!(
            resumed
                .args
                .join(" ")
                .contains("--name c-1 --resume -m openai/fake-model -- -fix")
        );
        assert_eq!(env(&resumed, "OPENAI_BASE_URL"), None);
    }

    #[test]
    fn codex_gets_a_custom_provider_in_its_config() {
        let config = HarnessConfig {
            model: Some("gpt-5.5".into()),
            append_system_prompt: Some("Say \"hi\".".into()),
            ..HarnessConfig::default()
        };
        let inv = invocation(
            HarnessKind::Codex,
            &config,
            &paths(Some("t-1"), Some("http://127.0.0.1:9")),
        );
        assert_eq!(
            inv.args.join(" "),
            "exec --json --skip-git-repo-check resume t-1 -- -fix the bug"
        );
        let toml = file(&inv, "config.toml");
        assert!(toml.contains("model = \"gpt-5.5\""), "{toml}");
        assert!(toml.contains("sandbox_mode = \"danger-full-access\""));
        assert!(toml.contains("developer_instructions = \"Say \\\"hi\\\".\""));
        assert!(toml.contains("base_url = \"http://127.0.0.1:9/v1\""));
        assert_eq!(env(&inv, "DELTABENCH_CODEX_API_KEY"), Some(DUMMY_API_KEY));
        assert_eq!(env(&inv, "CODEX_HOME"), Some("/t/home/.codex"));
    }

    #[test]
    fn gemini_turn_limit_and_prompt_go_to_its_settings() {
        let config = HarnessConfig {
            max_turns: Some(2),
            append_system_prompt: Some("Be brief.".into()),
            ..HarnessConfig::default()
        };
        let inv = invocation(
            HarnessKind::GeminiCli,
            &config,
            &paths(Some("s-1"), Some("http://127.0.0.1:9")),
        );
        assert_eq!(
            inv.args.join(" "),
            "--prompt=-fix the bug --output-format stream-json --approval-mode yolo -r s-1"
        );
        let settings: serde_json::Value =
            serde_json::from_str(file(&inv, "settings.json")).unwrap();
        assert_eq!(settings["model"]["maxSessionTurns"], 2);
        assert_eq!(file(&inv, "GEMINI.md"), "Be brief.");
        assert_eq!(
            env(&inv, "GOOGLE_GEMINI_BASE_URL"),
            Some("http://127.0.0.1:9")
        );
    }

    #[test]
    fn opencode_serves_the_model_from_a_deltabench_provider() {
        let config = HarnessConfig {
            model: Some("fake-model".into()),
            ..HarnessConfig::default()
        };
        let inv = invocation(
            HarnessKind::Opencode,
            &config,
            &paths(None, Some("http://127.0.0.1:9")),
        );
        assert_eq!(
            inv.args.join(" "),
            "run --pure --format json -- -fix the bug"
        );
        let file: serde_json::Value = serde_json::from_str(file(&inv, "opencode.json")).unwrap();
        assert_eq!(file["model"], "deltabench/fake-model");
        assert_eq!(
            file["provider"]["deltabench"]["options"]["baseURL"],
            "http://127.0.0.1:9/v1"
        );
        assert_eq!(file["permission"]["bash"], "allow");
        assert_eq!(inv.model.as_deref(), Some("fake-model"));
    }

    #[test]
    fn mini_swe_agent_writes_its_trajectory_to_scratch() {
        let config = HarnessConfig {
            model: Some("fake-model".into()),
            max_turns: Some(2),
            ..HarnessConfig::default()
        };
        let inv = invocation(
            HarnessKind::MiniSweAgent,
            &config,
            &paths(None, Some("http://127.0.0.1:9")),
        );
        assert_eq!(
            inv.args.join(" "),
            "-m openai/fake-model --task=-fix the bug -y --exit-immediately -o /t/mini-trajectory.json \
             -c mini.yaml -c agent.step_limit=2"
        );
        assert_eq!(env(&inv, "OPENAI_BASE_URL"), Some("http://127.0.0.1:9/v1"));
        assert_eq!(
            inv.trajectory.as_deref(),
            Some(Path::new("/t/mini-trajectory.json"))
        );
    }

    #[test]
    fn aider_keeps_its_history_files_out_of_the_workspace() {
        let config = HarnessConfig {
            model: Some("fake-model".into()),
            env: [("AIDER_X".to_owned(), "1".to_owned())].into(),
            ..HarnessConfig::default()
        };
        let inv = invocation(
            HarnessKind::Aider,
            &config,
            &paths(None, Some("http://127.0.0.1:9")),
        );
        let args = inv.args.join(" ");
        assert!(args.starts_with("--model openai/fake-model --weak-model openai/fake-model"));
        assert!(args.contains("--message=-fix the bug"));
        assert!(args.contains("--chat-history-file=/t/aider.chat.history.md"));
        assert!(args.contains("--llm-history-file=/t/aider.llm.history"));
        assert_eq!(env(&inv, "OPENAI_API_BASE"), Some("http://127.0.0.1:9/v1"));
        assert_eq!(env(&inv, "AIDER_X"), Some("1"));
        file(&inv, "model_prices_and_context_window.json");
    }

    #[test]
    fn cline_gets_its_provider_in_a_settings_file_not_on_the_command_line() {
        let config = HarnessConfig {
            model: Some("fake-model".into()),
            append_system_prompt: Some("Be brief.".into()),
            ..HarnessConfig::default()
        };
        let inv = invocation(
            HarnessKind::Cline,
            &config,
            &paths(None, Some("http://127.0.0.1:9")),
        );
        assert_eq!(
            inv.args.join(" "),
            "--json --auto-approve true -- -fix the bug"
        );
        let providers: serde_json::Value =
            serde_json::from_str(file(&inv, "providers.json")).unwrap();
        let settings = &providers["providers"]["openai-compatible"]["settings"];
        assert_eq!(settings["baseUrl"], "http://127.0.0.1:9/v1");
        assert_eq!(settings["apiKey"], DUMMY_API_KEY);
        assert_eq!(settings["model"], "fake-model");
        assert_eq!(file(&inv, "deltabench.md"), "Be brief.");
        assert_eq!(env(&inv, "CLINE_SESSION_BACKEND_MODE"), Some("local"));
    }

    #[test]
    fn grok_gets_the_endpoint_and_key_from_its_environment() {
        let config = HarnessConfig {
            model: Some("fake-model".into()),
            max_turns: Some(3),
            append_system_prompt: Some("Be brief.".into()),
            ..HarnessConfig::default()
        };
        let inv = invocation(
            HarnessKind::GrokCli,
            &config,
            &paths(None, Some("http://127.0.0.1:9")),
        );
        assert_eq!(
            inv.args.join(" "),
            "--prompt=-fix the bug --model fake-model --max-tool-rounds 3"
        );
        assert_eq!(env(&inv, "GROK_BASE_URL"), Some("http://127.0.0.1:9/v1"));
        assert_eq!(env(&inv, "GROK_API_KEY"), Some(DUMMY_API_KEY));
        assert_eq!(file(&inv, "GROK.md"), "Be brief.");
    }
}
