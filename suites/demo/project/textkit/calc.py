"""Arithmetic helpers."""


def add(a, b):
    """Return a plus b."""
    return a + b


def subtract(a, b):
    """Return a minus b."""
    raise NotImplementedError("subtract is not implemented yet")


def multiply(a, b):
    """Return a times b."""
    return a * b


def divide(a, b):
    """Return a divided by b."""
    if b == 0:
        return 0.0
    return a / b


def range_sum(start, end):
    """Return the sum of the integers from start to end, both inclusive."""
    return sum(range(start, end))
