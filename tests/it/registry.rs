//! The built-in CLIs' registry: each CLI's facts in its own file, the lists made from
//! `HarnessKind::ALL`, and the manifest's shape for agents of several kinds.

use std::path::Path;

use crate::common::{git_repo, rust_files, temp_dir, write_files, write_suite};

/// The agents of a manifest serialize as before the harness kinds became one variant: `kind`
/// first, then the config's keys, for built-in CLIs, a `kind: cli` definition and the others.
#[test]
fn a_manifest_of_several_kinds_keeps_its_shape() {
    let tmp = temp_dir();
    git_repo(tmp.path(), &[("README.md", "# demo\n")]);
    write_files(tmp.path(), &[("tool.sh", "#!/bin/sh\n")]);
    let path = write_suite(
        tmp.path(),
        "name: registry
repo: repo
tasks:
  - id: hello
    base: main
    instruction: Say hello.
    verify: 'true'
agents:
  claude:
    kind: claude-code
    model: claude-sonnet-4-5
    max_turns: 3
    permission_mode: acceptEdits
    append_system_prompt: Be brief.
    args: [--bare]
    env: {FOO: bar}
    timeout: 90s
  codex:
    kind: codex
    model: gpt-5
    endpoint: http://127.0.0.1:9
    network: host
    budget: {tokens: 1000}
  aider:
    kind: aider
    model: openai/gpt-4.1
    price: {input: 1.0, output: 2.0}
  custom:
    kind: cli
    command: ./tool.sh
    dialect: openai
    output: {parser: json-lines, result: answer}
    args: ['{instruction}', --model, '{model}']
    model: m1
  scripted:
    kind: command
    run: echo hi
  mocked:
    kind: mock
",
    );
    let suite = deltabench::suite::load(&path, None).unwrap();
    let json = serde_json::to_string_pretty(&suite.agents).unwrap();
    let json = json.replace(&tmp.path().display().to_string(), "[TMP]");
    insta::assert_snapshot!(json);
}

fn src() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The module file of each built-in CLI, by its variant's name.
const FILES: &[(&str, &str)] = &[
    ("ClaudeCode", "claude.rs"),
    ("Codex", "codex.rs"),
    ("GeminiCli", "gemini.rs"),
    ("Opencode", "opencode.rs"),
    ("MiniSweAgent", "mini_swe.rs"),
    ("Aider", "aider.rs"),
    ("QwenCode", "qwen.rs"),
    ("ContinueCli", "continue_cli.rs"),
    ("Pi", "pi.rs"),
    ("Gptme", "gptme.rs"),
    ("Cline", "cline.rs"),
    ("GrokCli", "grok.rs"),
];

/// Where `HarnessKind::X` (or `Self::X` in the registry's file) may be named outside `x.rs`:
/// the variant, `ALL` and the one `cli()` arm. Tests are code too.
#[test]
fn a_cli_is_named_only_in_the_registry_and_its_file() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let harness = src().join("agent/harness");
    let mut strays = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let registry = file == &harness.join("config.rs");
        for (number, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for (variant, own) in FILES {
                if file == &harness.join(own) {
                    continue;
                }
                let named = code.contains(&format!("HarnessKind::{variant}"))
                    && !code.contains(&format!("HarnessKind::{variant}s"));
                let in_registry = registry
                    && (code.trim() == format!("{variant},")
                        || code.trim() == format!("Self::{variant},")
                        || code
                            .trim_start()
                            .starts_with(&format!("Self::{variant} => &super::")));
                let named_in_registry = registry
                    && (code.contains(&format!("Self::{variant} "))
                        || code.contains(&format!("Self::{variant})"))
                        || code.contains(&format!("Self::{variant},")))
                    && !in_registry;
                if named || named_in_registry {
                    strays.push(format!(
                        "{}:{}: {}",
                        file.strip_prefix(src()).unwrap().display(),
                        number + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(
        strays.is_empty(),
        "a built-in CLI named outside the registry (`HarnessKind::cli`) and its own file: \
         move the fact into the CLI's `BuiltinCli` impl\n{}",
        strays.join("\n")
    );
    // Every variant has its file and one registry arm.
    let registry = std::fs::read_to_string(harness.join("config.rs")).unwrap();
    for (variant, own) in FILES {
        assert!(harness.join(own).is_file(), "{own}");
        let stem = own.trim_end_matches(".rs");
        assert_eq!(
            registry
                .matches(&format!("Self::{variant} => &super::{stem}::Adapter,"))
                .count(),
            1,
            "{variant}'s arm in `cli()`"
        );
    }
}

/// docs/agents.md's table of built-in CLIs is `deltabench agents`: one row per CLI of
/// `HarnessKind::ALL`, in its order, with its kind, program and package.
#[test]
fn the_docs_table_is_the_registry() {
    let docs =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/agents.md"))
            .unwrap();
    let rows: Vec<&str> = docs
        .lines()
        .skip_while(|line| !line.starts_with("<!-- cli table"))
        .skip(1)
        .take_while(|line| line.starts_with('|'))
        .collect();
    let wanted = deltabench::agent::harness::builtin::docs_table();
    assert_eq!(
        rows.join("\n"),
        wanted.trim_end(),
        "docs/agents.md's CLI table; regenerate it from `docs_table()` (agent/harness/builtin.rs)"
    );
    assert_eq!(
        rows.len(),
        2 + FILES.len(),
        "a header, a rule and a row per CLI"
    );
}
