"""Philox-4x32-10, the counter-based generator behind `tile.rand`, vectorized in NumPy.

Takes: counters and keys as uint32 words (`philox4x32`), or a seed and integer offsets
(`uniform`). Gives: the generator's four output words per counter, and uniform float32
values in [0, 1). Guarantees: bit-for-bit the generator of Salmon, Moraes, Dror and Shaw,
"Parallel random numbers: as easy as 1, 2, 3" (SC 2011), as Random123's `philox4x32_R(10)`
computes it (its known-answer vectors are in the tests); no state, so every backend gets
the same numbers for the same (seed, offset), in any order.

The algorithm (what a GPU lowering must reproduce; all arithmetic on uint32 words):
    counter (c0, c1, c2, c3), key (k0, k1); 10 rounds, each:
        hi0:lo0 = 0xD2511F53 * c0        (the 64-bit product's high and low words)
        hi1:lo1 = 0xCD9E8D57 * c2
        (c0, c1, c2, c3) = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0)
    and between consecutive rounds (9 times) the key steps by the Weyl constants:
        k0 += 0x9E3779B9, k1 += 0xBB67AE85   (mod 2**32)
    The output is the final (c0, c1, c2, c3).

`tile.rand(seed, offsets)` maps an integer value v (of any integer dtype; taken as the
two's-complement 64-bit pattern of v, i.e. v mod 2**64) to the two words
(v mod 2**32, (v >> 32) mod 2**32). Element by element:
    key     = words(seed)                   -> (seed, 0) for 0 <= seed < 2**32
    counter = (*words(offset), 0, 0)        -> (offset, 0, 0, 0) for 0 <= offset < 2**32
    result  = float32((c0 >> 8) * 2**-24)   where c0 is output word 0: exact, in [0, 1)
Only output word 0 is used; words 1..3 are free for later generators (randn, randint).
"""
from __future__ import annotations

import numpy as np

ROUNDS = 10
MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)
WEYL = (0x9E3779B9, 0xBB67AE85)

_LOW = np.uint64(0xFFFFFFFF)
_32 = np.uint64(32)


def _mulhilo(multiplier: int, word: np.ndarray) -> tuple:
    product = np.uint64(multiplier) * word.astype(np.uint64)
    return (product >> _32).astype(np.uint32), (product & _LOW).astype(np.uint32)


def philox4x32(counter: tuple, key: tuple, rounds: int = ROUNDS) -> tuple:
    """The four output words for counters `counter` (four uint32 arrays, broadcast
    together) under `key` (two uint32 words or arrays)."""
    c0, c1, c2, c3 = (np.asarray(c, np.uint32) for c in np.broadcast_arrays(*counter))
    k0, k1 = (np.asarray(k, np.uint32) for k in key)
    with np.errstate(over="ignore"):  # the key's steps wrap at 2**32 by definition
        for r in range(rounds):
            if r:
                k0, k1 = k0 + np.uint32(WEYL[0]), k1 + np.uint32(WEYL[1])
            hi0, lo0 = _mulhilo(MULTIPLIERS[0], c0)
            hi1, lo1 = _mulhilo(MULTIPLIERS[1], c2)
            c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def words(value) -> tuple:
    """An integer value (any NumPy integer dtype) -> its (low, high) uint32 words of the
    two's-complement 64-bit pattern."""
    value = np.asarray(value)
    signed = value.dtype.kind == "i"  # sign-extend; unsigned values zero-extend
    bits = value.astype(np.int64).view(np.uint64) if signed else value.astype(np.uint64)
    return (bits & _LOW).astype(np.uint32), (bits >> _32).astype(np.uint32)


def uniform(seed, offsets) -> np.ndarray:
    """`tile.rand(seed, offsets)`: float32 in [0, 1), one per offset (see the module doc)."""
    low, high = words(offsets)
    zero = np.zeros_like(low)
    c0 = philox4x32((low, high, zero, zero), words(seed))[0]
    return ((c0 >> np.uint32(8)).astype(np.float32) * np.float32(2.0 ** -24))
