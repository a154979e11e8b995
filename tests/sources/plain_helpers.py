"""Undecorated helper functions that tests/test_plain_helpers.py imports into its kernels."""


def squared_distance(a, b):
    d = a - b
    return d * d


def broken(v):
    return v.no_such_attribute  # MARK-imported-broken
