"""Reading a kernel's source (`frontend.source`): the indentation scan gives what the
tokenizer (`inspect.getsourcelines`) gives, or hands over to it; line and column numbers
are the file's."""
import inspect

import pytest

from tests.sources import shapes
from verdigris.frontend import source

FUNCTIONS = [shapes.plain, shapes.decorated_over_lines.__wrapped__, shapes.comment_at_column_zero,
             shapes.signature_closing_at_the_margin, shapes.docstring_at_the_margin,
             shapes.continued_at_the_margin, shapes.nested, shapes.last]


@pytest.mark.parametrize("func", FUNCTIONS, ids=lambda f: f.__name__)
def test_the_source_is_the_tokenizers(func):
    lines, first = inspect.getsourcelines(func)
    read = source.function_source.__wrapped__(func)
    assert read.text == "".join(lines)
    assert read.tree.name == func.__name__
    body = read.tree.body[-1]  # each ends in a return: its place in the file
    line = lines[body.lineno - first]
    assert line[body.col_offset:].startswith("return")


def test_the_indentation_scan_is_used_where_it_is_exact():
    file = inspect.getsourcefile(shapes)
    exact = {f.__name__ for f in FUNCTIONS if source._by_indentation(f, file) is not None}
    assert exact == {"plain", "decorated_over_lines", "comment_at_column_zero", "nested", "last"}
