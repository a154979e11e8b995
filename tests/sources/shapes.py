"""Functions laid out in the ways a kernel's source can be (tests/test_source.py reads them)."""
import functools


def plain(x):
    return x + 1


@functools.lru_cache(
    maxsize=None)
def decorated_over_lines(x):
    return x


def comment_at_column_zero(x):
    y = x + 1
# a comment at the margin, inside the body
    return y


def signature_closing_at_the_margin(
    x,
):
    return x


def docstring_at_the_margin(x):
    """First line
of a docstring that runs at the margin."""
    return x


def continued_at_the_margin(x):
    y = (x +
1)
    return y


def outer():
    def nested(x):
        return x * 2

    return nested


nested = outer()


def last(x):
    return x
