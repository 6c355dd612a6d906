"""Hidden tests for the word-count task."""

import unittest

from textkit.text import word_count


class WordCountTest(unittest.TestCase):
    def test_empty(self):
        self.assertEqual(word_count(""), 0)
        self.assertEqual(word_count("   "), 0)

    def test_repeated_spaces(self):
        self.assertEqual(word_count("hello   world"), 2)

    def test_mixed_whitespace(self):
        self.assertEqual(word_count("one\ntwo\tthree "), 3)
        self.assertEqual(word_count("  leading and trailing  "), 3)

    def test_simple(self):
        self.assertEqual(word_count("hello world"), 2)


if __name__ == "__main__":
    unittest.main()
