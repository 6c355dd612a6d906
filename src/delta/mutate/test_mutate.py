"""Tests for mutate.py (the assertion-mutant lister).

Run: python3 -m unittest discover -s src/delta/mutate -p 'test_*.py'
"""

import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import mutate  # noqa: E402

SCRIPT = os.path.join(HERE, "mutate.py")
KEYS = ["file", "test", "line", "start", "end", "original", "replacement", "what"]


def _src(text):
    return textwrap.dedent(text).lstrip("\n")


class Base(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="mutate-test-")

    def tearDown(self):
        shutil.rmtree(self.root)

    def write(self, rel, content):
        path = os.path.join(self.root, rel)
        d = os.path.dirname(path)
        if not os.path.isdir(d):
            os.makedirs(d)
        data = content.encode("utf-8") if isinstance(content, str) else content
        with open(path, "wb") as f:
            f.write(data)
        return data

    def run_cli(self, *args):
        p = subprocess.run(
            [sys.executable, SCRIPT] + list(args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        lines = [json.loads(l) for l in p.stdout.decode("utf-8").splitlines()]
        return p.returncode, lines

    def mutants(self, rel, content):
        """List mutants of one file and check the span invariants on each."""
        data = self.write(rel, content)
        found = mutate.list_file(self.root, rel)
        for m in found:
            if "error" in m:
                continue
            self.assertEqual(list(m), KEYS)
            self.assertEqual(m["file"], rel)
            self.assertEqual(data[m["start"]:m["end"]].decode("utf-8"), m["original"])
            self.assertEqual(data.count(b"\n", 0, m["start"]) + 1, m["line"])
            self.assertNotEqual(m["original"], m["replacement"])
        return found

    def one(self, found, original):
        hits = [m for m in found if m.get("original") == original]
        self.assertEqual(len(hits), 1, "want one mutant of %r in %r" % (original, found))
        return hits[0]


# ---------------------------------------------------------------------------
# Python
# ---------------------------------------------------------------------------


class PythonTest(Base):
    def test_unittest_assert_equal(self):
        found = self.mutants("tests/test_calc.py", _src("""
            import unittest

            class TestCalc(unittest.TestCase):
                def test_add(self):
                    self.assertEqual(add(2, 3), 5)
        """))
        self.assertEqual(len(found), 1)
        m = found[0]
        self.assertEqual(m["test"], "TestCalc.test_add")
        self.assertEqual(m["line"], 5)
        self.assertEqual((m["original"], m["replacement"]), ("5", "6"))
        self.assertEqual(m["what"], "assertEqual: expected 5 -> 6")

    def test_prefers_second_then_first_and_skips_non_literals(self):
        found = self.mutants("test_a.py", _src("""
            def test_x():
                self.assertEqual(1, 2)
                self.assertEqual(7, f())
                self.assertEqual(f(), g())
                self.assertEqual(first=f(), second=9)
        """))
        self.assertEqual([m["original"] for m in found], ["2", "7", "9"])

    def test_value_changes(self):
        found = self.mutants("test_v.py", _src("""
            def test_values(self):
                self.assertEqual(x, 41)
                self.assertEqual(x, -3)
                self.assertEqual(x, -1)
                self.assertEqual(x, 2.5)
                self.assertEqual(x, 'abc')
                self.assertEqual(x, "")
                self.assertEqual(x, b'ab')
                self.assertEqual(x, b"")
                self.assertEqual(x, True)
                self.assertEqual(x, False)
                self.assertEqual(x, [1, [2, 3], 'z'])
                self.assertEqual(x, [])
                self.assertEqual(x, (1, 2))
                self.assertEqual(x, (1, 2, 3))
                self.assertEqual(x, ())
                self.assertEqual(x, {'a': 1, 'b': 2})
                self.assertEqual(x, {})
                self.assertEqual(x, {1, 2})
                self.assertEqual(x, {1})
                self.assertEqual(x, 0x10)
        """))
        pairs = [(m["original"], m["replacement"]) for m in found]
        self.assertEqual(pairs, [
            ("41", "42"),
            ("-3", "-2"),
            ("-1", "0"),
            ("2.5", "3.5"),
            ("'abc'", "'abc_'"),
            ('""', "'x'"),
            ("b'ab'", "b'ab_'"),
            ('b""', "b'x'"),
            ("True", "False"),
            ("False", "True"),
            ("[1, [2, 3], 'z']", "[1, [2, 3]]"),
            ("[]", "[0]"),
            ("(1, 2)", "(1,)"),  # one-element tuple keeps its comma
            ("(1, 2, 3)", "(1, 2)"),
            ("()", "(0,)"),
            ("{'a': 1, 'b': 2}", "{'a': 1}"),
            ("{}", "{0: 0}"),
            ("{1, 2}", "{1}"),
            ("{1}", "set()"),
            ("0x10", "17"),
        ])
        for original, replacement in pairs:
            if replacement != "set()":
                self.assertNotEqual(ast.literal_eval(original), ast.literal_eval(replacement))

    def test_same_value_replacement_is_dropped(self):
        # {1, True} == {1}: dropping an element would not change the value.
        found = self.mutants("test_s.py", "def test_s():\n    assert x == {1, True}\n")
        self.assertEqual(found, [])

    def test_huge_and_non_finite_floats(self):
        found = self.mutants("test_f.py", _src("""
            def test_f():
                assert x == 1e20
                assert x == 1e999
        """))
        self.assertEqual([(m["original"], m["replacement"]) for m in found], [("1e20", "-1e+20")])

    def test_almost_equal_and_other_equal_asserts(self):
        found = self.mutants("test_o.py", _src("""
            class T(object):
                def test_o(self):
                    self.assertAlmostEqual(x, 0.3)
                    self.assertCountEqual(x, [1, 2])
                    self.assertDictEqual(x, {})
                    self.assertMultiLineEqual(x, "a\\nb")
                    self.assertEquals(x, 3)
        """))
        self.assertEqual(
            [m["what"] for m in found],
            [
                "assertAlmostEqual: expected 0.3 -> 1.3",
                "assertCountEqual: expected [1, 2] -> [1]",
                "assertDictEqual: expected {} -> {0: 0}",
                "assertMultiLineEqual: expected \"a\\nb\" -> 'a\\nb_'",
                "assertEquals: expected 3 -> 4",
            ],
        )

    def test_method_swaps(self):
        found = self.mutants("test_sw.py", _src("""
            class T(unittest.TestCase):
                def test_sw(self):
                    self.assertTrue(ok())
                    self.assertFalse(ok())
                    self.assertIsNone(v)
                    self.assertIsNotNone(v)
                    self.assertIn(1, v)
                    self.assertNotIn(1, v)
                    self.assertIs(a, b)
                    self.assertIsNot(a, b)
                    self.assertIsInstance(a, int)
                    self.assertNotIsInstance(a, int)
        """))
        self.assertEqual(
            [(m["original"], m["replacement"]) for m in found],
            [
                ("assertTrue", "assertFalse"),
                ("assertFalse", "assertTrue"),
                ("assertIsNone", "assertIsNotNone"),
                ("assertIsNotNone", "assertIsNone"),
                ("assertIn", "assertNotIn"),
                ("assertNotIn", "assertIn"),
                ("assertIs", "assertIsNot"),
                ("assertIsNot", "assertIs"),
                ("assertIsInstance", "assertNotIsInstance"),
                ("assertNotIsInstance", "assertIsInstance"),
            ],
        )
        self.assertEqual(found[0]["what"], "assertTrue -> assertFalse")

    def test_bare_asserts(self):
        found = self.mutants("test_b.py", _src("""
            def test_b():
                assert ok()
                assert a in b, "message"
                assert not x
                assert f(a) == g(b)
                assert x == 3
                assert 3 == x
        """))
        self.assertEqual(
            [(m["original"], m["replacement"]) for m in found],
            [
                ("ok()", "not (ok())"),
                ("a in b", "not (a in b)"),
                ("not x", "not (not x)"),
                ("f(a) == g(b)", "not (f(a) == g(b))"),
                ("3", "4"),
                ("3", "4"),
            ],
        )
        self.assertEqual(found[0]["what"], "assert ok() -> assert not (ok())")
        self.assertEqual(found[4]["what"], "assert ==: expected 3 -> 4")
        self.assertEqual(found[5]["start"], found[5]["end"] - 1)
        self.assertEqual(found[5]["line"], 7)

    def test_non_testcase_class_and_nested_classes(self):
        found = self.mutants("test_p.py", _src("""
            class TestPlain:
                def test_one(self):
                    assert value() == 1

                def helper(self):
                    assert value() == 1

                class TestInner:
                    def test_two(self):
                        assert value() == 2
        """))
        self.assertEqual(
            [(m["test"], m["original"]) for m in found],
            [("TestPlain.test_one", "1"), ("TestPlain.TestInner.test_two", "2")],
        )

    def test_pytest_module_functions_async_and_nested_blocks(self):
        found = self.mutants("test_m.py", _src("""
            import pytest

            def helper():
                assert compute() == 1

            def test_plain():
                for i in range(3):
                    with ctx():
                        if i:
                            assert compute(i) == 2

            async def test_async():
                assert await compute() == 3

            if True:
                def test_conditional():
                    assert compute() == 4
        """))
        self.assertEqual(
            [(m["test"], m["original"]) for m in found],
            [("test_plain", "2"), ("test_async", "3"), ("test_conditional", "4")],
        )

    def test_function_nested_in_function_is_not_a_test(self):
        found = self.mutants("test_n.py", _src("""
            def make():
                def test_inner():
                    assert x == 1
                return test_inner
        """))
        self.assertEqual(found, [])

    def test_multiline_assert_equal(self):
        content = _src("""
            class TestMulti(unittest.TestCase):
                def test_multi(self):
                    self.assertEqual(
                        compute(
                            1,
                        ),
                        {
                            "a": 1,
                            "b": 2,
                        },
                    )
        """)
        found = self.mutants("test_ml.py", content)
        self.assertEqual(len(found), 1)
        m = found[0]
        self.assertEqual(m["line"], 7)
        self.assertTrue(m["original"].startswith("{") and m["original"].endswith("}"))
        self.assertEqual(ast.literal_eval(m["replacement"]), {"a": 1})

    def test_non_ascii_before_and_on_line(self):
        content = _src("""
            # Ünïcödé comment: ✓ 😀
            def test_u():
                s = "ß✓"; assert f("é😀") == "ü"; assert g() == 5
                self.assertTrue("ø" in s)
        """)
        found = self.mutants("test_u.py", content)
        self.assertEqual(
            [(m["original"], m["replacement"]) for m in found],
            [('"ü"', "'ü_'"), ("5", "6"), ("assertTrue", "assertFalse")],
        )
        # Byte offsets, not character offsets: they differ on these lines.
        data = content.encode("utf-8")
        self.assertEqual(found[1]["start"], data.index(b"== 5") + 3)
        self.assertNotEqual(found[1]["start"], content.index("== 5") + 3)

    def test_bom_and_crlf(self):
        content = "\ufeffdef test_c():\r\n    x = 'é'\r\n    assert x == 'é'\r\n"
        found = self.mutants("test_c.py", content)
        self.assertEqual(len(found), 1)
        self.assertEqual(found[0]["line"], 3)
        self.assertEqual(found[0]["original"], "'é'")

    def test_syntax_error_reports_line(self):
        found = self.mutants("test_bad.py", "def test_x():\n    pass\n\ndef test_y(:\n    pass\n")
        self.assertEqual(len(found), 1)
        self.assertEqual(found[0]["file"], "test_bad.py")
        self.assertIn("line 4", found[0]["error"])

    def test_non_utf8_file(self):
        found = self.mutants("test_latin.py", b"# caf\xe9\ndef test_x():\n    assert x == 1\n")
        self.assertEqual(len(found), 1)
        self.assertIn("UTF-8", found[0]["error"])
        self.assertIn("line 1", found[0]["error"])

    def test_null_byte_file(self):
        found = self.mutants("test_nul.py", b"def test_x():\n    assert x == 1\x00\n")
        self.assertEqual(set(found[0]), {"file", "error"})


# ---------------------------------------------------------------------------
# Rust
# ---------------------------------------------------------------------------

RUST_SRC = _src(r'''
    pub fn add(a: u32, b: u32) -> u32 {
        assert!(a < 1000);
        a + b
    }

    fn helper() {
        assert_eq!(add(1, 2), 3);
    }

    /* a comment with assert_eq!(add(1, 2), 3) /* nested */ assert!(x) */
    #[cfg(test)]
    mod tests {
        use super::*;

        // assert_eq!(add(1, 2), 3)
        #[test]
        fn adds_two() {
            let raw = r#"assert_eq!(1, 2) " still raw"#;
            let raw2 = r"assert!(false)";
            let chars = ['\u{1F600}', '\'', '"', '\x7f', 'é'];
            let s: &'static str = "assert_eq!(\"1\", 2)";
            assert_eq!(add(1, 2), 3);
            assert_eq!(format!("{}, ({}", 1, 2), "1, (2");
        }

        #[test]
        #[should_panic(expected = "boom")]
        pub(crate) fn labelled<'a>() -> Result<(), Box<dyn Error>> {
            'outer: loop { break 'outer; }
            assert!(helper_ok(), "not ok: {}", 1);
            Ok(())
        }

        #[tokio::test(flavor = "multi_thread")]
        async fn async_one() {
            assert_eq!(fetch().await, "done");
        }

        mod inner {
            #[test]
            fn deep() {
                assert_eq![value(), -3i32];
            }
        }
    }
''')


class RustTest(Base):
    def test_sample_file(self):
        found = self.mutants("src/lib.rs", RUST_SRC)
        self.assertEqual(
            [(m["test"], m["original"], m["replacement"]) for m in found],
            [
                ("tests::adds_two", "3", "4"),
                ("tests::adds_two", '"1, (2"', '"1, (2_"'),
                ("tests::labelled", "helper_ok()", "!(helper_ok())"),
                ("tests::async_one", '"done"', '"done_"'),
                ("tests::inner::deep", "-3i32", "-2i32"),
            ],
        )
        self.assertEqual(found[0]["what"], "assert_eq!: expected 3 -> 4")
        self.assertEqual(found[0]["line"], 22)

    def test_top_level_test_fn_name(self):
        found = self.mutants("tests/it.rs", "#[test]\nfn adds_two() { assert_eq!(f(), 2); }\n")
        self.assertEqual([m["test"] for m in found], ["adds_two"])

    def test_literal_kinds(self):
        found = self.mutants("tests/lit.rs", _src(r'''
            #[test]
            fn lits() {
                assert_eq!(x, 5u32);
                assert_eq!(x, 1_000);
                assert_eq!(x, 0xffu8);
                assert_eq!(x, 0b101);
                assert_eq!(x, 255);
                assert_eq!(x, 255u8);
                assert_eq!(x, 127i8);
                assert_eq!(x, 1.5);
                assert_eq!(x, 2.0f64);
                assert_eq!(x, 1e3);
                assert_eq!(x, 3f32);
                assert_eq!(x, -1.5);
                assert_eq!(x, -1);
                assert_eq!(x, "");
                assert_eq!(x, "a\"b\\");
                assert_eq!(x, r#"q"#);
                assert_eq!(x, b"by");
                assert_eq!(x, b"ax");
                assert_eq!(x, b"a\n");
                assert_eq!(x, br#"r"#);
                assert_eq!(x, '\x78');
                assert_eq!(x, 'a');
                assert_eq!(x, 'x');
                assert_eq!(x, '\n');
                assert_eq!(x, b'a');
                assert_eq!(x, true);
                assert_eq!(x, false);
                debug_assert_eq!(x, 7);
                assert_eq!(x, y);
                assert_ne!(x, 3);
                assert_eq!(1..2, x);
            }
        '''))
        self.assertEqual(
            [(m["original"], m["replacement"]) for m in found],
            [
                ("5u32", "6u32"),
                ("1_000", "1001"),
                ("0xffu8", "0xfeu8"),  # u8::MAX + 1 would not compile
                ("0b101", "0b110"),
                ("255", "254"),  # may be inferred as u8
                ("255u8", "254u8"),
                ("127i8", "126i8"),
                ("1.5", "2.5"),
                ("2.0f64", "3.0f64"),
                ("1e3", "1001.0"),
                ("3f32", "4.0f32"),
                ("-1.5", "-0.5"),
                ("-1", "0"),
                ('""', '"x"'),
                ('"a\\"b\\\\"', '"a\\"b\\\\_"'),
                ('r#"q"#', 'r#"q_"#'),
                ('b"by"', 'b"bx"'),  # same length: b"" literals are arrays
                ('b"ax"', 'b"ay"'),
                ('b"a\\n"', 'b"ax"'),
                ('br#"r"#', 'br#"x"#'),
                ("'\\x78'", "'y'"),
                ("'a'", "'x'"),
                ("'x'", "'y'"),
                ("'\\n'", "'x'"),
                ("b'a'", "b'x'"),
                ("true", "false"),
                ("false", "true"),
                ("7", "8"),
            ],
        )
        self.assertEqual(found[-1]["what"], "debug_assert_eq!: expected 7 -> 8")

    def test_assert_forms(self):
        found = self.mutants("tests/forms.rs", _src('''
            #[test]
            fn forms() {
                assert!(a == b);
                assert![!ok()];
                debug_assert!{x.is_empty(), "msg, with comma"}
                assert!(v.iter().any(|x| x > 1), "{}", v.len());
                assert!(
                    long_condition(1, 2)
                        && other(),
                );
            }
        '''))
        self.assertEqual(
            [m["replacement"] for m in found],
            [
                "!(a == b)",
                "!(!ok())",
                "!(x.is_empty())",
                "!(v.iter().any(|x| x > 1))",
                "!(long_condition(1, 2)\n            && other())",
            ],
        )
        self.assertEqual(found[0]["what"], "assert!(a == b) -> assert!(!(a == b))")
        self.assertEqual(found[4]["line"], 8)

    def test_non_test_fns_and_cfg_test_alone_are_skipped(self):
        found = self.mutants("src/util.rs", _src('''
            #[cfg(test)]
            fn helper() { assert_eq!(a, 1); }
            #[inline]
            fn other() { assert!(x); }
            #[test]
            fn real() { assert_eq!(a, 2); }
            impl Foo { fn m(&self) { assert!(y); } }
            macro_rules! gen { ($n:ident) => { #[test] fn $n() { assert!(z); } } }
        '''))
        self.assertEqual([(m["test"], m["original"]) for m in found], [("real", "2")])

    def test_non_ascii_offsets(self):
        content = "// é ✓ 😀\n#[test]\nfn t() { let s = \"ü😀\"; assert_eq!(s, \"ö\"); }\n"
        found = self.mutants("tests/u.rs", content)
        self.assertEqual(len(found), 1)
        self.assertEqual(found[0]["original"], '"ö"')
        self.assertEqual(found[0]["line"], 3)

    def test_shebang_and_inner_attribute(self):
        found = self.mutants("s.rs", "#!/usr/bin/env run-cargo-script 'it's\n#[test]\nfn t() { assert!(a); }\n")
        self.assertEqual([m["original"] for m in found], ["a"])
        found = self.mutants("s2.rs", "#![allow(dead_code)]\n#[test]\nfn t() { assert!(b); }\n")
        self.assertEqual([m["original"] for m in found], ["b"])

    def test_unbalanced_is_an_error_with_line(self):
        found = self.mutants("src/bad.rs", "fn a() {}\n\nfn b() { (\n}\n")
        self.assertEqual(len(found), 1)
        self.assertIn("line", found[0]["error"])
        found = self.mutants("src/bad2.rs", "fn a() {}\n/* never closed\n")
        self.assertIn("line 2", found[0]["error"])

    def test_non_utf8_rust(self):
        found = self.mutants("src/latin.rs", b"// caf\xe9\n#[test] fn t() { assert!(x); }\n")
        self.assertIn("UTF-8", found[0]["error"])


# ---------------------------------------------------------------------------
# Round trip: every mutant splices into a file that still parses
# ---------------------------------------------------------------------------

PY_SAMPLES = [
    _src('''
        import unittest

        class TestAll(unittest.TestCase):
            def test_many(self):
                s = "ünï"; self.assertEqual(f(s), [1, (2,), {"k": -3.5}])
                self.assertEqual(
                    f(1),
                    (
                        1,
                        2,
                    ),
                )
                self.assertTrue(g(
                    1))
                self.assertIn(1, [1])
                self.assertEqual(f(), """multi
        line""")
                self.assertSetEqual(s, {1, 2})
                self.assertEqual(-7, f())

        def test_pytest(tmp_path):
            assert (a) == (b)
            assert (x
                    and y)
            assert not x, "m"
            assert a \\
                in b
            assert f() == ("a" "b")
            assert f() == {}
            assert [] == f()
    '''),
]

RUST_SAMPLES = [RUST_SRC]


def _rust_balanced(data):
    try:
        mutate.rust_tokens(data)
        return True
    except mutate.RustSyntaxError:
        return False


class RoundTripTest(Base):
    def check(self, rel, content, parses):
        found = self.mutants(rel, content)
        self.assertTrue(found)
        data = content.encode("utf-8")
        self.assertTrue(parses(data))
        for m in found:
            mutated = mutate._splice(data, [m])
            self.assertNotEqual(mutated, data)
            self.assertTrue(parses(mutated), "mutant breaks the file: %r" % (m,))
        # Mutants never overlap, so all of them can be applied together.
        self.assertTrue(parses(mutate._splice(data, found)))

    def test_python_round_trip(self):
        for i, content in enumerate(PY_SAMPLES):
            self.check("test_rt%d.py" % i, content, lambda d: bool(ast.parse(d.decode("utf-8"))))

    def test_rust_round_trip(self):
        for i, content in enumerate(RUST_SAMPLES):
            self.check("src/rt%d.rs" % i, content, _rust_balanced)


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------


class CliTest(Base):
    def test_usage_errors(self):
        self.assertEqual(self.run_cli()[0], 2)
        self.assertEqual(self.run_cli(os.path.join(self.root, "missing-dir"), "a.py")[0], 2)

    def test_files_in_order_and_errors_do_not_stop(self):
        self.write("test_bad.py", "def test_x(:\n")
        self.write("test_good.py", "def test_y():\n    assert x == 1\n")
        self.write("tests/lib.rs", "#[test]\nfn t() { assert!(ok); }\n")
        self.write("notes.txt", "hi")
        rc, lines = self.run_cli(
            self.root, "test_bad.py", "test_good.py", "missing.py", "notes.txt", "tests/lib.rs"
        )
        self.assertEqual(rc, 0)
        self.assertEqual([l["file"] for l in lines],
                         ["test_bad.py", "test_good.py", "missing.py", "notes.txt", "tests/lib.rs"])
        self.assertIn("line 1", lines[0]["error"])
        self.assertEqual(lines[1]["replacement"], "2")
        self.assertEqual(list(lines[1]), KEYS)
        self.assertIn("error", lines[2])
        self.assertIn("unsupported", lines[3]["error"])
        self.assertEqual(lines[4]["test"], "t")

    def test_root_only_lists_nothing(self):
        self.assertEqual(self.run_cli(self.root), (0, []))


if __name__ == "__main__":
    unittest.main()
