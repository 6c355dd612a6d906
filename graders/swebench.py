#!/usr/bin/env python3
"""deltabench grader for SWE-bench-style tasks: every listed test must be reported as passed.

Usage: swebench.py SPEC.json  (a relative SPEC is read from the current folder, which for a
suite's grader is the suite folder)

SPEC holds {"FAIL_TO_PASS": [test ids], "PASS_TO_PASS": [test ids]}. Reads
{"diff": "...", "command_result": {"command", "exit_code", "timed_out", "output",
"duration_ms"}} on stdin and prints {"passed": bool, "score": number}.

Per-test results are read from the verify output: the full log named by $DELTABENCH_VERIFY_LOG
when deltabench sets it, else the output on stdin (its head and tail only, when long):
  pytest -rA       "PASSED tests/test_x.py::test_a", "FAILED tests/...::test_b - message",
                   "ERROR ...", "SKIPPED ...", "XFAIL ...", "XPASS ..."
  cargo test       "test module::name ... ok" / "... FAILED" / "... ignored"
passed = the diff is non-empty, the command did not time out, and every FAIL_TO_PASS and
PASS_TO_PASS test was reported PASSED (or XFAIL, as SWE-bench counts it). A test reported
skipped, or not reported at all, counts as failed. score = the fraction of listed tests that
passed. When a listed test is missing and deltabench cut the middle of a long output, the grader
exits 3 instead of guessing: the trial is then an infra_error, not a false failure.
"""
import json
import os
import re
import sys

PYTEST = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (.+?)\s*$")
CARGO = re.compile(r"^test (.+?) \.\.\. (ok|FAILED|ignored)\b")
# deltabench keeps the head and tail of a long output and marks the cut with this line, and
# caps a log file with the second.
ELIDED = re.compile(r"^\[\.\.\. \d+ bytes elided \.\.\.\]$|^\[deltabench: log capped at ", re.M)
GOOD = {"PASSED", "XFAIL"}
# When a test is reported twice (two cargo test binaries), the worse report stands.
RANK = {"PASSED": 0, "XFAIL": 0, "SKIPPED": 1, "XPASS": 1, "FAILED": 2, "ERROR": 2}


def statuses(output):
    """Test id -> status, from pytest -rA and cargo test lines."""
    found = {}

    def report(test, status):
        if RANK[status] >= RANK.get(found.get(test), -1):
            found[test] = status

    for line in output.splitlines():
        line = line.rstrip("\r")
        m = PYTEST.match(line)
        if m:
            status, rest = m.groups()
            if status in ("FAILED", "ERROR") and " - " in rest:
                rest = rest.split(" - ", 1)[0]
            report(rest.strip(), status)
            # SWE-bench's own parser keeps only the first word of an id; accept that form too.
            first = rest.split()[0] if rest.split() else rest
            if first != rest.strip():
                report(first, status)
            continue
        m = CARGO.match(line)
        if m:
            test, result = m.groups()
            report(test, {"ok": "PASSED", "FAILED": "FAILED", "ignored": "SKIPPED"}[result])
    return found


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: swebench.py SPEC.json  (the delta JSON on stdin)")
    with open(sys.argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    delta = json.load(sys.stdin)
    result = delta["command_result"]
    output = result.get("output") or ""
    # The full verify log, when deltabench wrote one: stdin holds only its head and tail.
    log = os.environ.get("DELTABENCH_VERIFY_LOG")
    if log and os.path.isfile(log):
        with open(log, encoding="utf-8", errors="replace") as f:
            output = f.read()
    found = statuses(output)
    wanted = list(spec.get("FAIL_TO_PASS", [])) + list(spec.get("PASS_TO_PASS", []))
    failing = [t for t in wanted if found.get(t) not in GOOD]
    missing = [t for t in failing if t not in found]
    if missing and ELIDED.search(output):
        sys.stderr.write(
            "cannot grade: %d listed test(s) are not in the verify output, whose middle was cut "
            "for length (first: %s)\n" % (len(missing), missing[0])
        )
        sys.exit(3)
    ok = len(wanted) - len(failing)
    passed = bool(delta["diff"].strip()) and not result.get("timed_out") and not failing and wanted
    for test in failing[:10]:
        print("not passed: %s (%s)" % (test, found.get(test, "not reported")))
    print("%d of %d listed tests passed" % (ok, len(wanted)))
    print(json.dumps({"passed": bool(passed), "score": ok / len(wanted) if wanted else 0.0}))


if __name__ == "__main__":
    main()
