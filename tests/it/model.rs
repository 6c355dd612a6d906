//! `deltabench model serve`: the real binary on a loopback port, spoken to over raw HTTP.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{deltabench, temp_dir};

const SCRIPT: &str = "\
usage: {input_tokens: 1000, output_tokens: 20}
steps:
  - text: I'll create hello.txt.
    write: {path: hello.txt, content: \"hello\\n\"}
  - shell: cat hello.txt
  - error: {status: 529, message: overloaded, retry_after: 3}
";

/// Kills the server if a test fails before stopping it.
struct Server {
    child: Child,
    root: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(dir: &std::path::Path, extra: &[&str]) -> Server {
    std::fs::write(dir.join("script.yaml"), SCRIPT).unwrap();
    let mut child = deltabench(dir)
        .args(["model", "serve", "script.yaml"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    // The server prints one line once it listens; EOF (a crash) ends the read too.
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let root = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    assert!(root.starts_with("http://127.0.0.1:"), "{root}");
    Server { child, root }
}

/// One HTTP/1.1 request; returns status, headers (lowercased names) and body.
fn http(
    root: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> (u16, Vec<(String, String)>, String) {
    let addr = root.strip_prefix("http://").unwrap();
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(&body);
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(n, v)| (n.to_ascii_lowercase(), v.to_owned()))
        .collect();
    (status, headers, body.to_owned())
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

fn bash_tool() -> Value {
    json!([{"type": "function", "function": {"name": "bash",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}])
}

#[test]
fn serve_answers_the_protocols_logs_and_stops_on_sigterm() {
    let dir = temp_dir();
    let mut server = serve(dir.path(), &["--log", "requests.jsonl"]);
    let root = server.root.clone();

    // mini-swe-agent style, step 0: a bash call that writes the file.
    let chat = json!({"model": "m", "tools": bash_tool(),
        "messages": [{"role": "user", "content": "go"}]});
    let (status, _, body) = http(
        &root,
        "POST",
        "/v1/chat/completions",
        &[("Authorization", "Bearer sk-secret")],
        Some(&chat),
    );
    assert_eq!(status, 200, "{body}");
    let reply: Value = serde_json::from_str(&body).unwrap();
    let call = &reply["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "bash");
    assert!(call["arguments"].as_str().unwrap().contains("hello.txt"));
    assert_eq!(reply["usage"]["prompt_tokens"], 1000);

    // Claude style, step 1 (one tool result in the history): Bash over SSE.
    let messages = json!({"model": "claude", "stream": true, "max_tokens": 10,
        "system": [{"type": "text", "text": "Primary working directory: /srv/ws\n"}],
        "tools": [{"name": "Bash", "input_schema": {"properties": {"command": {}}}}],
        "messages": [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]}]});
    let (status, headers, body) = http(
        &root,
        "POST",
        "/v1/messages?beta=true",
        &[("x-api-key", "sk-ant-secret")],
        Some(&messages),
    );
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "content-type"), Some("text/event-stream"));
    assert!(body.starts_with("event: message_start\n"), "{body}");
    assert!(body.contains(r#""name":"Bash""#), "{body}");
    assert!(body.contains("cat hello.txt"), "{body}");

    // Gemini style, step 2: the scripted 529 with retry-after.
    let gemini = json!({"contents": [{"role": "user", "parts": [
            {"functionResponse": {"id": "a", "name": "x", "response": {}}},
            {"functionResponse": {"id": "b", "name": "x", "response": {}}}]}],
        "tools": [{"functionDeclarations": [{"name": "run_shell_command",
            "parametersJsonSchema": {"properties": {"command": {}}}}]}]});
    let (status, headers, body) = http(
        &root,
        "POST",
        "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
        &[],
        Some(&gemini),
    );
    assert_eq!(status, 529, "{body}");
    assert_eq!(header(&headers, "retry-after"), Some("3"));

    // Codex's WebSocket probe, HEAD /, the model list and an unknown path.
    let (status, _, _) = http(
        &root,
        "GET",
        "/v1/responses",
        &[("Upgrade", "websocket"), ("Connection", "Upgrade")],
        None,
    );
    assert_eq!(status, 426);
    assert_eq!(http(&root, "HEAD", "/", &[], None).0, 200);
    let (status, _, body) = http(&root, "GET", "/v1/models", &[], None);
    assert_eq!(status, 200);
    assert!(serde_json::from_str::<Value>(&body).unwrap()["data"].is_array());
    let (status, _, body) = http(&root, "POST", "/v9/whatever", &[], Some(&json!({})));
    assert_eq!((status, body.as_str()), (200, "{}"));

    // SIGTERM: exit 0.
    let pid = nix::unistd::Pid::from_raw(server.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let mut exited = None;
    crate::common::wait_until(
        Duration::from_secs(5),
        "the server's exit on SIGTERM",
        || {
            exited = server.child.try_wait().unwrap();
            exited.is_some()
        },
    );
    let status = exited.unwrap();
    assert_eq!(status.code(), Some(0));

    let log = std::fs::read_to_string(dir.path().join("requests.jsonl")).unwrap();
    let records: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 7, "{log}");
    assert_eq!(records[0]["method"], "POST");
    assert_eq!(records[0]["path"], "/v1/chat/completions");
    assert_eq!(records[0]["body"]["model"], "m");
    assert_eq!(records[0]["headers"]["authorization"], "<redacted len=16>");
    assert_eq!(records[1]["path"], "/v1/messages?beta=true");
    assert_eq!(records[1]["headers"]["x-api-key"], "<redacted len=13>");
    assert!(!log.contains("secret"));
    assert_eq!(records[6]["note"], "unknown");
}

#[test]
fn a_bad_script_exits_2_with_its_location() {
    let dir = temp_dir();
    std::fs::write(
        dir.path().join("bad.yaml"),
        "steps:\n  - text: hi\n    wrte: {path: a, content: b}\n",
    )
    .unwrap();
    let output = deltabench(dir.path())
        .args(["model", "serve", "bad.yaml"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    crate::common::assert_tmp_snapshot!("serve_a_bad_script", dir.path(), stderr);
}

#[test]
fn help_teaches_the_script_format() {
    let dir = temp_dir();
    let output = deltabench(dir.path())
        .args(["model", "serve", "--help"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for needle in [
        "steps:",
        "write: {path:",
        "shell:",
        "error: {status:",
        "loop:",
        "--port",
    ] {
        assert!(help.contains(needle), "--help lacks {needle:?}:\n{help}");
    }
}
