//! Each protocol fed the requests real CLIs sent (tests/fixtures/model/*-basic.requests.jsonl,
//! captured against a scripted endpoint), at steps 0, 1 and 2.

use std::path::Path;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::script::{Script, Usage};
use super::tools::{Answer, Call, Input, Outcome};
use super::{anthropic, chat, gemini, responses};

const CLAUDE: &str = include_str!("../../tests/fixtures/model/claude-basic.requests.jsonl");
const CODEX: &str = include_str!("../../tests/fixtures/model/codex-basic.requests.jsonl");
const GEMINI: &str = include_str!("../../tests/fixtures/model/gemini-basic.requests.jsonl");
const OPENCODE: &str = include_str!("../../tests/fixtures/model/opencode-basic.requests.jsonl");
const MINI: &str = include_str!("../../tests/fixtures/model/mini-basic.requests.jsonl");
const AIDER: &str = include_str!("../../tests/fixtures/model/aider-basic.requests.jsonl");
const CLINE: &str = include_str!("../../tests/fixtures/model/cline-basic.requests.jsonl");
const GROK: &str = include_str!("../../tests/fixtures/model/grok-basic.requests.jsonl");

const SCRIPT: &str = "\
usage: {input_tokens: 1000, output_tokens: 20, cache_read_tokens: 300, cache_write_tokens: 40}
steps:
  - text: I'll create hello.txt.
    write: {path: hello.txt, content: \"hello\\n\"}
  - shell: cat hello.txt
    usage: {input_tokens: 1100, output_tokens: 21}
  - text: All done.
    usage: {input_tokens: 1200, output_tokens: 22}
";

fn script() -> Script {
    Script::parse(SCRIPT, Path::new("test.yaml")).unwrap()
}

fn error_script() -> Script {
    Script::parse(
        "steps:\n  - error: {status: 429, message: slow down, retry_after: 2}\n",
        Path::new("e.yaml"),
    )
    .unwrap()
}

/// The body of request `line` of a capture.
fn body(capture: &str, line: usize) -> Value {
    let request: Value = serde_json::from_str(capture.lines().nth(line).unwrap()).unwrap();
    request["body"].clone()
}

fn answer(outcome: Outcome) -> Answer {
    match outcome {
        Outcome::Answer(answer) => answer,
        Outcome::Error(e) => panic!("expected an answer, got {e:?}"),
    }
}

fn call(outcome: Outcome) -> Call {
    answer(outcome).call.expect("a tool call")
}

fn json_args(call: &Call) -> Value {
    match &call.input {
        Input::Json(v) => v.clone(),
        Input::Text(t) => panic!("expected JSON arguments, got text {t:?}"),
    }
}

async fn read(response: Response) -> (StatusCode, Option<String>, String) {
    let status = response.status();
    let retry = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, retry, String::from_utf8(bytes.to_vec()).unwrap())
}

/// The `event:` names of an SSE body, in order.
fn event_names(sse: &str) -> Vec<&str> {
    sse.lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect()
}

/// The `data:` payloads of an SSE body that are JSON.
fn datas(sse: &str) -> Vec<Value> {
    sse.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

#[test]
fn claude_gets_write_then_bash_then_text() {
    let s = script();
    // Line 0 is `HEAD /`.
    assert_eq!(anthropic::step(&body(CLAUDE, 1)), 0);
    let write = call(anthropic::outcome(&s, &body(CLAUDE, 1)));
    assert_eq!(write.name, "Write");
    assert_eq!(
        json_args(&write),
        json!({"file_path": "<lab>/ws/claude-basic/hello.txt", "content": "hello\n"})
    );
    assert!(write.id.starts_with("toolu_"));
    let bash = call(anthropic::outcome(&s, &body(CLAUDE, 2)));
    assert_eq!(bash.name, "Bash");
    assert_eq!(json_args(&bash)["command"], "cat hello.txt");
    let last = answer(anthropic::outcome(&s, &body(CLAUDE, 3)));
    assert_eq!(last.call, None);
    assert_eq!(last.text.as_deref(), Some("All done."));
    assert_eq!(last.usage.input_tokens, 1200);
}

#[tokio::test]
async fn claude_stream_has_the_messages_event_sequence() {
    let (status, _, sse) = read(anthropic::respond(&script(), &body(CLAUDE, 1))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        event_names(&sse),
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    let data = datas(&sse);
    assert_eq!(
        data[0]["message"]["usage"],
        json!({"input_tokens": 1000, "cache_read_input_tokens": 300,
            "cache_creation_input_tokens": 40, "output_tokens": 1})
    );
    assert_eq!(data[4]["content_block"]["name"], "Write");
    let input: Value =
        serde_json::from_str(data[5]["delta"]["partial_json"].as_str().unwrap()).unwrap();
    assert_eq!(input["content"], "hello\n");
    assert_eq!(data[7]["delta"]["stop_reason"], "tool_use");
    assert_eq!(data[7]["usage"]["output_tokens"], 20);
}

#[test]
fn claude_without_tools_is_a_side_call_with_zero_usage() {
    let mut title = body(CLAUDE, 1);
    title.as_object_mut().unwrap().remove("tools");
    let side = answer(anthropic::outcome(&script(), &title));
    assert_eq!(side.usage, Usage::ZERO);
    assert!(side.call.is_none());
}

#[test]
fn codex_gets_apply_patch_then_exec_command_then_text() {
    let s = script();
    let patch = call(responses::outcome(&s, &body(CODEX, 0)));
    assert_eq!(patch.name, "apply_patch");
    assert_eq!(
        patch.input,
        Input::Text("*** Begin Patch\n*** Add File: hello.txt\n+hello\n*** End Patch\n".into())
    );
    let exec = call(responses::outcome(&s, &body(CODEX, 1)));
    assert_eq!(exec.name, "exec_command");
    assert_eq!(json_args(&exec), json!({"cmd": "cat hello.txt"}));
    let last = answer(responses::outcome(&s, &body(CODEX, 2)));
    assert_eq!((last.text.as_deref(), last.call), (Some("All done."), None));
}

#[test]
fn codex_writes_through_the_shell_without_apply_patch_or_over_an_existing_file() {
    let s = script();
    let mut no_patch = body(CODEX, 0);
    no_patch["tools"]
        .as_array_mut()
        .unwrap()
        .retain(|t| t["name"] != "apply_patch");
    let exec = call(responses::outcome(&s, &no_patch));
    assert_eq!(exec.name, "exec_command");
    assert_eq!(
        json_args(&exec)["cmd"],
        "printf '%s' 'hello\n' > 'hello.txt'"
    );

    // The server shares the client's filesystem: an existing file cannot be "added".
    let dir = tempfile::Builder::new()
        .prefix("deltabench-model-")
        .tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .unwrap();
    std::fs::write(dir.path().join("hello.txt"), "old\n").unwrap();
    let text = body(CODEX, 0)
        .to_string()
        .replace("<lab>/ws/codex-basic", dir.path().to_str().unwrap());
    let exec = call(responses::outcome(
        &s,
        &serde_json::from_str(&text).unwrap(),
    ));
    assert_eq!(exec.name, "exec_command");
}

#[tokio::test]
async fn codex_stream_ends_with_response_completed_and_usage() {
    let (_, _, sse) = read(responses::respond(&script(), &body(CODEX, 0))).await;
    assert_eq!(
        event_names(&sse),
        [
            "response.created",
            "response.output_item.added",
            "response.output_item.done",
            "response.output_item.added",
            "response.output_item.done",
            "response.completed"
        ]
    );
    let data = datas(&sse);
    assert_eq!(data[2]["item"]["type"], "message");
    assert_eq!(data[2]["item"]["content"][0]["type"], "output_text");
    assert_eq!(data[4]["item"]["type"], "custom_tool_call");
    assert_eq!(data[4]["item"]["name"], "apply_patch");
    assert_eq!(
        data[5]["response"]["usage"],
        json!({"input_tokens": 1300, "input_tokens_details": {"cached_tokens": 300, "cache_write_tokens": 40},
            "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 1320})
    );
    let (_, _, sse) = read(responses::respond(&script(), &body(CODEX, 1))).await;
    let exec = &datas(&sse)[2]["item"];
    assert_eq!(exec["type"], "function_call");
    assert_eq!(exec["arguments"], "{\"cmd\":\"cat hello.txt\"}");
    assert!(exec["call_id"].as_str().unwrap().starts_with("call_"));
}

#[test]
fn gemini_gets_write_file_then_run_shell_command_and_counts_replays_once() {
    let s = script();
    let write = call(gemini::outcome(&s, &body(GEMINI, 0)));
    assert_eq!(write.name, "write_file");
    assert_eq!(
        json_args(&write),
        json!({"file_path": "<lab>/ws/gemini-basic/hello.txt", "content": "hello\n"})
    );
    let shell = call(gemini::outcome(&s, &body(GEMINI, 1)));
    assert_eq!(shell.name, "run_shell_command");
    assert_eq!(json_args(&shell)["command"], "cat hello.txt");
    assert!(json_args(&shell)["description"].is_string());
    // A resume replays the function responses: still step 2.
    let mut resumed = body(GEMINI, 2);
    let contents = resumed["contents"].as_array().unwrap().clone();
    resumed["contents"]
        .as_array_mut()
        .unwrap()
        .extend(contents[1..].iter().cloned());
    assert_eq!(gemini::step(&resumed), 2);
    let last = answer(gemini::outcome(&s, &resumed));
    assert_eq!(last.text.as_deref(), Some("All done."));
}

#[tokio::test]
async fn gemini_stream_carries_parts_and_usage_metadata() {
    let (_, _, sse) = read(gemini::respond(
        &script(),
        "gemini-2.5-pro:streamGenerateContent",
        &body(GEMINI, 0),
    ))
    .await;
    let data = datas(&sse);
    assert_eq!(data.len(), 1);
    let parts = &data[0]["candidates"][0]["content"]["parts"];
    assert_eq!(parts[0]["text"], "I'll create hello.txt.");
    assert_eq!(parts[1]["functionCall"]["name"], "write_file");
    assert_eq!(
        data[0]["usageMetadata"],
        json!({"promptTokenCount": 1300, "candidatesTokenCount": 20,
            "totalTokenCount": 1320, "cachedContentTokenCount": 300})
    );
    assert_eq!(data[0]["modelVersion"], "gemini-2.5-pro");
}

#[tokio::test]
async fn gemini_json_side_call_fits_the_schema_with_zero_usage() {
    let side = json!({
        "contents": [{"role": "user", "parts": [{"text": "who speaks next?"}]}],
        "generationConfig": {"responseMimeType": "application/json", "responseJsonSchema": {
            "type": "object", "properties": {
                "reasoning": {"type": "string"},
                "next_speaker": {"type": "string", "enum": ["model", "user"]}},
            "required": ["reasoning", "next_speaker"]}}});
    let (_, _, text) = read(gemini::respond(
        &script(),
        "gemini-2.5-flash:generateContent",
        &side,
    ))
    .await;
    let reply: Value = serde_json::from_str(&text).unwrap();
    let object: Value = serde_json::from_str(
        reply["candidates"][0]["content"]["parts"][0]["text"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(object["next_speaker"], "user");
    assert_eq!(reply["usageMetadata"]["promptTokenCount"], 0);
}

#[test]
fn opencode_gets_title_then_write_bash_text() {
    let s = script();
    let title = answer(chat::outcome(&s, &body(OPENCODE, 0)));
    assert_eq!(title.usage, Usage::ZERO);
    let write = call(chat::outcome(&s, &body(OPENCODE, 1)));
    assert_eq!(write.name, "write");
    assert_eq!(
        json_args(&write),
        json!({"filePath": "<lab>/ws/opencode-basic/hello.txt", "content": "hello\n"})
    );
    let bash = call(chat::outcome(&s, &body(OPENCODE, 2)));
    assert_eq!(
        (bash.name.as_str(), json_args(&bash)),
        ("bash", json!({"command": "cat hello.txt"}))
    );
    let last = answer(chat::outcome(&s, &body(OPENCODE, 3)));
    assert_eq!((last.text.as_deref(), last.call), (Some("All done."), None));
}

#[test]
fn cline_gets_editor_then_run_commands_then_text() {
    let s = script();
    let write = call(chat::outcome(&s, &body(CLINE, 0)));
    assert_eq!(write.name, "editor");
    assert_eq!(
        json_args(&write),
        json!({"path": "<lab>/ws/cline-basic/hello.txt", "new_text": "hello\n"})
    );
    let run = call(chat::outcome(&s, &body(CLINE, 1)));
    assert_eq!(
        (run.name.as_str(), json_args(&run)),
        ("run_commands", json!({"commands": ["cat hello.txt"]}))
    );
    let last = answer(chat::outcome(&s, &body(CLINE, 2)));
    assert_eq!((last.text.as_deref(), last.call), (Some("All done."), None));
}

#[test]
fn grok_gets_create_file_then_bash_then_text() {
    let s = script();
    let write = call(chat::outcome(&s, &body(GROK, 0)));
    assert_eq!(write.name, "create_file");
    assert_eq!(
        json_args(&write),
        json!({"path": "<lab>/ws/grok-basic/hello.txt", "content": "hello\n"})
    );
    let run = call(chat::outcome(&s, &body(GROK, 1)));
    assert_eq!(
        (run.name.as_str(), json_args(&run)),
        ("bash", json!({"command": "cat hello.txt"}))
    );
    let last = answer(chat::outcome(&s, &body(GROK, 2)));
    assert_eq!((last.text.as_deref(), last.call), (Some("All done."), None));
}

#[tokio::test]
async fn opencode_stream_sends_a_usage_chunk_when_asked() {
    let (_, _, sse) = read(chat::respond(&script(), &body(OPENCODE, 1))).await;
    assert!(sse.ends_with("data: [DONE]\n\n"));
    let data = datas(&sse);
    let call = &data[2]["choices"][0]["delta"]["tool_calls"][0];
    assert_eq!(
        (call["index"].clone(), call["function"]["name"].clone()),
        (json!(0), json!("write"))
    );
    let finish = &data[data.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "tool_calls");
    let usage = data.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(
        usage["usage"],
        json!({"prompt_tokens": 1300, "completion_tokens": 20, "total_tokens": 1320,
            "prompt_tokens_details": {"cached_tokens": 300}})
    );
}

#[tokio::test]
async fn mini_gets_bash_writes_and_submits_with_the_final_text() {
    let s = script();
    let write = call(chat::outcome(&s, &body(MINI, 0)));
    assert_eq!(write.name, "bash");
    assert_eq!(
        json_args(&write),
        json!({"command": "printf '%s' 'hello\n' > 'hello.txt'"})
    );
    let cat = call(chat::outcome(&s, &body(MINI, 1)));
    assert_eq!(json_args(&cat), json!({"command": "cat hello.txt"}));
    let (status, _, text) = read(chat::respond(&s, &body(MINI, 2))).await;
    assert_eq!(status, StatusCode::OK);
    let reply: Value = serde_json::from_str(&text).unwrap();
    let message = &reply["choices"][0]["message"];
    assert_eq!(message["content"], "All done.");
    assert_eq!(
        message["tool_calls"][0]["function"]["arguments"],
        "{\"command\":\"echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\"}"
    );
    assert_eq!(reply["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(reply["usage"]["prompt_tokens"], 1500);
    assert_eq!(reply["usage"]["completion_tokens"], 22);
}

#[test]
fn aider_gets_a_search_replace_block_then_a_commit_message() {
    let s = script();
    let main = answer(chat::outcome(&s, &body(AIDER, 0)));
    assert_eq!(
        main.text.as_deref(),
        Some(
            "I'll create hello.txt.\n\nhello.txt\n```\n<<<<<<< SEARCH\n=======\nhello\n>>>>>>> REPLACE\n```\n"
        )
    );
    assert_eq!(main.usage.input_tokens, 1000);
    let commit = answer(chat::outcome(&s, &body(AIDER, 1)));
    assert_eq!(commit.text.as_deref(), Some(chat::COMMIT_MESSAGE));
    assert_eq!(commit.usage, Usage::ZERO);
    // Once its own answer is in the history, aider is at step 1 (a shell: only text).
    let mut next = body(AIDER, 0);
    let messages = next["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": main.text}));
    messages.push(json!({"role": "user", "content": "I ran that. Use SEARCH/REPLACE blocks."}));
    let second = answer(chat::outcome(&s, &next));
    assert_eq!(second.text.as_deref(), Some("I would run `cat hello.txt`."));
    assert_eq!(second.usage.input_tokens, 1100);
}

#[tokio::test]
async fn error_steps_answer_the_status_and_retry_after_in_each_protocol() {
    let s = error_script();
    let cases = [
        anthropic::respond(&s, &body(CLAUDE, 1)),
        responses::respond(&s, &body(CODEX, 0)),
        chat::respond(&s, &body(OPENCODE, 1)),
        chat::respond(&s, &body(MINI, 0)),
        chat::respond(&s, &body(AIDER, 0)),
        gemini::respond(&s, "gemini-2.5-pro:streamGenerateContent", &body(GEMINI, 0)),
    ];
    for response in cases {
        let (status, retry, text) = read(response).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{text}");
        assert_eq!(retry.as_deref(), Some("2"));
        assert!(text.contains("slow down"), "{text}");
    }
    // Side calls are not scripted, so they do not fail.
    let title = read(chat::respond(&s, &body(OPENCODE, 0))).await;
    assert_eq!(title.0, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_starts_in_the_callers_runtime_records_and_stops() {
    use std::io::{Read, Write};
    let server = super::ScriptedServer::start(script(), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let url = server.url();
    assert!(
        url.starts_with("http://127.0.0.1:") && !url.ends_with(":0"),
        "{url}"
    );
    let addr = server.addr();
    let reply = tokio::task::spawn_blocking(move || {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
        write!(
            stream,
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-1\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut out = String::new();
        stream.read_to_string(&mut out).unwrap();
        out
    })
    .await
    .unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(reply.contains(super::request::SIDE_TEXT), "{reply}");
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0]["method"], "POST");
    assert_eq!(requests[0]["path"], "/v1/chat/completions");
    assert_eq!(requests[0]["headers"]["authorization"], "<redacted len=11>");
    assert_eq!(requests[0]["body"]["model"], "m");
    // Not checked by connecting again: another test may already hold the freed port.
    server.stop().await;
}

/// `split` streams text and arguments in pieces of at most that many characters, which join
/// to the whole; `{cwd}` is the client's working directory.
#[tokio::test]
async fn split_streams_pieces_in_each_protocol() {
    let s = Script::parse(
        "split: 4\nsteps:\n  - text: I'm in {cwd}.\n    shell: cat {cwd}/hello.txt\n",
        Path::new("split.yaml"),
    )
    .unwrap();
    // A real path: Codex's `<cwd>` cannot hold `<lab>`.
    let lab = |capture, line| {
        serde_json::from_str(&body(capture, line).to_string().replace("<lab>", "/lab")).unwrap()
    };
    // Each protocol's fragments: (which stream, JSON pointer) per event.
    type Fragments = fn(&Value) -> Vec<(String, String)>;
    let anthropic_pieces: Fragments = |e| {
        ["text", "partial_json"]
            .iter()
            .filter(|f| e["delta"][**f].is_string())
            .map(|f| (f.to_string(), format!("/delta/{f}")))
            .collect()
    };
    let responses_pieces: Fragments = |e| {
        let kind = e["type"].as_str().unwrap_or_default();
        kind.ends_with(".delta")
            .then(|| (kind.to_owned(), "/delta".to_owned()))
            .into_iter()
            .collect()
    };
    let chat_pieces: Fragments = |e| {
        let delta = &e["choices"][0]["delta"];
        let mut out = Vec::new();
        if delta["content"].as_str().is_some_and(|c| !c.is_empty()) {
            out.push(("text".into(), "/choices/0/delta/content".into()));
        }
        if delta["tool_calls"][0]["function"]["arguments"].is_string() {
            let pointer = "/choices/0/delta/tool_calls/0/function/arguments";
            out.push(("call".into(), pointer.into()));
        }
        out
    };
    let gemini_pieces: Fragments = |e| {
        e["candidates"][0]["content"]["parts"][0]["text"]
            .is_string()
            .then(|| ("text".into(), "/candidates/0/content/parts/0/text".into()))
            .into_iter()
            .collect()
    };
    let cases = [
        (
            anthropic::respond(&s, &lab(CLAUDE, 1)),
            "claude",
            anthropic_pieces,
        ),
        (
            responses::respond(&s, &lab(CODEX, 0)),
            "codex",
            responses_pieces,
        ),
        (
            chat::respond(&s, &lab(OPENCODE, 1)),
            "opencode",
            chat_pieces,
        ),
        (
            gemini::respond(&s, "m:streamGenerateContent", &lab(GEMINI, 0)),
            "gemini",
            gemini_pieces,
        ),
    ];
    for (response, cli, pieces) in cases {
        let (_, _, sse) = read(response).await;
        let cwd = format!("/lab/ws/{cli}-basic");
        let mut joined: Vec<(String, String)> = Vec::new();
        for event in datas(&sse) {
            for (key, pointer) in pieces(&event) {
                let piece = event.pointer(&pointer).unwrap().as_str().unwrap();
                assert!(piece.chars().count() <= 4, "{cli}: {piece:?}");
                match joined.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, text)) => text.push_str(piece),
                    None => joined.push((key, piece.to_owned())),
                }
            }
        }
        let texts: Vec<&str> = joined.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(texts[0], format!("I'm in {cwd}."), "{cli}: {sse}");
        match texts.get(1) {
            // Gemini streams a function call whole.
            None => assert!(sse.contains(&format!("cat {cwd}/hello.txt")), "{sse}"),
            Some(arguments) => {
                let arguments: Value = serde_json::from_str(arguments).unwrap();
                let command = arguments.get("cmd").or(arguments.get("command")).unwrap();
                assert_eq!(command, &json!(format!("cat {cwd}/hello.txt")), "{cli}");
            }
        }
    }
}
