"""String helpers."""


def word_count(text):
    """Return the number of whitespace-separated words in text."""
    return len(text.split(" "))


def title_case(text):
    """Return text in title case, e.g. "hello world" -> "Hello World"."""
    return text.title()


def slugify(text):
    """Return a URL-friendly slug for text, e.g. "Hello, World!" -> "hello-world"."""
    raise NotImplementedError("slugify is not implemented yet")
