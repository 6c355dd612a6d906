# deltabench's test hook: loaded into every Python the verify command starts (through
# PYTHONPATH), before any code of the workspace. It records, in the file named by
# $DELTABENCH_TEST_EVIDENCE, the interpreter's start and normal exit and every unittest result,
# so a fake summary printed before os._exit(0) is told apart from a real test run.
import atexit
import json
import os
import sys

_path = os.environ.pop("DELTABENCH_TEST_EVIDENCE", None)
_out = None
if _path:
    try:
        _out = open(_path, "a", buffering=1, encoding="utf-8")
    except OSError:
        _out = None


def record(event, **fields):
    if _out is None:
        return
    fields["event"] = event
    fields["pid"] = os.getpid()
    try:
        _out.write(json.dumps(fields) + "\n")
    except (OSError, ValueError):
        pass


if _out is not None:
    record("start")
    atexit.register(lambda: record("exit"))

    # Imported now, from the standard library, so a `unittest` package in the workspace
    # cannot stand in for it.
    import unittest.result as _result

    def _wrap(name, outcome):
        original = getattr(_result.TestResult, name)

        def wrapped(self, test, *args):
            try:
                record("test", runner="unittest", id=test.id(), outcome=outcome)
            except Exception:
                pass
            return original(self, test, *args)

        setattr(_result.TestResult, name, wrapped)

    for _name, _outcome in [
        ("addSuccess", "passed"),
        ("addFailure", "failed"),
        ("addError", "failed"),
        ("addSkip", "skipped"),
        ("addExpectedFailure", "passed"),
        ("addUnexpectedSuccess", "failed"),
    ]:
        _wrap(_name, _outcome)

    _add_subtest = _result.TestResult.addSubTest

    def _subtest(self, test, subtest, err):
        if err is not None:
            record("test", runner="unittest", id=test.id(), outcome="failed")
        return _add_subtest(self, test, subtest, err)

    _result.TestResult.addSubTest = _subtest

# The environment's own sitecustomize, if there is one, still runs.
_here = os.path.dirname(os.path.abspath(__file__))
_saved = sys.modules.pop("sitecustomize", None)
_paths = sys.path[:]
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
try:
    import sitecustomize  # noqa: F401
except ImportError:
    pass
finally:
    sys.path[:] = _paths
    if _saved is not None:
        sys.modules["sitecustomize"] = _saved
