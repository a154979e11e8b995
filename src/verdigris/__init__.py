"""verdigris: safe GPU kernels written in Python, compiled straight to PTX.

Public API only; see README.md and DESIGN.md §1. Heavy modules (llvmlite, the driver) load
on first use, not at import.
"""
from __future__ import annotations

from . import math, simt
from .errors import (AliasError, BackendError, BoundsError, CompileError, Error, KernelError,
                     LaunchError, SafetyError)
from .lang import constexpr, func, unsafe
from .types import (DType, bfloat16, bool_, float8_e4m3fn, float8_e5m2, float16, float32,
                    float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64)

__version__ = "0.1.0"

i8, i16, i32, i64 = int8, int16, int32, int64
u8, u16, u32, u64 = uint8, uint16, uint32, uint64
f16, bf16, f32, f64 = float16, bfloat16, float32, float64


def cdiv(a: int, b: int) -> int:
    """Ceiling division: the number of blocks of size `b` that cover `a` items."""
    return -(-a // b)
