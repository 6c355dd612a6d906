#!/usr/bin/env python3
"""deltabench grader for SWE-bench-style tasks, graded as the official harness grades.

Usage: swebench.py SPEC.json  (a relative SPEC is read from the current folder, which for a
suite's grader is the suite folder)

SPEC holds {"FAIL_TO_PASS": [test ids], "PASS_TO_PASS": [test ids]} and, when imported from
SWE-bench, "repo" ("owner/name"). Reads {"diff": "...", "command_result": {"command",
"exit_code", "timed_out", "output", "duration_ms"}} on stdin and prints why, then
{"passed": bool, "score": number}.

Per-test results are read from the verify output: the full log named by $DELTABENCH_VERIFY_LOG
when deltabench sets it, else the output on stdin (its head and tail only, when long). The log
parser is the one the official `swebench` package (5.x, swebench.harness.log_parsers) uses for
the repository: pytest -rA lines, pytest -rA keeping "/"+basename of a path option (requests,
pylint, pydicom), the later-pytest form (astropy, scikit-learn, sphinx), Django's runtests -v 2,
sympy's bin/test, seaborn, matplotlib, and cargo test for the Rust repositories it lists. A
repository outside that table gets the generic parser: pytest -rA ids whole and cut at the first
space, and cargo test lines ("ignored" is a skip).

The verdict is the official one (swebench.harness.grading): every FAIL_TO_PASS test PASSED or
XFAIL; every PASS_TO_PASS test PASSED, XFAIL or SKIPPED; a test missing from the log fails; a
listed id the log cut short matches by prefix when its matches agree. No verdict passes when the
log holds no test result, when the test command exited non-zero with no test failed or errored,
or when it holds one of the harness's failure markers. On top: passed needs a non-empty diff and
a verify that did not time out. score = the fraction of listed tests that passed. When a listed
test is missing and deltabench cut the middle of a long output, the grader exits 3 instead of
guessing: the trial is then an infra_error, not a false failure.
"""
import json
import os
import re
import sys

# The statuses the official parsers recognise (swebench.harness.constants.TestStatus).
FAILED, PASSED, SKIPPED, ERROR, XFAIL = "FAILED", "PASSED", "SKIPPED", "ERROR", "XFAIL"
STATUSES = (FAILED, PASSED, SKIPPED, ERROR, XFAIL)
# The official eval script's markers.
START, END = ">>>>> Start Test Output", ">>>>> End Test Output"
EXIT_CODE = re.compile(r">>>>> Test Exit Code:\s*(-?\d+)")
BROKEN = (">>>>> Patch Apply Failed", ">>>>> Reset Failed", ">>>>> Tests Errored",
          ">>>>> Tests Timed Out")
# Evidence that a runner ran although nothing was parsed (official SUITE_RAN).
SUITE_RAN = re.compile(
    r"Executed [1-9]\d* of \d+|TOTAL: [1-9]\d* (?:SUCCESS|FAILED)|[1-9]\d* passing"
    r"|Tests:\s+[1-9]\d*|Test Suites:\s+(?:\d+ \w+, )*[1-9]\d* total|^# tests [1-9]\d*"
    r"|[1-9]\d* specs?, \d+ failures?|': ok$",
    re.M,
)
# deltabench keeps the head and tail of a long output and marks the cut with this line, and
# caps a log file with the second.
ELIDED = re.compile(r"^\[\.\.\. \d+ bytes elided \.\.\.\]$|^\[deltabench: log capped at ", re.M)
SKIP_COUNT = re.compile(r"^\[\d+\]$")


def status_lines(log, clean=None):
    """Each line (after `clean`) that starts with a status, as the pytest parsers read them."""
    for line in log.split("\n"):
        if clean:
            line = clean(line)
        if line.startswith(STATUSES):
            yield line


def is_skip_count(words):
    # pytest's "SKIPPED [N] path:line: reason" summary: [N] is a count, not a test.
    return words[0] == SKIPPED and bool(SKIP_COUNT.match(words[1]))


def parse_pytest(log, rename=None):
    """pytest -rA: "STATUS id" lines; an id ends at the first space."""
    found = {}
    for line in status_lines(log, rename):
        if line.startswith(FAILED):
            line = line.replace(" - ", " ")
        words = line.split()
        if len(words) > 1 and not is_skip_count(words):
            found[words[1]] = words[0]
    return found


OPTION = re.compile(r"(.*?)\[(.*)\]")


def parse_pytest_options(log):
    """pytest, keeping "/"+basename of a parameter that is an absolute path."""
    found = {}
    for line in status_lines(log):
        if line.startswith(FAILED):
            line = line.replace(" - ", " ")
        words = line.split()
        if len(words) <= 1 or is_skip_count(words):
            continue
        test = words[1]
        option = OPTION.search(test)
        if option:
            main, param = option.groups()
            if param.startswith("/") and not param.startswith("//") and "*" not in param:
                param = "/" + param.split("/")[-1]
            test = "%s[%s]" % (main, param)
        found[test] = words[0]
    return found


def parse_matplotlib(log):
    def rename(line):
        return line.replace("MouseButton.LEFT", "1").replace("MouseButton.RIGHT", "3")

    return parse_pytest(log, rename)


CONTROL = "".join(chr(c) for c in range(1, 32))
COLOUR = re.compile(r"\[(\d+)m")


def parse_pytest_v2(log):
    """Later pytest: colour codes and control characters dropped, ids kept whole."""
    found = {}
    drop = str.maketrans("", "", CONTROL)
    for line in log.split("\n"):
        line = COLOUR.sub("", line).translate(drop)
        if line.startswith(STATUSES):
            if line.startswith(FAILED):
                line = line.split(" - ", 1)[0]
            words = line.split()
            if len(words) >= 2 and not is_skip_count(words):
                found[" ".join(words[1:])] = words[0]
        elif line.endswith(STATUSES):
            words = line.split()
            if len(words) >= 2:
                found[" ".join(words[:-1])] = words[-1]
    return found


def parse_seaborn(log):
    found = {}
    for line in log.split("\n"):
        words = line.split()
        if len(words) < 2:
            continue
        if line.startswith(FAILED):
            found[words[1]] = FAILED
        elif " %s " % PASSED in line:
            if words[1] == PASSED:
                found[words[0]] = PASSED
        elif line.startswith(PASSED):
            found[words[1]] = PASSED
    return found


SYMPY_FAILURE = re.compile(r"(_*) (.*)\.py:(.*) (_*)")


def parse_sympy(log):
    """sympy's bin/test: "test_x ok|F|E" lines, and the "___ path.py:test_x ___" headers."""
    found = {}
    for match in SYMPY_FAILURE.findall(log):
        found["%s.py:%s" % (match[1], match[2])] = FAILED
    for line in log.split("\n"):
        line = line.strip()
        if not line.startswith("test_"):
            continue
        for suffix, status in ((" E", ERROR), (" F", FAILED), (" ok", PASSED)):
            if line.endswith(suffix):
                found[line.split()[0]] = status
    return found


# A Django test whose "ok" was pushed to the next line by output printed during the test.
DJANGO_SPLIT = [
    re.compile(p, re.M)
    for p in (
        r"^(.*?)\s\.\.\.\sTesting\ against\ Django\ installed\ in\ ((?s:.*?))\ silenced\)\.\nok$",
        r"^(.*?)\s\.\.\.\sInternal\ Server\ Error:\ \/(.*)\/\nok$",
        r"^(.*?)\s\.\.\.\sSystem check identified no issues \(0 silenced\)\nok$",
    )
]


def parse_django(log):
    """Django's runtests.py --verbosity 2: "name ... ok|skipped|FAIL|ERROR" and "FAIL: name"."""
    found = {}
    previous = None
    for line in log.split("\n"):
        line = line.strip()
        if "--version is equivalent to version" in line:
            found["--version is equivalent to version"] = PASSED
        if " ... " in line:
            previous = line.split(" ... ")[0]
        for suffix in (" ... ok", " ... OK", " ...  OK"):
            if line.endswith(suffix):
                # One instance's output runs into its test line (as the official parser knows).
                if line.strip().startswith(
                    "Applying sites.0002_alter_domain_unique...test_no_migrations"
                ):
                    line = line.split("...", 1)[-1].strip()
                found[line.rsplit(suffix, 1)[0]] = PASSED
                break
        if " ... skipped" in line:
            found[line.split(" ... skipped")[0]] = SKIPPED
        if line.endswith(" ... FAIL"):
            found[line.split(" ... FAIL")[0]] = FAILED
        # A bare "FAIL:" or "ERROR:" (output the tested code can print) names no test; the
        # official parser crashes on it, which would turn a failed trial into an ungraded one.
        if line.startswith("FAIL:") and len(line.split()) > 1:
            found[line.split()[1].strip()] = FAILED
        if line.endswith(" ... ERROR"):
            found[line.split(" ... ERROR")[0]] = ERROR
        if line.startswith("ERROR:") and len(line.split()) > 1:
            found[line.split()[1].strip()] = ERROR
        if line.lstrip().startswith("ok") and previous is not None:
            found[previous] = PASSED
    for pattern in DJANGO_SPLIT:
        for match in pattern.finditer(log):
            found[match.group(1)] = PASSED
    return found


CARGO_LINE = re.compile(r"^test\s+(\S+)\s+\.\.\.\s+(\w+)$")


def parse_cargo(log):
    found = {}
    for line in log.split("\n"):
        match = CARGO_LINE.match(line.strip())
        if match:
            test, result = match.groups()
            if result in ("ok", "FAILED"):
                found[test] = PASSED if result == "ok" else FAILED
    return found


GENERIC_PYTEST = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (.+?)\s*$")
GENERIC_CARGO = re.compile(r"^test (.+?) \.\.\. (ok|FAILED|ignored)\b")
# When a test is reported twice (two cargo test binaries), the worse report stands.
RANK = {PASSED: 0, XFAIL: 0, SKIPPED: 1, "XPASS": 1, FAILED: 2, ERROR: 2}


def parse_generic(log):
    """pytest -rA ids whole and cut at the first space, and cargo test lines."""
    found = {}

    def report(test, status):
        if RANK[status] >= RANK.get(found.get(test), -1):
            found[test] = status

    for line in log.splitlines():
        line = line.rstrip("\r")
        m = GENERIC_PYTEST.match(line)
        if m:
            status, rest = m.groups()
            if status in (FAILED, ERROR) and " - " in rest:
                rest = rest.split(" - ", 1)[0]
            report(rest.strip(), status)
            first = rest.split()[0] if rest.split() else rest
            if first != rest.strip():
                report(first, status)
            continue
        m = GENERIC_CARGO.match(line)
        if m:
            test, result = m.groups()
            report(test, {"ok": PASSED, "FAILED": FAILED, "ignored": SKIPPED}[result])
    return found


# The official table (MAP_REPO_TO_PARSER_PY and MAP_REPO_TO_PARSER_RUST).
PARSERS = {
    "astropy/astropy": ("parse_log_pytest_v2", parse_pytest_v2),
    "django/django": ("parse_log_django", parse_django),
    "marshmallow-code/marshmallow": ("parse_log_pytest", parse_pytest),
    "matplotlib/matplotlib": ("parse_log_matplotlib", parse_matplotlib),
    "mwaskom/seaborn": ("parse_log_seaborn", parse_seaborn),
    "pallets/flask": ("parse_log_pytest", parse_pytest),
    "psf/requests": ("parse_log_pytest_options", parse_pytest_options),
    "pvlib/pvlib-python": ("parse_log_pytest", parse_pytest),
    "pydata/xarray": ("parse_log_pytest", parse_pytest),
    "pydicom/pydicom": ("parse_log_pytest_options", parse_pytest_options),
    "pylint-dev/astroid": ("parse_log_pytest", parse_pytest),
    "pylint-dev/pylint": ("parse_log_pytest_options", parse_pytest_options),
    "pytest-dev/pytest": ("parse_log_pytest", parse_pytest),
    "pyvista/pyvista": ("parse_log_pytest", parse_pytest),
    "scikit-learn/scikit-learn": ("parse_log_pytest_v2", parse_pytest_v2),
    "sqlfluff/sqlfluff": ("parse_log_pytest", parse_pytest),
    "sphinx-doc/sphinx": ("parse_log_pytest_v2", parse_pytest_v2),
    "sympy/sympy": ("parse_log_sympy", parse_sympy),
    "burntsushi/ripgrep": ("parse_log_cargo", parse_cargo),
    "sharkdp/bat": ("parse_log_cargo", parse_cargo),
    "astral-sh/ruff": ("parse_log_cargo", parse_cargo),
    "tokio-rs/tokio": ("parse_log_cargo", parse_cargo),
    "uutils/coreutils": ("parse_log_cargo", parse_cargo),
    "nushell/nushell": ("parse_log_cargo", parse_cargo),
    "tokio-rs/axum": ("parse_log_cargo", parse_cargo),
}


def parser_for(repo):
    return PARSERS.get(repo or "", ("generic", parse_generic))


def statuses(log, parse):
    """Test id -> status, and why the log gives no verdict (None when it does)."""
    broken = [marker for marker in BROKEN if marker in log]
    if broken:
        return {}, "the log holds %r" % broken[0]
    # Between the official eval script's markers when they are there; else the whole log is
    # the test output (deltabench's verify command is the test command).
    found = {}
    if START in log and END in log:
        found = parse(log.split(START)[1].split(END)[0])
    if not found:
        found = parse(log)
    if not found and not SUITE_RAN.search(log):
        return {}, "no test results in the verify output"
    return found, None


def resolve(test, found):
    """The key of `test` in `found`; an id cut inside its brackets matches by prefix."""
    if test in found:
        return test
    if test.count("[") > test.count("]"):
        keys = [k for k in found if k.startswith(test)]
        if keys and len({found[k] in (PASSED, XFAIL) for k in keys}) == 1:
            return keys[0]
    return None


def outcome(test, found, may_skip):
    """A listed test's status and whether it passed (True), failed (False) or neither (None:
    a status the official grading counts on neither side)."""
    key = resolve(test, found)
    status = found[key] if key is not None else None
    if status in ((PASSED, XFAIL, SKIPPED) if may_skip else (PASSED, XFAIL)):
        return status, True
    if status in (None, FAILED, ERROR, SKIPPED):
        return status or "not reported", False
    return status, None


def grade(spec, output, exit_code):
    """The official verdict on `output`: (rows, why no verdict or None, parser name), a row
    being (test id, list, status, passed: True, False or None for neither)."""
    name, parse = parser_for(spec.get("repo"))
    found, no_verdict = statuses(output, parse)
    marked = EXIT_CODE.search(output)
    if marked:
        exit_code = int(marked.group(1))
    if (no_verdict is None and exit_code not in (None, 0) and found
            and not any(s in (FAILED, ERROR) for s in found.values())):
        no_verdict = ("the test command exited %s but no test failed or errored: the log "
                      "does not describe the run" % exit_code)
    rows = [(t, "FAIL_TO_PASS") + outcome(t, found, False) for t in spec.get("FAIL_TO_PASS", [])]
    rows += [(t, "PASS_TO_PASS") + outcome(t, found, True) for t in spec.get("PASS_TO_PASS", [])]
    return rows, no_verdict, name


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
    rows, no_verdict, parser = grade(spec, output, result.get("exit_code"))
    failing = [row for row in rows if row[3] is False]
    missing = [row[0] for row in failing if row[2] == "not reported"]
    if missing and ELIDED.search(output):
        sys.stderr.write(
            "cannot grade: %d listed test(s) are not in the verify output, whose middle was cut "
            "for length (first: %s)\n" % (len(missing), missing[0])
        )
        sys.exit(3)
    print("parser: %s (%s)" % (parser, spec.get("repo") or "no repo in the spec"))
    for test, kind, status, _ in failing[:20]:
        print("not passed: %s %s (%s)" % (kind, test, status))
    if len(failing) > 20:
        print("... and %d more not passed" % (len(failing) - 20))
    ok = sum(1 for row in rows if row[3])
    f2p = [row for row in rows if row[1] == "FAIL_TO_PASS"]
    f2p_ok = sum(1 for row in f2p if row[3])
    print("%d of %d listed tests passed (FAIL_TO_PASS %d of %d, PASS_TO_PASS %d of %d)"
          % (ok, len(rows), f2p_ok, len(f2p), ok - f2p_ok, len(rows) - len(f2p)))
    reasons = [
        no_verdict and "not resolved: %s" % no_verdict,
        not delta["diff"].strip() and "not passed: the diff is empty",
        result.get("timed_out") and "not passed: the verify command timed out",
    ]
    for reason in filter(None, reasons):
        print(reason)
    passed = not failing and not any(reasons)
    score = ok / len(rows) if rows else float(passed)
    print(json.dumps({"passed": passed, "score": score}))


if __name__ == "__main__":
    main()
