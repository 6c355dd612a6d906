#!/usr/bin/env python3
"""deltabench grader: score = the fraction of tests that passed, from the verify output.

Reads {"diff": "...", "command_result": {"command", "exit_code", "timed_out", "output",
"duration_ms"}} on stdin and prints {"passed": bool, "score": number}.

Understands unittest ("Ran N tests" / "FAILED (failures=F, errors=E)"), pytest
("N passed, M failed") and cargo test ("test result: ... N passed; M failed").
passed = the diff is non-empty, the command exited 0 in time, and at least one test ran.
"""
import json
import re
import sys


def counts(output):
    m = re.search(r"Ran (\d+) tests?", output)
    if m:
        total = int(m.group(1))
        bad = sum(int(n) for n in re.findall(r"(?:failures|errors)=(\d+)", output))
        return total - bad, total
    passed = sum(int(n) for n in re.findall(r"(\d+) passed", output))
    failed = sum(int(n) for n in re.findall(r"(\d+) (?:failed|error)", output))
    return passed, passed + failed


def main():
    delta = json.load(sys.stdin)
    result = delta["command_result"]
    ok, total = counts(result.get("output", ""))
    green = result.get("exit_code") == 0 and not result.get("timed_out")
    passed = bool(delta["diff"].strip()) and green and total > 0
    print(json.dumps({"passed": passed, "score": ok / total if total else 0.0}))


if __name__ == "__main__":
    main()
