"""Hidden tests for the slugify task."""

import unittest

from textkit.text import slugify


class SlugifyTest(unittest.TestCase):
    def test_basic(self):
        self.assertEqual(slugify("Hello, World!"), "hello-world")

    def test_runs_and_edges(self):
        self.assertEqual(slugify("  Rust & Python 3  "), "rust-python-3")
        self.assertEqual(slugify("a--b__c"), "a-b-c")

    def test_accents(self):
        self.assertEqual(slugify("Crème Brûlée"), "creme-brulee")

    def test_nothing_left(self):
        self.assertEqual(slugify("!!!"), "")
        self.assertEqual(slugify(""), "")


if __name__ == "__main__":
    unittest.main()
