#!/usr/bin/env python3
"""deltabench grader for Harbor and Terminal-Bench tasks: the reward the task's tests wrote.

Reads {"diff": "...", "command_result": {"command", "exit_code", "timed_out", "output",
"duration_ms", "reward"}} on stdin and prints {"passed": bool, "score": number}.

A task with `verify.reward` (what `deltabench import` writes now) has its reward read by
deltabench on the host, after every process of the verify command ended: command_result.reward
holds {"value", "from", "problems"}. passed = the diff is non-empty, verify did not time out, no
problem was found (a reward file written by a process the test script did not start, a symlink,
no number) and the value is at least 1; score = the value. The lines below are for suites
imported before.

The verify command (`.deltabench/verify.sh`, written by `deltabench import`) prints, on lines of
their own, reward.json as the task's test script wrote it, then the reward it reads from the
files by Harbor's rule (reward.json's numeric "reward"; else reward.txt; else reward.json's only
number; else the mean of its numbers), the value its own exit status is decided by:
  DELTABENCH_REWARD_JSON=<the content of reward.json>
  DELTABENCH_REWARD=<the reward>
The last of these lines counts (a suite imported by an older deltabench prints only the file's
content: the same rule, without reward.txt). passed = the diff is non-empty, the command did not time out, and the reward is at
least 1; score = the reward. With no reward line (the task writes no reward file), passed = the
diff is non-empty and the command exited 0; score = 1 or 0. A reward that is not a number makes
the grader exit 3: the trial is then an infra_error, not a silent failure.
"""
import json
import re
import sys

MARK = re.compile(r"^DELTABENCH_REWARD(_JSON)?=(.*)$")


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def reward(output):
    """The last reported reward, or None when there is none."""
    found = None
    for line in output.splitlines():
        m = MARK.match(line.rstrip("\r"))
        if m:
            found = m.groups()
    if found is None:
        return None
    is_json, text = found
    if not is_json:
        return float(text)
    data = json.loads(text)
    if is_number(data):
        return float(data)
    if isinstance(data, dict):
        if is_number(data.get("reward")):
            return float(data["reward"])
        numbers = [v for v in data.values() if is_number(v)]
        if numbers:
            return sum(numbers) / len(numbers)
    raise ValueError("reward.json holds no number: %s" % text)


def main():
    delta = json.load(sys.stdin)
    result = delta["command_result"]
    changed = bool(delta["diff"].strip())
    read = result.get("reward")
    if read is not None:
        # deltabench read the reward file itself, on the host, once every process of the
        # verify command had ended: the only reward that counts.
        value = read.get("value")
        problems = read.get("problems") or []
        for problem in problems:
            print("reward not counted: %s" % problem)
        if value is None and not problems:
            print("the test script wrote no reward file")
        passed = changed and not result.get("timed_out") and not problems and value is not None and value >= 1
        print(json.dumps({"passed": bool(passed), "score": float(value or 0.0)}))
        return
    try:
        value = reward(result.get("output") or "")
    except ValueError as err:
        sys.stderr.write("cannot read the reward: %s\n" % err)
        sys.exit(3)
    if value is None:
        passed = changed and result.get("exit_code") == 0 and not result.get("timed_out")
        score = 1.0 if passed else 0.0
    else:
        passed = changed and not result.get("timed_out") and value >= 1
        score = value
        print("reward: %s" % value)
    print(json.dumps({"passed": bool(passed), "score": score}))


if __name__ == "__main__":
    main()
