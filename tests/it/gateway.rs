//! deltabench's model gateway: each dialect's usage counted from the provider's answers,
//! streamed or not, the real key put in for the placeholder, budgets refused in each API's
//! own error shape; and through the binary, a `command` agent that opts in.

use std::net::SocketAddr;

use deltabench::agent::{Budget, BudgetStop, Usage};
use deltabench::gateway::{Gateway, TrialSetup, Upstream};
use deltabench::model::{Script, ScriptedServer};
use serde_json::{Value, json};

use crate::common::{git_repo, run_suite, stderr, temp_dir, trials, write_files, write_suite};

/// Every main call answers "Done." with these numbers.
const DONE: &str = "usage: {input_tokens: 1000, output_tokens: 20, cache_read_tokens: 30}
steps:
  - text: Done.
";

/// One model call per dialect and mode: (path, body).
fn calls() -> Vec<(&'static str, Value)> {
    let anthropic = |stream: bool| {
        json!({"model": "claude-sonnet-4-5", "max_tokens": 100, "stream": stream,
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"name": "Bash", "input_schema": {"type": "object"}}]})
    };
    let responses = |stream: bool| {
        json!({"model": "gpt-5.5", "stream": stream, "input": "hi",
            "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}}]})
    };
    let chat = |stream: bool| {
        json!({"model": "fake-model", "stream": stream,
            "stream_options": if stream { json!({"include_usage": true}) } else { Value::Null },
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]})
    };
    let gemini = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "tools": [{"functionDeclarations": [{"name": "run_shell_command", "parameters": {"type": "object"}}]}]});
    vec![
        ("/v1/messages", anthropic(true)),
        ("/v1/messages", anthropic(false)),
        ("/v1/responses", responses(true)),
        ("/v1/responses", responses(false)),
        ("/v1/chat/completions", chat(true)),
        ("/v1/chat/completions", chat(false)),
        (
            "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
            gemini.clone(),
        ),
        ("/v1beta/models/gemini-2.5-pro:generateContent", gemini),
    ]
}

async fn scripted(text: &str) -> ScriptedServer {
    let script = Script::parse(text, std::path::Path::new("model.yaml")).unwrap();
    ScriptedServer::start(script, SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap()
}

fn setup(upstream: &ScriptedServer, budget: Budget) -> TrialSetup {
    TrialSetup {
        upstream: Upstream::single(&upstream.url(), Some("the-real-key".into())),
        budget,
        price: None,
        model: None,
        stop: BudgetStop::new(),
        ..TrialSetup::default()
    }
}

/// POSTs `body` to `url` with a placeholder key in each header a client may use.
async fn post(url: &str, body: &Value) -> (u16, String) {
    let answer = reqwest::Client::new()
        .post(url)
        .header("x-api-key", "sk-placeholder")
        .header("authorization", "Bearer sk-placeholder")
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    (status, answer.text().await.unwrap())
}

#[tokio::test]
async fn each_dialect_is_counted_streamed_or_not_and_gets_the_real_key() {
    let upstream = scripted(DONE).await;
    let gateway = Gateway::start().await.unwrap();
    for (path, body) in calls() {
        let lease = gateway.register(setup(&upstream, Budget::default()));
        let (status, text) = post(&format!("{}{path}", lease.url()), &body).await;
        assert_eq!(status, 200, "{path}: {text}");
        assert!(
            text.contains("Done."),
            "{path}: the answer passes as is: {text}"
        );
        let usage = lease.usage();
        assert_eq!(
            (
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_read_tokens,
                usage.model_calls
            ),
            (1000, 20, 30, 1),
            "{path} {body}"
        );
        // Priced from the table where the model is in it.
        if path.contains("messages") {
            let cost = usage.cost_usd.unwrap();
            assert!((cost - (1000.0 * 3.0 + 20.0 * 15.0 + 30.0 * 0.3) / 1e6).abs() < 1e-9);
            assert!(usage.cost_estimated);
        }
    }
    // Both key headers carried the real key (12 characters), never the placeholder.
    for request in upstream.requests() {
        assert_eq!(
            request["headers"]["x-api-key"], "<redacted len=12>",
            "{request}"
        );
        assert_eq!(
            request["headers"]["authorization"], "<redacted len=19>",
            "{request}"
        );
    }
    // An answer keeps the length the provider gave it (a client may read it up front).
    let lease = gateway.register(setup(&upstream, Budget::default()));
    let (path, body) = calls().swap_remove(0);
    let answer = reqwest::Client::new()
        .post(format!("{}{path}", lease.url()))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let length = answer.headers().get("content-length").cloned();
    let text = answer.text().await.unwrap();
    assert_eq!(
        length.map(|l| l.to_str().unwrap().to_owned()),
        Some(text.len().to_string()),
        "{path}: {text}"
    );
    // Token counts and model lists pass uncounted.
    let lease = gateway.register(setup(&upstream, Budget::default()));
    let (status, _) = post(
        &format!("{}/v1/messages/count_tokens", lease.url()),
        &json!({}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        lease.usage(),
        Usage {
            cost_usd: Some(0.0),
            cost_estimated: true,
            ..Usage::default()
        }
    );
    // A trial that is gone gets nothing.
    let url = lease.url().to_owned();
    drop(lease);
    assert_eq!(post(&format!("{url}/v1/messages"), &json!({})).await.0, 404);
    upstream.stop().await;
}

/// Under `network: model` the provider's own web tools never reach it (the model would fetch
/// the web for the agent); the agent's own tools pass, and a trial with another network keeps
/// every tool as sent.
#[tokio::test]
async fn the_providers_web_tools_are_removed_for_a_model_only_network() {
    let upstream = scripted(DONE).await;
    let gateway = Gateway::start().await.unwrap();
    let web = [
        (
            "/v1/messages",
            json!({"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}],
                "tools": [{"name": "Bash", "input_schema": {"type": "object"}},
                          {"type": "web_search_20250305", "name": "web_search"}]}),
        ),
        (
            "/v1/responses",
            json!({"model": "gpt-5.5", "input": "hi",
                "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}},
                          {"type": "web_search"}]}),
        ),
        (
            "/v1beta/models/gemini-2.5-pro:generateContent",
            json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
                "tools": [{"functionDeclarations": [{"name": "run_shell_command"}]}, {"googleSearch": {}}]}),
        ),
    ];
    for without_web_tools in [true, false] {
        let lease = gateway.register(TrialSetup {
            without_web_tools,
            ..setup(&upstream, Budget::default())
        });
        for (path, body) in &web {
            let (status, text) = post(&format!("{}{path}", lease.url()), body).await;
            assert_eq!(status, 200, "{path}: {text}");
        }
        let seen = upstream.requests();
        let forwarded: Vec<String> = seen[seen.len() - web.len()..]
            .iter()
            .map(|r| r["body"]["tools"].to_string())
            .collect();
        for (tools, (path, sent)) in forwarded.iter().zip(&web) {
            let has_web = tools.contains("web_search") || tools.contains("googleSearch");
            assert_eq!(has_web, !without_web_tools, "{path}: {tools}");
            // The agent's own tool always passes.
            let own = sent["tools"][0].to_string();
            assert!(tools.contains(&own[1..own.len() - 1]), "{path}: {tools}");
        }
    }
    upstream.stop().await;
}

#[tokio::test]
async fn a_budget_refuses_the_call_after_it_is_spent_in_the_apis_own_shape() {
    let upstream = scripted(DONE).await;
    let gateway = Gateway::start().await.unwrap();
    for (path, body) in calls().into_iter().step_by(2) {
        let tokens = Budget {
            tokens: Some(1500),
            ..Budget::default()
        };
        let lease = gateway.register(setup(&upstream, tokens));
        let url = format!("{}{path}", lease.url());
        // 1050 tokens spent is under 1500: the second call goes; the third is refused.
        assert_eq!(post(&url, &body).await.0, 200);
        assert!(lease.stop().tripped().is_none());
        assert_eq!(post(&url, &body).await.0, 200);
        let (status, text) = post(&url, &body).await;
        assert_eq!(status, 400, "{path}: {text}");
        let error: Value = serde_json::from_str(&text).unwrap();
        let message = if path.contains("messages") {
            assert_eq!(error["type"], "error", "{error}");
            &error["error"]["message"]
        } else {
            &error["error"]["message"]
        };
        assert!(
            message
                .as_str()
                .unwrap()
                .contains("2100 tokens used of a budget of 1500"),
            "{error}"
        );
        let reason = lease.stop().tripped().expect("the stop tripped");
        assert!(reason.contains("budget"), "{reason}");
        let usage = lease.usage();
        assert_eq!((usage.input_tokens, usage.model_calls), (2000, 2));
    }
    let calls = Budget {
        model_calls: Some(1),
        ..Budget::default()
    };
    let lease = gateway.register(setup(&upstream, calls));
    let (path, body) = &calls_of_gemini();
    let url = format!("{}{path}", lease.url());
    assert_eq!(post(&url, body).await.0, 200);
    let (status, text) = post(&url, body).await;
    assert_eq!(status, 400);
    let error: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(error["error"]["status"], "FAILED_PRECONDITION", "{error}");
    upstream.stop().await;
}

fn calls_of_gemini() -> (&'static str, Value) {
    calls().pop().unwrap()
}

/// A suite whose `command` agent makes three Anthropic calls with curl through the gateway,
/// having written hello.txt first.
fn command_suite(agent_extra: &str, suite_extra: &str) -> tempfile::TempDir {
    let tmp = temp_dir();
    git_repo(tmp.path(), &[("README.md", "# demo\n")]);
    let call = r#"curl -sS -o /dev/null -w '%{http_code}\n' "$ANTHROPIC_BASE_URL/v1/messages" -H "x-api-key: $ANTHROPIC_API_KEY" -H 'content-type: application/json' -d '{"model":"claude-sonnet-4-5","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"Bash","input_schema":{"type":"object"}}]}'"#;
    write_files(
        tmp.path(),
        &[
            ("model.yaml", DONE),
            (
                "agent.sh",
                &format!(
                    "#!/bin/sh\necho hello > hello.txt\necho \"key: $ANTHROPIC_API_KEY\"\n{call}\n{call}\n{call}\nsleep 30\n"
                ),
            ),
        ],
    );
    use std::os::unix::fs::PermissionsExt;
    let script = tmp.path().join("agent.sh");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    write_suite(
        tmp.path(),
        &format!(
            "name: gateway
repo: repo
tasks:
  - id: hello
    base: main
    instruction: Create hello.txt.
    verify: test -f hello.txt
agents:
  a:
    kind: command
    run: ./agent.sh
    gateway: true
    endpoint: scripted:model.yaml
    timeout: 60s{agent_extra}
{suite_extra}"
        ),
    );
    tmp
}

#[test]
fn a_command_agent_that_opts_in_is_counted_and_stopped_at_its_budget() {
    if !crate::common::have_command("the gateway's command tests", "curl") {
        return;
    }
    let tmp = command_suite("\n    budget: {tokens: 1500}", "");
    let (output, _, out) = run_suite(tmp.path(), &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let records = trials(&out);
    let record = &records[0];
    assert_eq!(record["status"], "budget_exceeded", "{record:#}");
    // Scored on its delta, like a turn limit.
    assert_eq!(record["outcome"], "pass", "{record:#}");
    assert_eq!(record["usage_source"], "gateway");
    assert_eq!(record["gateway_usage"]["input_tokens"], 2000, "{record:#}");
    assert_eq!(record["gateway_usage"]["model_calls"], 2);
    assert_eq!(record["usage"], record["gateway_usage"]);
    // Stopped at once, not after its sleep.
    assert!(
        record["agent_duration_ms"].as_u64().unwrap() < 20_000,
        "{record:#}"
    );
    let log = std::fs::read_to_string(out.join("trials/hello/a/1/agent.log")).unwrap_or_default();
    assert!(
        log.contains("key: sk-deltabench-local"),
        "a placeholder key: {log}"
    );
    // The third call was refused; the agent was stopped before it could go on.
    assert!(log.contains("200\n200\n"), "{log}");
    let events = std::fs::read_to_string(out.join("trials/hello/a/1/events.jsonl")).unwrap();
    assert!(events.contains("budget_exceeded"), "{events}");
}

#[test]
fn the_suites_budget_is_every_gateway_agents_default() {
    if !crate::common::have_command("the gateway's command tests", "curl") {
        return;
    }
    // The agent's own limit stays; the suite's adds the one it leaves unset.
    let tmp = command_suite(
        "\n    budget: {tokens: 100000}",
        "budget: {model_calls: 1}\n",
    );
    let (output, _, out) = run_suite(tmp.path(), &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let record = &trials(&out)[0];
    assert_eq!(record["status"], "budget_exceeded", "{record:#}");
    assert_eq!(record["gateway_usage"]["model_calls"], 1, "{record:#}");
    let manifest = std::fs::read_to_string(out.join("manifest.json")).unwrap();
    assert!(manifest.contains("\"model_calls\": 1"), "{manifest}");
    assert!(manifest.contains("\"tokens\": 100000"), "{manifest}");
}

/// The `wall` budget runs out while the agent makes no call (it sleeps after its three): the
/// trial is stopped then, not at the next call that never comes.
#[test]
fn a_wall_budget_stops_an_agent_that_makes_no_call() {
    if !crate::common::have_command("the gateway's command tests", "curl") {
        return;
    }
    let tmp = command_suite("\n    budget: {wall: 3s}", "");
    let (output, _, out) = run_suite(tmp.path(), &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let record = &trials(&out)[0];
    assert_eq!(record["status"], "budget_exceeded", "{record:#}");
    assert_eq!(record["gateway_usage"]["model_calls"], 3, "{record:#}");
    // Stopped in its 30 s sleep.
    assert!(
        record["agent_duration_ms"].as_u64().unwrap() < 20_000,
        "{record:#}"
    );
    let events = std::fs::read_to_string(out.join("trials/hello/a/1/events.jsonl")).unwrap();
    assert!(events.contains("the budget allows 3s"), "{events}");
}

/// A `cost_usd` budget is never kept blind: once a call's model has no price, the next call is
/// refused and the trial ends `budget_exceeded`, saying why.
#[test]
fn a_cost_budget_refuses_calls_it_cannot_price() {
    if !crate::common::have_command("the gateway's command tests", "curl") {
        return;
    }
    let tmp = command_suite("\n    budget: {cost_usd: 100}", "");
    let script = tmp.path().join("agent.sh");
    let text = std::fs::read_to_string(&script).unwrap();
    std::fs::write(&script, text.replace("claude-sonnet-4-5", "unpriced-model")).unwrap();
    let (output, _, out) = run_suite(tmp.path(), &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let record = &trials(&out)[0];
    assert_eq!(record["status"], "budget_exceeded", "{record:#}");
    assert_eq!(record["gateway_usage"]["model_calls"], 1, "{record:#}");
    let events = std::fs::read_to_string(out.join("trials/hello/a/1/events.jsonl")).unwrap();
    assert!(
        events.contains("a `cost_usd` budget cannot be kept, since no price is known for model 'unpriced-model' (set the agent's `price:`)"),
        "{events}"
    );
}
