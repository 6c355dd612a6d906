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

    # pytest gets the plugin from here, not from PYTEST_PLUGINS: a verify command that replaces
    # PYTHONPATH then runs without the hook instead of failing to import it. Entry-point
    # plugins load as usual, except from distributions inside the verify workspace (a
    # `NAME.dist-info` the agent wrote, on sys.path under `python -m pytest`).
    _root = os.environ.pop("DELTABENCH_VERIFY_ROOT", None)

    def _outside(dist):
        try:
            where = os.path.realpath(str(dist.locate_file("")))
        except Exception:
            return True
        return not _root or not (where + os.sep).startswith(os.path.realpath(_root) + os.sep)

    def _patch_pytest(config):
        manager = config.PytestPluginManager
        original_init = manager.__init__
        original_load = manager.load_setuptools_entrypoints

        def __init__(self, *args, **kwargs):
            original_init(self, *args, **kwargs)
            import deltabench_pytest

            if not self.has_plugin("deltabench_pytest"):
                self.register(deltabench_pytest, name="deltabench_pytest")

        def load_setuptools_entrypoints(self, group, name=None):
            import importlib.metadata as metadata

            everything = metadata.distributions
            metadata.distributions = lambda **kw: [d for d in everything(**kw) if _outside(d)]
            try:
                return original_load(self, group, name)
            finally:
                metadata.distributions = everything

        manager.__init__ = __init__
        manager.load_setuptools_entrypoints = load_setuptools_entrypoints

    class _PytestFinder:
        """Patches `_pytest.config` once it is imported (pytest is not imported here)."""

        def find_spec(self, name, path=None, target=None):
            if name != "_pytest.config":
                return None
            import importlib.util

            sys.meta_path.remove(self)
            try:
                spec = importlib.util.find_spec(name)
            finally:
                sys.meta_path.insert(0, self)
            if spec is None or spec.loader is None:
                return spec
            loader = spec.loader
            execute = loader.exec_module

            def exec_module(module):
                execute(module)
                try:
                    _patch_pytest(module)
                except Exception:
                    pass

            loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _PytestFinder())

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
