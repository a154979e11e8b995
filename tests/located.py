"""Shared assertion for error-message tests: the message points at the user's line."""


def assert_points_at(err, marker: str, file: str) -> None:
    """`err`'s message names `file`, the line holding `marker`, and shows it with a caret."""
    source = open(file).read().splitlines()
    line = next(i + 1 for i, text in enumerate(source)
                if marker in text and "assert_points_at" not in text)
    text = str(err)
    assert f"{file}:{line}:" in text, text
    assert marker in text and "^" in text, text
