# deltabench's test hook: loaded into every Python the verify command starts (through
# PYTHONPATH), before any code of the workspace. It connects to the channel the harness listens
# on for this run ($DELTABENCH_TEST_CHANNEL, a Unix socket) and sends every test result the
# runner reports, and a normal-exit mark from its last exit handler. The harness, not this
# file, names the interpreter (the kernel's pid for the connection) and sees it end (the
# connection closes); a record once sent stays sent.
#
# It must be inert: a test's outcome is the same with and without it. So it imports nothing the
# interpreter has not already imported at startup but `_socket` (an early `import unittest` or
# `import json` outlives a test's sys.modules snapshot, e.g. pytester's, where without the hook
# the module would be imported afresh), and it patches `unittest.result` and `_pytest.config`
# only as they are imported, through a finder that leaves sys.meta_path's order alone.
import atexit
import os
import sys


def _connect(address):
    import _socket

    channel = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        if len(os.fsencode(address)) < 100:
            channel.connect(address)
        else:
            # A socket's path holds 107 bytes: a deeper one is reached through its folder.
            folder = os.open(os.path.dirname(address), os.O_PATH | os.O_DIRECTORY)
            try:
                channel.connect("/proc/self/fd/%d/%s" % (folder, os.path.basename(address)))
            finally:
                os.close(folder)
    except OSError:
        channel.close()
        raise
    return channel


_address = os.environ.pop("DELTABENCH_TEST_CHANNEL", None)
_channel = None
# A forked child shares the connection; only the interpreter that opened it marks its exit.
_owner = os.getpid()
if _address:
    try:
        _channel = _connect(_address)
    except OSError:
        _channel = None


_ESCAPES = {
    '"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"
}


def _json(value):
    """`json.dumps(value)` for a str or int (`json` is not imported; see above)."""
    if isinstance(value, int):
        return str(value)
    out = ['"']
    for ch in str(value):
        code = ord(ch)
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif 0x20 <= code < 0x7F:
            out.append(ch)
        elif code > 0xFFFF:
            code -= 0x10000
            out.append("\\u%04x\\u%04x" % (0xD800 | (code >> 10), 0xDC00 | (code & 0x3FF)))
        else:
            out.append("\\u%04x" % code)
    out.append('"')
    return "".join(out)


def record(event, **fields):
    global _channel
    if _channel is None:
        return
    fields["event"] = event
    try:
        line = ", ".join(_json(key) + ": " + _json(value) for key, value in fields.items())
        _channel.sendall(("{" + line + "}\n").encode("utf-8"))
    except (OSError, ValueError):
        _channel = None


def _exit():
    global _channel
    if os.getpid() == _owner:
        record("exit")
    channel, _channel = _channel, None
    if channel is not None:
        channel.close()  # no ResourceWarning at shutdown


def _patch_unittest(result):
    """Records every result the standard library's `unittest.result.TestResult` is given."""
    cls = result.TestResult
    if getattr(cls.addSuccess, "_deltabench", False):
        return

    def wrap(name, outcome):
        original = getattr(cls, name)

        def wrapped(self, test, *args):
            try:
                record("test", runner="unittest", id=test.id(), outcome=outcome)
            except Exception:
                pass
            return original(self, test, *args)

        _like(wrapped, original)
        setattr(cls, name, wrapped)

    for name, outcome in [
        ("addSuccess", "passed"),
        ("addFailure", "failed"),
        ("addError", "failed"),
        ("addSkip", "skipped"),
        ("addExpectedFailure", "passed"),
        ("addUnexpectedSuccess", "failed"),
    ]:
        wrap(name, outcome)

    add_subtest = cls.addSubTest

    def addSubTest(self, test, subtest, err):
        if err is not None:
            try:
                record("test", runner="unittest", id=test.id(), outcome="failed")
            except Exception:
                pass
        return add_subtest(self, test, subtest, err)

    _like(addSubTest, add_subtest)
    cls.addSubTest = addSubTest


def _like(wrapper, original):
    for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
        try:
            setattr(wrapper, attr, getattr(original, attr))
        except (AttributeError, TypeError):
            pass
    wrapper.__wrapped__ = original
    wrapper._deltabench = True


if _channel is not None:
    atexit.register(_exit)

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

            deltabench_pytest.record = record
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

    # `unittest.result` is patched only when it comes from the standard library, so a `unittest`
    # package in the workspace cannot stand in for it (its results are then not recorded).
    _stdlib = os.path.dirname(os.path.realpath(os.__file__))

    def _in_stdlib(spec):
        try:
            where = os.path.dirname(os.path.dirname(os.path.realpath(spec.origin)))
        except Exception:
            return False
        return where == _stdlib

    _patches = {
        "_pytest.config": (_patch_pytest, None),
        "unittest.result": (_patch_unittest, _in_stdlib),
    }

    class _HookFinder:
        """Patches `_pytest.config` and `unittest.result` each time either is imported (the hook
        imports neither): it asks the finders after it for the spec and wraps its loader."""

        def find_spec(self, name, path=None, target=None):
            if name not in _patches:
                return None
            patch, accept = _patches[name]
            found = False
            for finder in list(sys.meta_path):
                if finder is self:
                    found = True
                    continue
                if not found:
                    continue
                find = getattr(finder, "find_spec", None)
                if find is None:
                    return None  # a legacy finder: the import goes on without the patch
                spec = find(name, path, target)
                if spec is not None:
                    break
            else:
                return None
            loader = spec.loader
            execute = getattr(loader, "exec_module", None)
            if execute is None or (accept is not None and not accept(spec)):
                return spec

            def exec_module(module):
                execute(module)
                try:
                    patch(module)
                except Exception:
                    pass

            try:
                loader.exec_module = exec_module
            except (AttributeError, TypeError):
                pass
            return spec

    sys.meta_path.insert(0, _HookFinder())
    if "unittest.result" in sys.modules:
        try:
            _patch_unittest(sys.modules["unittest.result"])
        except Exception:
            pass

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
