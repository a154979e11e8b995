"""A progress bar on stderr: tqdm's where it is installed, else a plain one.

Takes: the number of steps. Gives: `bar(total)`, a context manager whose `step(label)`
advances by one and shows what runs next. Guarantees: writes only to stderr (the table
goes to stdout); the plain bar redraws one line on a terminal and prints a line per step
otherwise, so a log of the run stays readable.
"""
from __future__ import annotations

import sys
from contextlib import contextmanager


class _Plain:
    def __init__(self, total: int, stream):
        self.total, self.done, self.stream = total, 0, stream
        self.tty = stream.isatty()

    def step(self, label: str) -> None:
        self.done += 1
        filled = round(24 * self.done / max(self.total, 1))
        line = f"[{'#' * filled}{'.' * (24 - filled)}] {self.done}/{self.total} {label}"
        if self.tty:
            self.stream.write("\r" + line[:120].ljust(120))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")


class _Tqdm:
    def __init__(self, total: int, stream):
        from tqdm import tqdm

        self.bar = tqdm(total=total, file=stream, unit="step", dynamic_ncols=True)

    def step(self, label: str) -> None:
        self.bar.set_postfix_str(label, refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


@contextmanager
def bar(total: int, stream=None, plain: bool = False):
    stream = stream or sys.stderr
    try:
        impl = _Plain(total, stream) if plain else _Tqdm(total, stream)
    except ImportError:
        impl = _Plain(total, stream)
    try:
        yield impl
    finally:
        impl.close()
