#!/usr/bin/env python3
"""What deltabench adds to a real agent CLI's run. Prints medians and ratios measured side by side.

    python3 benches/cli_overhead.py [N] [KIND...]   # N runs per arm (default 5); all kinds by default

For each installed CLI of claude-code, codex, gemini-cli, qwen-code, continue-cli, pi, gptme, cline
and grok-cli: the same task (write hello.txt,
show it, finish: three scripted model calls) run N times

  direct      the CLI by hand as recipes do it: a fresh git repo and HOME on tmpfs, `env -i`,
              the config it needs, stdin closed, against `deltabench model serve`;
  deltabench  `deltabench run suites/smoke --agent KIND --trials N -j 1`: provision, the
              adapter (HOME, config files, stream parsing, events.jsonl), probe, verify, score.

The deltabench figure is the trial's wall time from its record, so it includes provisioning,
the diff and the verify command, which the direct arm does not do. Not a test: numbers on a
shared machine are noisy; read the ratio.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
BIN = os.path.join(TARGET, "release", "deltabench")
N = int(sys.argv[1]) if len(sys.argv) > 1 else 5
ONLY = set(sys.argv[2:])
KINDS = (("claude-code", "claude"), ("codex", "codex"), ("gemini-cli", "gemini"),
         ("qwen-code", "qwen"), ("continue-cli", "cn"), ("pi", "pi"),
         ("gptme", "gptme"), ("cline", "cline"), ("grok-cli", "grok"))
TMP = "/dev/shm" if os.path.isdir("/dev/shm") else None
TOOLS = os.environ.get("DELTABENCH_AGENT_TOOLS") or os.path.expanduser("~/.cache/deltabench/agents")
BINS = os.path.join(TOOLS, "npm", "node_modules", ".bin")
# The Python CLIs' launchers (gptme's links into its own venv).
VENV_BINS = os.path.join(TOOLS, "venv", "bin")


def program_path(program):
    npm = os.path.join(BINS, program)
    return npm if os.path.exists(npm) else os.path.join(VENV_BINS, program)
TASK = "Create hello.txt with a greeting, then show it."


def fresh_repo(root):
    repo = os.path.join(root, "repo")
    os.makedirs(repo)
    env = dict(os.environ, GIT_CONFIG_GLOBAL="/dev/null", GIT_AUTHOR_NAME="b",
               GIT_AUTHOR_EMAIL="b@b", GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@b")
    for cmd in (["git", "init", "-q"], ["git", "commit", "-q", "--allow-empty", "-m", "base"]):
        subprocess.run(cmd, cwd=repo, env=env, check=True)
    return repo


def direct(kind, url):
    """One run of the CLI by hand; returns wall seconds."""
    root = tempfile.mkdtemp(dir=TMP)
    try:
        repo = fresh_repo(root)
        home = os.path.join(root, "home")
        os.makedirs(home)
        env = {"PATH": os.environ["PATH"], "HOME": home, "TERM": "dumb"}
        if kind == "claude-code":
            env.update(ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="sk-fake", IS_SANDBOX="1",
                       CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")
            cmd = [os.path.join(BINS, "claude"), "-p", TASK, "--output-format", "stream-json",
                   "--verbose", "--permission-mode", "bypassPermissions", "--model",
                   "claude-sonnet-4-5"]
        elif kind == "codex":
            codex_home = os.path.join(home, ".codex")
            os.makedirs(codex_home)
            with open(os.path.join(codex_home, "config.toml"), "w") as f:
                f.write('model = "gpt-5.5"\nmodel_provider = "s"\napproval_policy = "never"\n'
                        'sandbox_mode = "danger-full-access"\n[model_providers.s]\nname = "s"\n'
                        f'base_url = "{url}/v1"\nenv_key = "K"\nwire_api = "responses"\n')
            env.update(CODEX_HOME=codex_home, K="fake")
            cmd = [os.path.join(BINS, "codex"), "exec", "--json", TASK]
        elif kind == "qwen-code":
            # The settings the adapter writes: no telemetry, usage statistics or update checks.
            os.makedirs(os.path.join(home, ".qwen"))
            with open(os.path.join(home, ".qwen", "settings.json"), "w") as f:
                json.dump({"privacy": {"usageStatisticsEnabled": False},
                           "telemetry": {"enabled": False},
                           "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
                           "security": {"folderTrust": {"enabled": False}}}, f)
            env.update(OPENAI_BASE_URL=f"{url}/v1", OPENAI_API_KEY="fake",
                       QWEN_CODE_SUPPRESS_YOLO_WARNING="1")
            cmd = [os.path.join(BINS, "qwen"), "--prompt=" + TASK, "--auth-type", "openai",
                   "--output-format", "stream-json", "--approval-mode", "yolo", "--model",
                   "scripted-model"]
        elif kind == "continue-cli":
            # The config the adapter writes: one OpenAI-compatible model at the endpoint.
            config = os.path.join(home, "config.yaml")
            with open(config, "w") as f:
                json.dump({"name": "bench", "version": "0.0.1", "schema": "v1",
                           "models": [{"name": "bench", "provider": "openai",
                                       "model": "scripted-model", "apiBase": f"{url}/v1",
                                       "apiKey": "fake", "roles": ["chat", "edit", "apply"]}]}, f)
            env.update(CONTINUE_CLI_ENABLE_TELEMETRY="0", CONTINUE_METRICS_ENABLED="0")
            cmd = [os.path.join(BINS, "cn"), "-p", "--auto", "--format", "json", "--config",
                   config, "--", TASK]
        elif kind == "pi":
            # The agent dir the adapter writes: one OpenAI-compatible provider at the endpoint.
            agent = os.path.join(home, ".pi", "agent")
            os.makedirs(agent)
            with open(os.path.join(agent, "models.json"), "w") as f:
                json.dump({"providers": {"bench": {
                    "baseUrl": f"{url}/v1", "api": "openai-completions", "apiKey": "fake",
                    "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
                    "models": [{"id": "scripted-model"}]}}}, f)
            env.update(PI_CODING_AGENT_DIR=agent, PI_OFFLINE="1")
            cmd = [os.path.join(BINS, "pi"), "-p", "--mode", "json", "--offline", "--provider",
                   "bench", "--model", "scripted-model", TASK]
        elif kind == "gptme":
            # The environment the adapter sets: its local provider at the endpoint.
            env.update(OPENAI_BASE_URL=f"{url}/v1", OPENAI_API_KEY="fake",
                       GPTME_TIKTOKEN_TIMEOUT="0", GPTME_DISABLE_PATH_INCLUDE="1",
                       GPTME_TELEMETRY_ENABLED="false")
            cmd = [program_path("gptme"), "-n", "--output-format", "json", "--tool-format", "tool",
                   "-m", "local/scripted-model", "--", TASK]
        elif kind == "cline":
            # The settings the adapter writes: its OpenAI-compatible provider, no telemetry.
            settings = os.path.join(home, ".cline", "data", "settings")
            os.makedirs(settings)
            with open(os.path.join(settings, "providers.json"), "w") as f:
                json.dump({"version": 1, "lastUsedProvider": "openai-compatible", "modes": {},
                           "providers": {"openai-compatible": {
                               "settings": {"provider": "openai-compatible",
                                            "model": "scripted-model",
                                            "baseUrl": f"{url}/v1", "apiKey": "fake"},
                               "updatedAt": "1970-01-01T00:00:00.000Z",
                               "tokenSource": "manual"}}}, f)
            with open(os.path.join(settings, "global-settings.json"), "w") as f:
                json.dump({"telemetryOptOut": True, "autoUpdateEnabled": False}, f)
            env.update(CLINE_SESSION_BACKEND_MODE="local", DO_NOT_TRACK="1")
            cmd = [os.path.join(BINS, "cline"), "--json", "--auto-approve", "true", "--", TASK]
        elif kind == "grok-cli":
            env.update(GROK_BASE_URL=f"{url}/v1", GROK_API_KEY="fake")
            cmd = [os.path.join(BINS, "grok"), "--prompt=" + TASK, "--model", "scripted-model"]
        else:
            gemini = os.path.join(home, ".gemini")
            os.makedirs(gemini)
            with open(os.path.join(gemini, "settings.json"), "w") as f:
                json.dump({"security": {"auth": {"selectedType": "gemini-api-key"}}}, f)
            env.update(GEMINI_API_KEY="fake", GOOGLE_GEMINI_BASE_URL=url,
                       GEMINI_CLI_TRUST_WORKSPACE="true")
            cmd = [os.path.join(BINS, "gemini"), "-p", TASK, "--output-format", "stream-json",
                   "--approval-mode", "yolo", "-m", "gemini-2.5-pro"]
        start = time.monotonic()
        subprocess.run(cmd, cwd=repo, env=env, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        elapsed = time.monotonic() - start
        if not os.path.isfile(os.path.join(repo, "hello.txt")):
            sys.exit(f"{kind}: the direct run wrote no hello.txt")
        return elapsed
    finally:
        shutil.rmtree(root, ignore_errors=True)


def through_deltabench(kind):
    """Per-trial wall seconds of N trials through `deltabench run`."""
    out = tempfile.mkdtemp(dir=TMP)
    shutil.rmtree(out)
    subprocess.run([BIN, "run", os.path.join(ROOT, "suites", "smoke"), "--agent", kind,
                    "--trials", str(N), "-j", "1", "--workdir", TMP or tempfile.gettempdir(),
                    "--out", out], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(os.path.join(out, "trials.jsonl")) as f:
        records = [json.loads(line) for line in f]
    shutil.rmtree(out, ignore_errors=True)
    if any(r["outcome"] != "pass" for r in records):
        sys.exit(f"{kind}: a trial through deltabench did not pass")
    return [r["duration_ms"] / 1000 for r in records], [r["agent_duration_ms"] / 1000 for r in records]


def main():
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    server = subprocess.Popen([BIN, "model", "serve", os.path.join(ROOT, "suites", "smoke", "model.yaml")],
                              stdout=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().split()[-1]
        print(f"{N} runs per arm; medians in seconds\n")
        print(f"{'cli':<12} {'direct':>8} {'trial':>8} {'agent':>8} {'trial/direct':>13}")
        for kind, program in KINDS:
            if ONLY and kind not in ONLY:
                continue
            if not os.path.exists(program_path(program)):
                print(f"{kind:<12} not installed (bash .ci/install-agents)")
                continue
            direct_runs = [direct(kind, url) for _ in range(N)]
            trials, agents = through_deltabench(kind)
            d, t, a = (statistics.median(x) for x in (direct_runs, trials, agents))
            print(f"{kind:<12} {d:>8.2f} {t:>8.2f} {a:>8.2f} {t / d:>13.2f}")
        print("\ntrial: the whole trial (provision, CLI, diff, verify, dispose); agent: the CLI's run"
              " inside it, adapter included")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
