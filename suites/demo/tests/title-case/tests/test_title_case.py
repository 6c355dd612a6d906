"""Hidden tests for the title-case task."""

import unittest

from textkit.text import title_case


class TitleCaseTest(unittest.TestCase):
    def test_apostrophes(self):
        self.assertEqual(title_case("don't stop"), "Don't Stop")

    def test_small_words(self):
        self.assertEqual(title_case("the lord OF the rings"), "The Lord of the Rings")
        self.assertEqual(title_case("war and peace"), "War and Peace")

    def test_first_word_always_capitalized(self):
        self.assertEqual(title_case("a tale of two cities"), "A Tale of Two Cities")

    def test_mixed_case_and_spacing(self):
        self.assertEqual(title_case("  hELLO   wORLD "), "Hello World")
        self.assertEqual(title_case(""), "")


if __name__ == "__main__":
    unittest.main()
