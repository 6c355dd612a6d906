"""Hidden tests for the fix-divide-by-zero task."""

import unittest

from textkit.calc import divide


class DivideTest(unittest.TestCase):
    def test_zero_divisor_raises(self):
        with self.assertRaises(ValueError):
            divide(1, 0)
        with self.assertRaises(ValueError):
            divide(0, 0.0)

    def test_ordinary_division(self):
        self.assertEqual(divide(10, 4), 2.5)
        self.assertEqual(divide(0, 5), 0)
        self.assertEqual(divide(-9, 3), -3)


if __name__ == "__main__":
    unittest.main()
