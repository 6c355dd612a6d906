//! From a script step to what the model says: the generic action (`write`, `shell`) mapped
//! onto the native tool the client advertised, with the argument names that tool takes.

use serde_json::{Map, Value, json};

use super::script::{Action, HttpError, Reply, Step, Usage};

/// A tool the client offered the model.
#[derive(Debug, Clone)]
pub(crate) struct Tool {
    pub name: String,
    /// A freeform tool (Codex `apply_patch`): its input is plain text, not JSON.
    pub custom: bool,
    /// The JSON Schema `properties` of its arguments.
    pub properties: Map<String, Value>,
}

impl Tool {
    pub(super) fn function(name: &str, schema: Option<&Value>) -> Tool {
        Tool {
            name: name.to_owned(),
            custom: false,
            properties: schema
                .and_then(|s| s.get("properties"))
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default(),
        }
    }

    fn has(&self, property: &str) -> bool {
        self.properties.contains_key(property)
    }
}

/// The arguments of a tool call.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Input {
    Json(Value),
    /// A freeform (custom) tool's text input.
    Text(String),
}

/// A tool call the model makes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Call {
    pub id: String,
    pub name: String,
    pub input: Input,
}

impl Call {
    /// The arguments as a JSON string (what OpenAI-style APIs carry).
    pub(super) fn arguments(&self) -> String {
        match &self.input {
            Input::Json(v) => v.to_string(),
            Input::Text(t) => t.clone(),
        }
    }

    /// The arguments as a JSON object (what Anthropic and Gemini carry).
    pub(super) fn args_object(&self) -> Value {
        match &self.input {
            Input::Json(v) => v.clone(),
            Input::Text(t) => json!({ "input": t }),
        }
    }
}

/// One model answer, protocol-neutral.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Answer {
    pub text: Option<String>,
    pub call: Option<Call>,
    pub usage: Usage,
}

/// What a request gets.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    Answer(Answer),
    Error(HttpError),
}

/// The marker that ends a mini-swe-agent run when a command prints it first.
pub(crate) const MINI_SUBMIT: &str = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT";

/// A fresh id with a prefix, e.g. `toolu_…`, `call_…`.
pub(crate) fn new_id(prefix: &str) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}{}", &id[..24])
}

/// The answer of a main call at `step`, given the client's tools and working directory.
pub(crate) fn answer(step: Step, tools: &[Tool], cwd: Option<&str>, call_prefix: &str) -> Outcome {
    let reply: Reply = match step {
        Step::Error(error) => return Outcome::Error(error),
        Step::Reply(reply) => with_cwd(reply, cwd),
    };
    let mini = tools.len() == 1 && tools[0].name == "bash";
    let call = match &reply.action {
        Some(Action::Write { path, content }) => write_call(tools, cwd, path, content),
        Some(Action::Shell { command }) => shell_call(tools, command),
        // mini-swe-agent ends only when a command prints the submit marker.
        None if mini => shell_call(tools, MINI_SUBMIT),
        None => None,
    };
    let call = call.map(|(name, input)| Call {
        id: new_id(call_prefix),
        name,
        input,
    });
    // Without a usable tool the action is only described, so the turn still ends cleanly.
    let text = match (&reply.text, &reply.action, &call) {
        (None, Some(action), None) => Some(describe(action)),
        (text, _, _) => text.clone(),
    };
    Outcome::Answer(Answer {
        text,
        call,
        usage: reply.usage,
    })
}

/// `{cwd}` in a step's text and action replaced by the client's working directory, so a script
/// can have the model say a path only a run knows (the replay tests stream it split).
fn with_cwd(mut reply: Reply, cwd: Option<&str>) -> Reply {
    let Some(cwd) = cwd else {
        return reply;
    };
    let put = |text: &mut String| *text = text.replace("{cwd}", cwd);
    if let Some(text) = reply.text.as_mut() {
        put(text);
    }
    match reply.action.as_mut() {
        Some(Action::Write { path, content }) => {
            put(path);
            put(content);
        }
        Some(Action::Shell { command }) => put(command),
        None => {}
    }
    reply
}

fn describe(action: &Action) -> String {
    match action {
        Action::Write { path, .. } => format!("(I would write {path}, but no tool can.)"),
        Action::Shell { command } => format!("(I would run `{command}`, but no tool can.)"),
    }
}

fn find<'a>(tools: &'a [Tool], names: &[&str]) -> Option<&'a Tool> {
    names
        .iter()
        .find_map(|name| tools.iter().find(|t| t.name == *name))
}

/// `path` made absolute against the client's working directory, when it names one.
pub(crate) fn absolute(cwd: Option<&str>, path: &str) -> String {
    match cwd {
        Some(cwd) if !path.starts_with('/') => {
            format!("{}/{}", cwd.trim_end_matches('/'), path)
        }
        _ => path.to_owned(),
    }
}

fn write_call(
    tools: &[Tool],
    cwd: Option<&str>,
    path: &str,
    content: &str,
) -> Option<(String, Input)> {
    let full = absolute(cwd, path);
    // The server shares the client's filesystem, so it can look.
    let exists = cwd.is_some() && std::path::Path::new(&full).exists();
    for tool in tools {
        let args = match tool.name.as_str() {
            // Continue's CLI names the path `filepath`.
            "Write" if tool.has("filepath") => json!({ "filepath": full, "content": content }),
            "Write" => json!({ "file_path": full, "content": content }),
            "write_file" => json!({ "file_path": full, "content": content }),
            "write" if tool.has("filePath") => json!({ "filePath": full, "content": content }),
            // pi names it `path`.
            "write" if tool.has("path") => json!({ "path": full, "content": content }),
            // gptme's.
            "save" if tool.has("path") => json!({ "path": full, "content": content }),
            // Cline's editor creates a missing file from `new_text`; an existing one needs the
            // text it replaces, so that goes through the shell below.
            "editor" if tool.has("new_text") && !exists => {
                json!({ "path": full, "new_text": content })
            }
            // Grok CLI's creates a file; an existing one goes through the shell below.
            "create_file" if tool.has("content") && !exists => {
                json!({ "path": full, "content": content })
            }
            _ => continue,
        };
        return Some((tool.name.clone(), Input::Json(args)));
    }
    // apply_patch can only add a file that is not there yet.
    if let Some(tool) = find(tools, &["apply_patch"])
        && !exists
    {
        let patch = add_file_patch(path, content);
        return Some(if tool.custom {
            (tool.name.clone(), Input::Text(patch))
        } else {
            (tool.name.clone(), Input::Json(json!({ "input": patch })))
        });
    }
    shell_call(tools, &write_command(path, content))
}

fn shell_call(tools: &[Tool], command: &str) -> Option<(String, Input)> {
    let tool = find(
        tools,
        &[
            "Bash",
            "exec_command",
            "shell_command",
            "shell",
            "run_shell_command",
            "bash",
            "run_commands",
        ],
    )?;
    // Cline runs a batch: `commands` is a list of whole command strings.
    if tool.has("commands") {
        return Some((
            tool.name.clone(),
            Input::Json(json!({ "commands": [command] })),
        ));
    }
    let mut args = Map::new();
    let key = if tool.has("cmd") { "cmd" } else { "command" };
    let is_array = tool
        .properties
        .get(key)
        .and_then(|p| p.get("type"))
        .and_then(Value::as_str)
        == Some("array");
    let value = if is_array {
        json!(["bash", "-lc", command])
    } else {
        json!(command)
    };
    args.insert(key.to_owned(), value);
    if tool.has("description") {
        args.insert(
            "description".into(),
            json!(format!("Run: {}", first_line(command))),
        );
    }
    Some((tool.name.clone(), Input::Json(Value::Object(args))))
}

fn first_line(command: &str) -> &str {
    command.lines().next().unwrap_or("")
}

/// A Codex patch that creates `path` with `content`.
pub(crate) fn add_file_patch(path: &str, content: &str) -> String {
    let mut patch = format!("*** Begin Patch\n*** Add File: {path}\n");
    for line in content.lines() {
        patch.push('+');
        patch.push_str(line);
        patch.push('\n');
    }
    patch.push_str("*** End Patch\n");
    patch
}

/// A shell command that writes `content` to `path` exactly (any bytes but NUL).
pub(crate) fn write_command(path: &str, content: &str) -> String {
    let target = quote(path);
    let write = format!("printf '%s' {} > {target}", quote(content));
    match path.rsplit_once('/') {
        Some((dir, _)) if !dir.is_empty() => format!("mkdir -p {} && {write}", quote(dir)),
        _ => write,
    }
}

/// POSIX single-quoting.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// A JSON value that fits `schema` (a JSON Schema or Gemini's `responseSchema`), for the
/// structured side calls some clients make. An enum takes its first value, except that a
/// `next_speaker` prefers `user`, so Gemini CLI stops instead of looping.
pub(crate) fn fit_schema(schema: &Value, name: &str) -> Value {
    let kind = schema
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or(if schema.get("properties").is_some() {
            "object"
        } else {
            "string"
        })
        .to_ascii_lowercase();
    if let Some(values) = schema.get("enum").and_then(Value::as_array)
        && let Some(first) = values.first()
    {
        let user = json!("user");
        return if name == "next_speaker" && values.contains(&user) {
            user
        } else {
            first.clone()
        };
    }
    match kind.as_str() {
        "object" => {
            let mut out = Map::new();
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (key, sub) in props {
                    out.insert(key.clone(), fit_schema(sub, key));
                }
            }
            Value::Object(out)
        }
        "array" => json!([]),
        "integer" | "number" => json!(0),
        "boolean" => json!(false),
        "null" => Value::Null,
        _ => json!("scripted"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_command_round_trips_through_sh() {
        let dir = tempfile::Builder::new()
            .prefix("deltabench-model-")
            .tempdir_in(if std::path::Path::new("/dev/shm").is_dir() {
                "/dev/shm"
            } else {
                "/tmp"
            })
            .unwrap();
        let content = "it's \"quoted\" $HOME `x` \\n\nno newline at end";
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(write_command("sub/dir/f.txt", content))
            .current_dir(dir.path())
            .status()
            .unwrap();
        assert!(status.success());
        let written = std::fs::read_to_string(dir.path().join("sub/dir/f.txt")).unwrap();
        assert_eq!(written, content);
    }

    #[test]
    fn schema_fit_prefers_the_user_as_next_speaker() {
        let schema = json!({"type": "OBJECT", "properties": {
            "reasoning": {"type": "STRING"},
            "next_speaker": {"type": "STRING", "enum": ["model", "user"]},
            "n": {"type": "integer"}, "ok": {"type": "boolean"}, "xs": {"type": "array"}}});
        assert_eq!(
            fit_schema(&schema, ""),
            json!({"reasoning": "scripted", "next_speaker": "user", "n": 0, "ok": false, "xs": []})
        );
    }

    #[test]
    fn patch_adds_each_line() {
        assert_eq!(
            add_file_patch("a.txt", "x\ny\n"),
            "*** Begin Patch\n*** Add File: a.txt\n+x\n+y\n*** End Patch\n"
        );
    }
}
