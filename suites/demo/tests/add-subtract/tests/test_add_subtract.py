"""Hidden tests for the add-subtract task."""

import unittest

from textkit.calc import subtract


class SubtractTest(unittest.TestCase):
    def test_integers(self):
        self.assertEqual(subtract(5, 3), 2)
        self.assertEqual(subtract(3, 5), -2)
        self.assertEqual(subtract(0, 0), 0)

    def test_negative(self):
        self.assertEqual(subtract(-4, -6), 2)

    def test_floats(self):
        self.assertAlmostEqual(subtract(2.5, 0.5), 2.0)


if __name__ == "__main__":
    unittest.main()
