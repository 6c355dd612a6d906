"""textkit: small arithmetic and text helpers."""

from textkit.calc import add, divide, multiply, range_sum, subtract
from textkit.text import slugify, title_case, word_count

__all__ = [
    "add",
    "divide",
    "multiply",
    "range_sum",
    "slugify",
    "subtract",
    "title_case",
    "word_count",
]
