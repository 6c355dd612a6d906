"""The project's own tests."""

import unittest

from textkit import calc, text


class CalcTest(unittest.TestCase):
    def test_add(self):
        self.assertEqual(calc.add(2, 3), 5)
        self.assertEqual(calc.add(-1, 1), 0)

    def test_multiply(self):
        self.assertEqual(calc.multiply(4, 5), 20)
        self.assertEqual(calc.multiply(-2, 3), -6)

    def test_divide(self):
        self.assertEqual(calc.divide(10, 4), 2.5)
        self.assertEqual(calc.divide(-9, 3), -3)


class TextTest(unittest.TestCase):
    def test_word_count(self):
        self.assertEqual(text.word_count("hello world"), 2)
        self.assertEqual(text.word_count("one"), 1)

    def test_title_case(self):
        self.assertEqual(text.title_case("hello world"), "Hello World")


if __name__ == "__main__":
    unittest.main()
