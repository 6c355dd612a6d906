#!/usr/bin/env python3
"""List candidate assertion mutants of hidden test files (deltabench).

Why: an agent under test may make hidden tests pass without fixing the bug,
e.g. by turning unittest's assertEqual into a no-op or returning an object
whose __eq__ is always true. deltabench defends with "mutation-checked
assertions": it derives mutants from the hidden tests (an expected value
changed, or a truth assertion negated), keeps at validate time those that
make the reference solution FAIL ("biting" mutants), and at verify time
applies a sample of them; a mutated test that still passes means the agent
neutralised the assertions. This script only LISTS candidate mutants; it
never runs or edits anything.

Usage:
    python3 mutate.py ROOT FILE...

FILE paths are relative to ROOT (a checked-out workspace). Output is one JSON
object per line on stdout, in argument order, then source order:

    {"file": "tests/test_calc.py", "test": "TestCalc.test_add", "line": 6,
     "start": 123, "end": 124, "original": "5", "replacement": "6",
     "what": "assertEqual: expected 5 -> 6"}

  file         the FILE argument as given
  test         enclosing test: Python "Class.method" / "func" (nested classes
               joined with "."); Rust "mod::path::fn" relative to the file
  line         1-based line where `original` starts
  start, end   half-open BYTE offsets into the raw file, such that
               file_bytes[start:end].decode("utf-8") == original
  original     exact source text to replace
  replacement  text to splice in instead (valid code in context)
  what         short human description

A file that cannot be handled (missing, not UTF-8, syntax error, unsupported
extension) yields {"file": F, "error": "..."} and processing goes on.
Exit status: 0 (also when some files had errors, or none were given),
2 on usage errors (no arguments, ROOT not a directory).

Mutants of one file never overlap, so any subset of them can be applied
together (splice from the highest start offset down).

Supported: Python files (*.py, via the ast module) and Rust files (*.rs, via
a small hand-written lexer; no parser library is needed). Only the standard
library is used; runs on Python 3.8 to 3.13.
"""

import ast
import bisect
import json
import math
import os
import sys
import warnings

# ---------------------------------------------------------------------------
# Shared helpers
# ---------------------------------------------------------------------------


def _short(text, limit=40):
    """Keep `what` short: one line, truncated."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _mutant(test, line, start, end, original, replacement, what):
    return {
        "test": test,
        "line": line,
        "start": start,
        "end": end,
        "original": original,
        "replacement": replacement,
        "what": what,
    }


def _drop_overlaps(mutants):
    """Sort by position and drop any mutant overlapping an earlier one.

    Why: deltabench may apply several mutants of a file at once; overlapping
    splices would corrupt the file. Overlaps only arise in odd code (an
    assertion nested inside another assertion's expression).
    """
    kept = []
    last_end = -1
    for m in sorted(mutants, key=lambda m: (m["start"], -m["end"])):
        if m["start"] >= last_end:
            kept.append(m)
            last_end = m["end"]
    return kept


def _splice(data, mutants):
    """Apply non-overlapping mutants to bytes (highest offset first)."""
    out = data
    for m in sorted(mutants, key=lambda m: m["start"], reverse=True):
        out = out[: m["start"]] + m["replacement"].encode("utf-8") + out[m["end"]:]
    return out


class FileError(Exception):
    """A per-file problem reported as {"file": ..., "error": ...}."""


def _decode_utf8(data):
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise FileError("not valid UTF-8 at line %d (byte offset %d)" % (line, e.start))


# ---------------------------------------------------------------------------
# Python
# ---------------------------------------------------------------------------

# Equality assertions: method name -> names of its first two parameters
# (so keyword calls like assertEqual(first=x, second=5) work too).
PY_EQUAL_ASSERTS = {
    "assertEqual": ("first", "second"),
    "assertEquals": ("first", "second"),
    "assertAlmostEqual": ("first", "second"),
    "assertListEqual": ("list1", "list2"),
    "assertTupleEqual": ("tuple1", "tuple2"),
    "assertDictEqual": ("d1", "d2"),
    "assertSetEqual": ("set1", "set2"),
    "assertSequenceEqual": ("seq1", "seq2"),
    "assertMultiLineEqual": ("first", "second"),
    "assertCountEqual": ("first", "second"),
}

# Truth-style assertions swapped for their opposite (only the name changes).
PY_SWAPS = {}
for _a, _b in [
    ("assertTrue", "assertFalse"),
    ("assertIsNone", "assertIsNotNone"),
    ("assertIn", "assertNotIn"),
    ("assertIs", "assertIsNot"),
    ("assertIsInstance", "assertNotIsInstance"),
]:
    PY_SWAPS[_a] = _b
    PY_SWAPS[_b] = _a

_SCALAR_TYPES = (bool, int, float, str, bytes)


def _py_is_scalar(node):
    """int/float/str/bytes/bool constant, or -<number>."""
    if isinstance(node, ast.Constant):
        return type(node.value) in _SCALAR_TYPES
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        op = node.operand
        return isinstance(op, ast.Constant) and type(op.value) in (int, float)
    return False


def _py_is_literal(node):
    """A scalar literal or a list/tuple/set/dict display made only of literals.

    Inside displays any constant (also None) is accepted: the element values
    are never edited, only dropped.
    """
    if _py_is_scalar(node):
        return True
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(
            (isinstance(e, ast.Constant) or _py_is_literal(e)) for e in node.elts
        )
    if isinstance(node, ast.Dict):
        return all(
            k is not None  # None key means a `**mapping` entry
            and (isinstance(k, ast.Constant) or _py_is_literal(k))
            and (isinstance(v, ast.Constant) or _py_is_literal(v))
            for k, v in zip(node.keys, node.values)
        )
    return False


class _PySource(object):
    """Maps ast (lineno, col_offset) pairs to absolute byte offsets."""

    def __init__(self, data):
        self.data = data
        text = _decode_utf8(data)
        # The tokenizer rejects a BOM in str input; strip it and shift offsets.
        self.bom = 3 if text.startswith("\ufeff") else 0
        self.text = text[1:] if self.bom else text
        # Python counts \r\n, \r and \n as line ends (checked on 3.8..3.13).
        starts = [0]
        body = data[self.bom:]
        i, n = 0, len(body)
        while i < n:
            c = body[i : i + 1]
            if c == b"\r":
                if body[i + 1 : i + 2] == b"\n":
                    i += 1
                starts.append(i + 1)
            elif c == b"\n":
                starts.append(i + 1)
            i += 1
        self.line_starts = [s + self.bom for s in starts]

    def offset(self, lineno, col):
        # col_offset values are UTF-8 byte offsets within the line.
        return self.line_starts[lineno - 1] + col

    def line_of(self, offset):
        return bisect.bisect_right(self.line_starts, offset)

    def span(self, node):
        return (
            self.offset(node.lineno, node.col_offset),
            self.offset(node.end_lineno, node.end_col_offset),
        )

    def segment(self, start, end):
        return self.data[start:end].decode("utf-8")


def _py_changed_scalar(value):
    """Text of a different value of the same type, or None."""
    if isinstance(value, bool):
        return repr(not value)
    if isinstance(value, int):
        return repr(value + 1)
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        new = value + 1.0
        if new == value:  # |value| >= 2**53: +1.0 is lost to rounding
            new = -value
        return repr(new)
    if isinstance(value, str):
        return repr(value + "_" if value else "x")
    if isinstance(value, bytes):
        return repr(value + b"_" if value else b"x")
    return None


def _py_changed_literal(node, src):
    """Replacement text for a literal node (see _py_is_literal), or None."""
    if isinstance(node, ast.Constant):
        return _py_changed_scalar(node.value)
    if isinstance(node, ast.UnaryOp):  # -<number>
        return _py_changed_scalar(-node.operand.value)

    def seg(n):
        return src.segment(*src.span(n))

    # Displays: rebuild from the source text of the kept elements, so this
    # works without ast.unparse (3.9+) and keeps the author's formatting.
    if isinstance(node, ast.List):
        if not node.elts:
            return "[0]"
        return "[" + ", ".join(seg(e) for e in node.elts[:-1]) + "]"
    if isinstance(node, ast.Tuple):
        if not node.elts:
            return "(0,)"
        kept = [seg(e) for e in node.elts[:-1]]
        if len(kept) == 1:
            return "(" + kept[0] + ",)"
        return "(" + ", ".join(kept) + ")"
    if isinstance(node, ast.Set):
        kept = [seg(e) for e in node.elts[:-1]]
        return "{" + ", ".join(kept) + "}" if kept else "set()"
    if isinstance(node, ast.Dict):
        if not node.keys:
            return "{0: 0}"
        pairs = zip(node.keys[:-1], node.values[:-1])
        return "{" + ", ".join(seg(k) + ": " + seg(v) for k, v in pairs) + "}"
    return None


def _py_same_value(original, replacement):
    """True when both texts evaluate to equal values (e.g. {1, True} -> {1})."""
    try:
        return ast.literal_eval(original.strip()) == ast.literal_eval(replacement)
    except Exception:  # e.g. set() is not a literal on 3.8; assume different
        return False


class _PyCollector(object):
    def __init__(self, src):
        self.src = src
        self.mutants = []

    # -- finding test functions ------------------------------------------

    def scan_block(self, stmts, prefix):
        """Visit module or class body statements (not function bodies)."""
        for stmt in stmts:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if stmt.name.startswith("test"):
                    self.scan_test(stmt, ".".join(prefix + [stmt.name]))
            elif isinstance(stmt, ast.ClassDef):
                self.scan_block(stmt.body, prefix + [stmt.name])
            else:
                # Tests defined under `if`/`try`/`with` at module or class
                # level are still module- or class-level definitions.
                for field in ("body", "orelse", "finalbody"):
                    self.scan_block(getattr(stmt, field, None) or [], prefix)
                for handler in getattr(stmt, "handlers", None) or []:
                    self.scan_block(handler.body, prefix)

    def scan_test(self, func, name):
        # Any assertion lexically inside the test body counts (nested blocks,
        # nested helper functions included). Decorators are not the body.
        for stmt in func.body:
            for node in ast.walk(stmt):
                if isinstance(node, ast.Assert):
                    self.on_assert(node, name)
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    self.on_method_call(node, name)

    # -- mutants -----------------------------------------------------------

    def add(self, test, start, end, replacement, what):
        original = self.src.segment(start, end)
        if original == replacement:
            return
        self.mutants.append(
            _mutant(test, self.src.line_of(start), start, end, original, replacement, what)
        )

    def add_value(self, test, node, label):
        start, end = self.src.span(node)
        original = self.src.segment(start, end)
        replacement = _py_changed_literal(node, self.src)
        if replacement is None or _py_same_value(original, replacement):
            return
        what = "%s: expected %s -> %s" % (label, _short(original), _short(replacement))
        self.add(test, start, end, replacement, what)

    def on_method_call(self, call, test):
        attr = call.func.attr
        if attr in PY_EQUAL_ASSERTS:
            sides = self.equal_sides(call, PY_EQUAL_ASSERTS[attr])
            if sides is None:
                return
            first, second = sides
            if _py_is_literal(second):
                self.add_value(test, second, attr)
            elif _py_is_literal(first):
                self.add_value(test, first, attr)
        elif attr in PY_SWAPS:
            # The attribute node ends at the end of the method name.
            end = self.src.offset(call.func.end_lineno, call.func.end_col_offset)
            start = end - len(attr)
            if self.src.segment(start, end) != attr:
                return  # unexpected layout; never emit a wrong span
            self.add(test, start, end, PY_SWAPS[attr], "%s -> %s" % (attr, PY_SWAPS[attr]))

    @staticmethod
    def equal_sides(call, names):
        positional = []
        for arg in call.args:
            if isinstance(arg, ast.Starred):
                return None
            positional.append(arg)
        keywords = dict((k.arg, k.value) for k in call.keywords if k.arg)
        sides = []
        for i, name in enumerate(names):
            if i < len(positional):
                sides.append(positional[i])
            elif name in keywords:
                sides.append(keywords[name])
            else:
                return None
        return sides

    def on_assert(self, node, test):
        expr = node.test
        if (
            isinstance(expr, ast.Compare)
            and len(expr.ops) == 1
            and isinstance(expr.ops[0], ast.Eq)
        ):
            left, right = expr.left, expr.comparators[0]
            if _py_is_literal(right):
                return self.add_value(test, right, "assert ==")
            if _py_is_literal(left):
                return self.add_value(test, left, "assert ==")
        # Anything else: negate the whole condition.
        start, end = self.src.span(expr)
        original = self.src.segment(start, end)
        self.add(
            test,
            start,
            end,
            "not (" + original + ")",
            "assert %s -> assert not (%s)" % (_short(original, 30), _short(original, 30)),
        )


def _py_parse(text):
    # Silence SyntaxWarnings (e.g. "invalid escape sequence") on stderr.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(text)


def _py_parses(text):
    try:
        _py_parse(text)
        return True
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False


def list_python(data):
    src = _PySource(data)
    try:
        tree = _py_parse(src.text)
    except SyntaxError as e:
        raise FileError("syntax error at line %s: %s" % (e.lineno, e.msg))
    except (ValueError, RecursionError, MemoryError) as e:  # e.g. NUL bytes
        raise FileError("cannot parse: %s" % e)
    collector = _PyCollector(src)
    collector.scan_block(tree.body, [])
    mutants = _drop_overlaps(collector.mutants)
    # Safety net: the mutated file must still parse. Check all mutants at
    # once (cheap, normally passes); only on failure check them one by one.
    def parses(ms):
        return _py_parses(_splice(data, ms)[src.bom:].decode("utf-8"))

    if mutants and not parses(mutants):
        mutants = [m for m in mutants if parses([m])]
    return mutants


# ---------------------------------------------------------------------------
# Rust
# ---------------------------------------------------------------------------

# Token kinds.
IDENT, LIFETIME, PUNCT, OPEN, CLOSE = "ident", "lifetime", "punct", "open", "close"
INT, FLOAT, STR, CHAR = "int", "float", "str", "char"

_OPENERS = {b"(": b")", b"[": b"]", b"{": b"}"}
_CLOSERS = {b")", b"]", b"}"}

RUST_ASSERTS = {
    "assert", "assert_eq", "assert_ne",
    "debug_assert", "debug_assert_eq", "debug_assert_ne",
}


class RustSyntaxError(Exception):
    def __init__(self, msg, offset):
        Exception.__init__(self, msg)
        self.msg = msg
        self.offset = offset


def _is_ident_start(b):
    return b == 95 or 65 <= b <= 90 or 97 <= b <= 122 or b >= 0x80


def _is_ident_char(b):
    return _is_ident_start(b) or 48 <= b <= 57


class _Tok(object):
    __slots__ = ("kind", "start", "end", "text", "match")

    def __init__(self, kind, start, end, text):
        self.kind, self.start, self.end, self.text = kind, start, end, text
        self.match = None  # index of the matching bracket for OPEN/CLOSE

    def __repr__(self):
        return "%s(%r)" % (self.kind, self.text)


def _utf8_len(first_byte):
    if first_byte < 0x80:
        return 1
    if first_byte >= 0xF0:
        return 4
    if first_byte >= 0xE0:
        return 3
    return 2


def rust_tokens(data):
    """Lex Rust source bytes into tokens; comments and whitespace dropped.

    Works on bytes so offsets are byte offsets; everything syntactic is
    ASCII, non-ASCII bytes only appear in identifiers, literals, comments.
    Brackets are matched (tok.match) and mismatches raise RustSyntaxError.
    """
    toks = []
    n = len(data)
    i = 0
    if data.startswith(b"#!") and not data[2:].lstrip().startswith(b"["):
        # A shebang line (but not an inner attribute `#![...]`) is ignored.
        i = data.find(b"\n") + 1 or n

    def skip_quoted(j, quote):
        # j is just after the opening quote; returns the index after the
        # closing quote, honouring backslash escapes.
        while j < n:
            c = data[j]
            if c == 92:  # backslash: skip the escaped byte (\" \\ \n ...)
                j += 2
                continue
            if c == quote:
                return j + 1
            j += 1
        raise RustSyntaxError("unterminated literal", start)

    def skip_raw(j):
        # j is at the first '#' or '"' after the r/br/cr prefix.
        hashes = 0
        while j < n and data[j] == 35:
            hashes += 1
            j += 1
        if j >= n or data[j] != 34:
            raise RustSyntaxError("malformed raw string", start)
        close = b'"' + b"#" * hashes
        k = data.find(close, j + 1)
        if k < 0:
            raise RustSyntaxError("unterminated raw string", start)
        return k + len(close)

    def char_end(j):
        # j is just after an opening '\''. Returns the end of a char
        # literal, or None when this is a lifetime/label ('a, 'static).
        if j < n and data[j] == 92:  # escape: '\n' '\'' '\x7f' '\u{1F600}'
            # The byte after the backslash is part of the escape (so '\''
            # works); no longer escape contains a quote.
            k = data.find(b"'", j + 2, j + 14)
            if k < 0:
                raise RustSyntaxError("unterminated char literal", start)
            return k + 1
        if j < n:
            k = j + _utf8_len(data[j])
            if data[k : k + 1] == b"'":
                return k + 1
        return None

    while i < n:
        c = data[i]
        start = i
        # whitespace
        if c in b" \t\r\n\x0b\x0c":
            i += 1
            continue
        # comments: // to end of line; /* */ nests in Rust
        if c == 47 and data[i + 1 : i + 2] == b"/":
            j = data.find(b"\n", i)
            i = n if j < 0 else j + 1
            continue
        if c == 47 and data[i + 1 : i + 2] == b"*":
            depth, j = 1, i + 2
            while depth:
                if j >= n:
                    raise RustSyntaxError("unterminated block comment", start)
                two = data[j : j + 2]
                if two == b"/*":
                    depth, j = depth + 1, j + 2
                elif two == b"*/":
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            i = j
            continue
        if c == 34:  # "..."
            i = skip_quoted(i + 1, 34)
            toks.append(_Tok(STR, start, i, data[start:i]))
            continue
        if c == 39:  # char literal or lifetime
            end = char_end(i + 1)
            if end is not None:
                i = end
                toks.append(_Tok(CHAR, start, i, data[start:i]))
                continue
            j = i + 1
            while j < n and _is_ident_char(data[j]):
                j += 1
            if j == i + 1:
                raise RustSyntaxError("stray quote", start)
            i = j
            toks.append(_Tok(LIFETIME, start, i, data[start:i]))
            continue
        if 48 <= c <= 57:  # number
            i = _rust_number_end(data, i)
            text = data[start:i]
            toks.append(_Tok(FLOAT if _rust_is_float(text) else INT, start, i, text))
            continue
        if _is_ident_start(c):
            j = i + 1
            while j < n and _is_ident_char(data[j]):
                j += 1
            word = data[i:j]
            nxt = data[j : j + 1]
            # literal prefixes: b"" b'' r"" r#""# br"" c"" cr#""#
            if word in (b"b", b"c") and nxt == b'"':
                i = skip_quoted(j + 1, 34)
                toks.append(_Tok(STR, start, i, data[start:i]))
                continue
            if word == b"b" and nxt == b"'":
                end = char_end(j + 1)
                if end is None:
                    raise RustSyntaxError("malformed byte literal", start)
                i = end
                toks.append(_Tok(CHAR, start, i, data[start:i]))
                continue
            if word in (b"r", b"br", b"cr") and nxt in (b'"', b"#"):
                if nxt == b"#" and word == b"r" and j + 1 < n and _is_ident_start(data[j + 1]):
                    # raw identifier r#type
                    k = j + 1
                    while k < n and _is_ident_char(data[k]):
                        k += 1
                    i = k
                    toks.append(_Tok(IDENT, start, i, data[j + 1 : k]))
                    continue
                i = skip_raw(j)
                toks.append(_Tok(STR, start, i, data[start:i]))
                continue
            i = j
            toks.append(_Tok(IDENT, start, i, word))
            continue
        ch = data[i : i + 1]
        i += 1
        if ch in _OPENERS:
            toks.append(_Tok(OPEN, start, i, ch))
        elif ch in _CLOSERS:
            toks.append(_Tok(CLOSE, start, i, ch))
        else:
            toks.append(_Tok(PUNCT, start, i, ch))

    # Match brackets.
    stack = []
    for idx, t in enumerate(toks):
        if t.kind == OPEN:
            stack.append(idx)
        elif t.kind == CLOSE:
            if not stack or _OPENERS[toks[stack[-1]].text] != t.text:
                raise RustSyntaxError("unmatched %r" % t.text.decode(), t.start)
            o = stack.pop()
            toks[o].match, t.match = idx, o
    if stack:
        raise RustSyntaxError("unclosed %r" % toks[stack[-1]].text.decode(), toks[stack[-1]].start)
    return toks


def _rust_number_end(data, i):
    n = len(data)
    if data[i : i + 2] in (b"0x", b"0o", b"0b"):
        j = i + 2
        while j < n and _is_ident_char(data[j]):
            j += 1
        return j
    j = i
    while j < n and (48 <= data[j] <= 57 or data[j] == 95):
        j += 1
    # `1.5` and `2.` are floats; `1..2` (range) and `1.max(2)` are not.
    if data[j : j + 1] == b"." and not (
        data[j + 1 : j + 2] == b"." or (j + 1 < n and _is_ident_start(data[j + 1]))
    ):
        j += 1
        while j < n and (48 <= data[j] <= 57 or data[j] == 95):
            j += 1
    # exponent: 1e3 1E-3 1.5e+7
    if data[j : j + 1] in (b"e", b"E"):
        k = j + 1
        if data[k : k + 1] in (b"+", b"-"):
            k += 1
        while k < n and data[k] == 95:
            k += 1
        if k < n and 48 <= data[k] <= 57:
            j = k
            while j < n and (48 <= data[j] <= 57 or data[j] == 95):
                j += 1
    while j < n and _is_ident_char(data[j]):  # suffix: u32, f64, ...
        j += 1
    return j


def _rust_split_number(text):
    """Split a number token into (body, suffix, base); text is str."""
    low = text[:2].lower()
    if low in ("0x", "0o", "0b"):
        digits = {"0x": "0123456789abcdefABCDEF_", "0o": "01234567_", "0b": "01_"}[low]
        j = 2
        while j < len(text) and text[j] in digits:
            j += 1
        return text[:j], text[j:], {"0x": 16, "0o": 8, "0b": 2}[low]
    j = 0
    while j < len(text) and (text[j].isdigit() or text[j] in "._"):
        j += 1
    if j < len(text) and text[j] in "eE":
        k = j + 1
        if k < len(text) and text[k] in "+-":
            k += 1
        if k < len(text) and (text[k].isdigit() or text[k] == "_"):
            j = k
            while j < len(text) and (text[j].isdigit() or text[j] == "_"):
                j += 1
    return text[:j], text[j:], 10


def _rust_is_float(text):
    body, suffix, base = _rust_split_number(text.decode("ascii", "replace"))
    if base != 10:
        return False
    return "." in body or "e" in body.lower() or suffix in ("f32", "f64")


_INT_BITS = {"8": 8, "16": 16, "32": 32, "64": 64, "128": 128, "size": 64}


def _rust_int_replacement(value, suffix):
    """value + 1, or value - 1 when +1 would overflow the (likely) type."""
    new = value + 1
    if suffix[:1] in ("u", "i") and suffix[1:] in _INT_BITS:
        bits = _INT_BITS[suffix[1:]]
        hi = (1 << bits) - 1 if suffix[0] == "u" else (1 << (bits - 1)) - 1
        if new > hi:
            new = value - 1
    elif value >= 127 and new & value == 0:
        # Unsuffixed and new is a power of two >= 128 (u8/i8/.../u64 max + 1):
        # the inferred type may overflow, which would be a compile error.
        new = value - 1
    return new


def _rust_changed_literal(toks):
    """(replacement text, description) for a literal argument, or None.

    toks is the argument's token list: one literal token, `true`/`false`,
    or `-` followed by a number.
    """
    neg = False
    if len(toks) == 2 and toks[0].kind == PUNCT and toks[0].text == b"-":
        neg, toks = True, toks[1:]
        if toks[0].kind not in (INT, FLOAT):
            return None
    if len(toks) != 1:
        return None
    t = toks[0]
    text = t.text.decode("utf-8")
    if t.kind == IDENT and text in ("true", "false"):
        return "false" if text == "true" else "true"
    if t.kind == INT or t.kind == FLOAT:
        body, suffix, base = _rust_split_number(text)
        clean = body.replace("_", "")
        if t.kind == INT:
            try:
                value = int(clean[2:], base) if base != 10 else int(clean)
            except ValueError:
                return None
            value = -value if neg else value
            new = _rust_int_replacement(value, suffix)
            sign = "-" if new < 0 else ""
            mag = abs(new)
            if base == 16:
                digits = ("0x%X" if any(ch in "ABCDEF" for ch in body) else "0x%x") % mag
            elif base == 8:
                digits = "0o%o" % mag
            elif base == 2:
                digits = "0b" + bin(mag)[2:]
            else:
                digits = str(mag)
            return sign + digits + suffix
        try:
            value = float(clean)
        except ValueError:
            return None
        value = -value if neg else value
        new = value + 1.0
        if new == value:  # huge magnitude: +1.0 is lost to rounding
            new = -value
        if not math.isfinite(new):
            return None
        out = repr(new)  # always has '.' or 'e', so still a float literal
        return out + suffix
    if t.kind == STR and not neg:
        # Insert "_" just before the closing quote (works for "", r#""#,
        # b"", c"" alike since the literal is already lexed); empty -> "x".
        q = text.index('"')
        close = text.rindex('"')
        inner = text[q + 1 : close]
        if inner == "":
            return text[: q + 1] + "x" + text[close:]
        if text.startswith("b"):
            # b"abc" is a &[u8; 3]: keep the length so the type (and the
            # comparison with a fixed-size array) still compiles.
            last = _last_unit(inner, raw=text.startswith("br"))
            if last is not None:
                a, b = last
                new = "y" if inner[a:b] in ("x", "\\x78") else "x"
                return text[: q + 1] + inner[:a] + new + inner[b:] + text[close:]
        return text[:close] + "_" + text[close:]
    if t.kind == CHAR and not neg:
        q = text.index("'")
        inner = text[q + 1 : -1]
        return text[: q + 1] + ("y" if inner in ("x", "\\x78") else "x") + "'"
    return None


def _last_unit(inner, raw):
    """(start, end) of the last character or escape in a string literal's
    body that stands for exactly one character; None if there is none."""
    if raw:
        return (len(inner) - 1, len(inner))
    units = []
    i, n = 0, len(inner)
    while i < n:
        if inner[i] != "\\":
            units.append((i, i + 1))
            i += 1
        elif inner[i + 1 : i + 2] in ("\n", "\r"):
            # line continuation: produces nothing, skip it and the indent
            i += 2
            while i < n and inner[i] in " \t\r\n":
                i += 1
        elif inner[i + 1 : i + 2] == "x":
            units.append((i, i + 4))
            i += 4
        elif inner[i + 1 : i + 2] == "u":
            end = inner.find("}", i) + 1 or n
            units.append((i, end))
            i = end
        else:
            units.append((i, i + 2))
            i += 2
    return units[-1] if units else None


def _split_args(toks, lo, hi):
    """Split toks[lo:hi] at top-level commas (groups are skipped whole)."""
    args, cur = [], []
    i = lo
    while i < hi:
        t = toks[i]
        if t.kind == OPEN:
            cur.extend(toks[i : t.match + 1])
            i = t.match + 1
            continue
        if t.kind == PUNCT and t.text == b",":
            args.append(cur)
            cur = []
        else:
            cur.append(t)
        i += 1
    if cur:
        args.append(cur)  # a trailing comma leaves no empty last argument
    return args


def _is_test_attr(toks, lo, hi):
    """`#[test]`, `#[tokio::test(...)]`, ...: the attribute path's last
    segment ends in "test" (also rstest, wasm_bindgen_test); cfg(test) does
    not count since its path is `cfg`."""
    path = []
    i = lo
    while i < hi and toks[i].text == b":":  # #[::core::prelude::v1::test]
        i += 1
    while i < hi:
        t = toks[i]
        if t.kind == IDENT:
            path.append(t.text)
            i += 1
            if i + 1 < hi and toks[i].text == b":" and toks[i + 1].text == b":":
                i += 2
                continue
        break
    return bool(path) and path[-1].endswith(b"test")


class _RustCollector(object):
    def __init__(self, data, toks):
        self.data = data
        self.toks = toks
        self.mutants = []

    def text(self, start, end):
        return self.data[start:end].decode("utf-8")

    def line_of(self, offset):
        return self.data.count(b"\n", 0, offset) + 1

    def scan_items(self, lo, hi, modpath):
        """Walk item-level tokens in [lo, hi) looking for mods and test fns."""
        toks = self.toks
        pending_test = False
        i = lo
        while i < hi:
            t = toks[i]
            if t.kind == PUNCT and t.text == b"#":
                j = i + 1
                if j < hi and toks[j].text == b"!":
                    j += 1
                if j < hi and toks[j].kind == OPEN and toks[j].text == b"[":
                    if _is_test_attr(toks, j + 1, toks[j].match):
                        pending_test = True
                    i = toks[j].match + 1
                    continue
            if t.kind == IDENT and t.text == b"mod" and i + 2 < hi and toks[i + 1].kind == IDENT:
                body = toks[i + 2]
                if body.kind == OPEN and body.text == b"{":
                    self.scan_items(i + 3, body.match, modpath + [toks[i + 1].text.decode()])
                    i = body.match + 1
                    pending_test = False
                    continue
            if t.kind == IDENT and t.text == b"fn" and i + 1 < hi and toks[i + 1].kind == IDENT:
                name = toks[i + 1].text.decode()
                j = i + 2
                # The body is the first `{` group at this level after the
                # name (params and return type come first); `;` = no body.
                while j < hi and not (toks[j].kind == OPEN and toks[j].text == b"{"):
                    if toks[j].kind == PUNCT and toks[j].text == b";":
                        break
                    j = toks[j].match + 1 if toks[j].kind == OPEN else j + 1
                if j < hi and toks[j].kind == OPEN and toks[j].text == b"{":
                    if pending_test:
                        self.scan_body(j + 1, toks[j].match, "::".join(modpath + [name]))
                    i = toks[j].match + 1
                else:
                    i = j + 1
                pending_test = False
                continue
            if t.kind == OPEN:
                # impl/trait/struct bodies, macro_rules! templates, ...:
                # tests there are not plain test fns; skip the group. A
                # `(`/`[` group (as in `pub(crate) fn`) keeps a pending #[test].
                i = t.match + 1
                if t.text == b"{":
                    pending_test = False
                continue
            if t.kind == PUNCT and t.text == b";":
                pending_test = False
            i += 1

    def scan_body(self, lo, hi, test):
        toks = self.toks
        i = lo
        while i < hi:
            t = toks[i]
            if (
                t.kind == IDENT
                and t.text.decode() in RUST_ASSERTS
                and i + 2 < hi
                and toks[i + 1].text == b"!"
                and toks[i + 2].kind == OPEN
            ):
                open_ = toks[i + 2]
                self.on_macro(t.text.decode(), i + 3, open_.match, test)
                i = open_.match + 1  # nested assertions are not mutated
                continue
            i += 1

    def on_macro(self, name, lo, hi, test):
        args = _split_args(self.toks, lo, hi)
        if name.endswith("_eq"):
            if len(args) < 2:
                return
            for side in (args[1], args[0]):  # prefer the right side
                replacement = _rust_changed_literal(side)
                if replacement is not None:
                    start, end = side[0].start, side[-1].end
                    original = self.text(start, end)
                    what = "%s!: expected %s -> %s" % (name, _short(original), _short(replacement))
                    self.add(test, start, end, replacement, what)
                    return
        elif name.endswith("_ne"):
            return  # a changed value rarely makes assert_ne! fail
        else:
            if not args or not args[0]:
                return
            start, end = args[0][0].start, args[0][-1].end
            cond = self.text(start, end)
            what = "%s!(%s) -> %s!(!(%s))" % (name, _short(cond, 30), name, _short(cond, 30))
            self.add(test, start, end, "!(" + cond + ")", what)

    def add(self, test, start, end, replacement, what):
        original = self.text(start, end)
        if original != replacement:
            self.mutants.append(
                _mutant(test, self.line_of(start), start, end, original, replacement, what)
            )


def list_rust(data):
    _decode_utf8(data)  # Rust sources must be UTF-8
    try:
        toks = rust_tokens(data)
    except RustSyntaxError as e:
        raise FileError(
            "syntax error at line %d: %s" % (data.count(b"\n", 0, e.offset) + 1, e.msg)
        )
    collector = _RustCollector(data, toks)
    collector.scan_items(0, len(toks), [])
    return _drop_overlaps(collector.mutants)


# ---------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------

LISTERS = {".py": list_python, ".rs": list_rust}


def list_file(root, rel):
    """Mutant dicts (with "file") for one file, or a one-element error list."""
    ext = os.path.splitext(rel)[1].lower()
    lister = LISTERS.get(ext)
    try:
        if lister is None:
            raise FileError("unsupported extension %r" % (ext or rel))
        try:
            with open(os.path.join(root, rel), "rb") as f:
                data = f.read()
        except (IOError, OSError) as e:
            raise FileError("cannot read: %s" % (e.strerror or e))
        found = lister(data)
    except FileError as e:
        return [{"file": rel, "error": str(e)}]
    out = []
    for m in found:
        d = {"file": rel}
        d.update(m)
        out.append(d)
    return out


def main(argv):
    if not argv:
        sys.stderr.write("usage: mutate.py ROOT FILE...\n")
        return 2
    if not os.path.isdir(argv[0]):
        sys.stderr.write("mutate.py: ROOT is not a directory: %s\n" % argv[0])
        return 2
    root = argv[0]
    for rel in argv[1:]:
        for record in list_file(root, rel):
            sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
