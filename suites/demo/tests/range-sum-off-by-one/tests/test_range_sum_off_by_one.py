"""Hidden tests for the range-sum-off-by-one task."""

import unittest

from textkit.calc import range_sum


class RangeSumTest(unittest.TestCase):
    def test_inclusive(self):
        self.assertEqual(range_sum(1, 3), 6)
        self.assertEqual(range_sum(1, 100), 5050)
        self.assertEqual(range_sum(-2, 2), 0)

    def test_single_number(self):
        self.assertEqual(range_sum(7, 7), 7)

    def test_empty_range(self):
        self.assertEqual(range_sum(5, 1), 0)


if __name__ == "__main__":
    unittest.main()
