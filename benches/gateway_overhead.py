#!/usr/bin/env python3
"""What the model gateway adds to one model call, against a direct call to the same endpoint.

    python3 benches/gateway_overhead.py [--calls N] [--warmup W] [--bin PATH]

(`--bin`: measure that deltabench instead of building this checkout's release binary.)

`deltabench model serve` answers every call. A one-task suite's `command` agent, with `gateway:
true` and `endpoint:` that server's URL, runs a Python client (stdlib `http.client`) that makes,
for each mode below, W warm-up and N timed calls to the gateway ($DELTABENCH_GATEWAY_URL) and as
many straight to the server, interleaved (direct, gateway, gateway, direct, ...) so that noise
hits both arms alike, then writes calls.txt for the verify to find. Each call is timed from
sending the request to the last byte of the answer (release binary, tmpfs, one trial).

  messages          Anthropic Messages, one JSON answer, keep-alive connection (as SDKs pool them)
  messages stream   the same, streamed (SSE), the whole stream read
  chat              OpenAI Chat Completions, one JSON answer, keep-alive connection
  messages new-conn Anthropic Messages, a new TCP connection per call
  paced first/whole a stream whose events arrive over time, as a provider sends them (a small
                    server here, Nagle off, 10 deltas 2 ms apart): time to the first event, and
                    to the end; a relay that lets small writes wait shows at the first event

The run must pass and its record's `gateway_usage.model_calls` must equal the calls the client
made through the gateway, so the figures are those of calls that really went through it.
Not a test: numbers on a shared machine are noisy; read the overhead and the ratio.
"""
import http.server
import json
import os
import socket
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
BIN = os.path.join(TARGET, "release", "deltabench")


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


# The agent: runs inside the trial, timings go to $BENCH_OUT (outside the workspace).
CLIENT = r'''
import http.client, json, os, time, urllib.parse

TOOLS = [{"name": "Bash", "input_schema": {"type": "object"}}]
# Tools in every request: a call without them is a side call, answered without usage.
MESSAGES = {"model": "claude-sonnet-4-5", "max_tokens": 100,
            "messages": [{"role": "user", "content": "hi"}], "tools": TOOLS}
CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]}
ANTHROPIC = {"x-api-key": os.environ["ANTHROPIC_API_KEY"], "anthropic-version": "2023-06-01"}
OPENAI = {"authorization": "Bearer " + os.environ["OPENAI_API_KEY"]}
MODES = [  # name, path, body, headers, keep-alive
    ("messages", "/v1/messages", dict(MESSAGES, stream=False), ANTHROPIC, True),
    ("messages stream", "/v1/messages", dict(MESSAGES, stream=True), ANTHROPIC, True),
    ("chat", "/v1/chat/completions", dict(CHAT, stream=False), OPENAI, True),
    ("messages new-conn", "/v1/messages", dict(MESSAGES, stream=False), ANTHROPIC, False),
    ("paced", "/v1/messages", dict(MESSAGES, stream=True), ANTHROPIC, True),
]
MODES = [m for m in MODES if m[0] in os.environ["BENCH_MODES"].split(",")]
ARMS = {"direct": os.environ["BENCH_DIRECT_URL"], "gateway": os.environ["DELTABENCH_GATEWAY_URL"]}
N, WARMUP = int(os.environ["BENCH_CALLS"]), int(os.environ["BENCH_WARMUP"])


class Arm:
    def __init__(self, url):
        parsed = urllib.parse.urlsplit(url)
        self.host, self.port, self.prefix = parsed.hostname, parsed.port, parsed.path.rstrip("/")
        self.conn = None

    def call(self, path, body, headers, keep):
        if self.conn is None or not keep:
            self.conn = http.client.HTTPConnection(self.host, self.port)
        start = time.perf_counter()
        # Bytes body: http.client sends headers and body in one write.
        self.conn.request("POST", self.prefix + path, body,
                          dict(headers, **{"content-type": "application/json"}))
        answer = self.conn.getresponse()
        first = answer.readline()
        first_at = time.perf_counter() - start
        data = first + answer.read()
        elapsed = time.perf_counter() - start
        if not keep or answer.will_close:
            self.conn.close()
            self.conn = None
        assert answer.status == 200 and b"Done." in data, (answer.status, data[:300])
        return first_at, elapsed


timings, through_gateway = {}, 0
for mode, path, body, headers, keep in MODES:
    arms = {name: Arm(url) for name, url in ARMS.items()}
    payload = json.dumps(body).encode()
    times = {name: [] for name in arms}
    firsts = {name: [] for name in arms}
    for i in range(WARMUP + N):
        for name in (("direct", "gateway") if i % 2 == 0 else ("gateway", "direct")):
            first_at, elapsed = arms[name].call(path, payload, headers, keep)
            through_gateway += name == "gateway"
            if i >= WARMUP:
                times[name].append(elapsed)
                firsts[name].append(first_at)
    if mode == "paced":
        timings["paced first"], timings["paced whole"] = firsts, times
    else:
        timings[mode] = times
with open(os.environ["BENCH_OUT"], "w") as f:
    json.dump({"timings": timings, "gateway_calls": through_gateway}, f)
# A trial with an empty diff fails; this file is the agent's work the verify checks.
with open("calls.txt", "w") as f:
    f.write(f"{through_gateway} calls through the gateway\n")
'''


class Paced(http.server.BaseHTTPRequestHandler):
    """Answers a streamed Anthropic call event by event, as a provider does over time."""
    protocol_version = "HTTP/1.0"  # the stream ends when the connection closes

    def do_POST(self):
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        event = lambda kind, data: self.wfile.write(
            f"event: {kind}\ndata: {json.dumps(dict(data, type=kind))}\n\n".encode())
        usage = {"input_tokens": 100, "output_tokens": 1}
        event("message_start", {"message": {"id": "m", "type": "message", "role": "assistant",
                                             "model": "claude-sonnet-4-5", "content": [], "usage": usage}})
        event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
        for word in ["Done."] + [" ."] * 9:
            time.sleep(0.002)
            event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": word}})
        event("content_block_stop", {"index": 0})
        event("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 10}})
        event("message_stop", {})

    def log_message(self, *args):
        pass


def main():
    calls, warmup = int(arg("--calls", "200")), int(arg("--warmup", "10"))
    global BIN
    if "--bin" in sys.argv:
        BIN = os.path.abspath(arg("--bin", BIN))
    else:
        subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    d = tempfile.mkdtemp(prefix="db-gateway-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    # No steps: every call is answered "Done." with the default usage, however many there are.
    with open(os.path.join(d, "model.yaml"), "w") as f:
        f.write("steps: []\n")
    server = subprocess.Popen([BIN, "model", "serve", os.path.join(d, "model.yaml")],
                              stdout=subprocess.PIPE, text=True)
    paced = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Paced)
    threading.Thread(target=paced.serve_forever, daemon=True).start()
    try:
        url = server.stdout.readline().split()[-1]
        paced_url = f"http://127.0.0.1:{paced.server_address[1]}"
        repo = os.path.join(d, "repo")
        git = ["git", "-C", repo, "-c", "user.name=b", "-c", "user.email=b@b"]
        subprocess.run(["git", "init", "-q", "-b", "main", repo], check=True)
        subprocess.run(git + ["commit", "-q", "--allow-empty", "-m", "base"], check=True)
        with open(os.path.join(d, "client.py"), "w") as f:
            f.write(CLIENT)
        # One agent per upstream. No budget anywhere: the gateway only meters. The endpoint is
        # a URL (not `scripted:`), so both arms reach the very same server.
        agents = {"bench": (url, "messages,messages stream,chat,messages new-conn"),
                  "paced": (paced_url, "paced")}
        timings = {name: os.path.join(d, f"timings-{name}.json") for name in agents}
        with open(os.path.join(d, "suite.yaml"), "w") as f:
            f.write("name: gateway-overhead\nrepo: repo\ntasks:\n  - id: calls\n    base: main\n"
                    "    instruction: Call the model.\n    verify: test -s calls.txt\nagents:\n")
            for name, (endpoint, modes) in agents.items():
                f.write(f"""  {name}:
    kind: command
    run: python3 {os.path.join(d, "client.py")}
    gateway: true
    endpoint: {endpoint}
    timeout: 30m
    env: {{BENCH_DIRECT_URL: "{endpoint}", BENCH_OUT: "{timings[name]}", BENCH_MODES: "{modes}", BENCH_CALLS: "{calls}", BENCH_WARMUP: "{warmup}"}}
""")
        out, work = os.path.join(d, "out"), os.path.join(d, "work")
        os.makedirs(work)
        run = subprocess.run([BIN, "run", os.path.join(d, "suite.yaml"), "--workdir", work,
                              "--out", out, "--jobs", "1"], capture_output=True, text=True)
        if run.returncode != 0:
            logs = [os.path.join(out, "trials", "calls", name, "1", "agent.log") for name in agents]
            sys.exit(f"run exited {run.returncode}: {run.stderr}\n"
                     + "".join(open(log).read() for log in logs if os.path.exists(log)))
        table, counted = {}, 0
        for line in open(os.path.join(out, "trials.jsonl")):
            record = json.loads(line)
            result = json.load(open(timings[record["agent"]]))
            assert record["outcome"] == "pass", record
            assert record["gateway_usage"]["model_calls"] == result["gateway_calls"], \
                (record["gateway_usage"], result["gateway_calls"])
            counted += result["gateway_calls"]
            table.update(result["timings"])
        print(f"# {calls} timed calls per arm and mode (after {warmup} warm-up), interleaved, one run;"
              f" ms per call; {counted} calls counted by the gateway")
        print(f"{'mode':<18} {'direct p50':>10} {'direct p99':>10} {'gateway p50':>11} "
              f"{'gateway p99':>11} {'overhead p50':>12} {'ratio':>6}")
        for mode, times in table.items():
            (dm, dp), (gm, gp) = ((statistics.median(t) * 1e3, statistics.quantiles(t, n=100)[98] * 1e3)
                                  for t in (times["direct"], times["gateway"]))
            print(f"{mode:<18} {dm:>10.2f} {dp:>10.2f} {gm:>11.2f} {gp:>11.2f} {gm - dm:>12.2f} "
                  f"{gm / dm:>6.2f}")
    finally:
        paced.shutdown()
        server.terminate()
        server.wait()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
