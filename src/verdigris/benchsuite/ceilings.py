"""The rooflines a run compares against, measured on the card at the start of the run.

Takes: a timer (see `timing`), the card's name, whether compute cases are selected.
Gives: `measure(timer, card, quick, compute)` -> {"copy_tbs": device-to-device copy
bandwidth in TB/s (bytes read + written), "dense_tflops": the dense bf16 tensor-core peak
in TFLOP/s and "dense_tflops_source": where it comes from, "dense_fp8_tflops" and
"fp32_tflops": the datasheet dense fp8 tensor-core and fp32 CUDA-core peaks,
"cublas_bf16_tflops": cuBLAS bf16 GEMM as measured}; a figure that cannot be had here (no
torch or CuPy, a card not in `DATASHEET`, no fp8 on the card) is None.

Guarantees: the compute roofline is the datasheet figure where the card is in `DATASHEET`,
else the measured cuBLAS GEMM (and the source says which); memory cases are compared with
the copy that was measured, never with a datasheet bandwidth.
"""
from __future__ import annotations

from . import peers

# Datasheet peaks in TFLOP/s, by a fragment of the device name: dense (no sparsity) bf16
# and fp8 tensor cores (fp32 accumulation; None: no fp8), fp32 on the CUDA cores. The first
# fragment that matches wins, so longer names come first.
DATASHEET_COLUMNS = ("dense_tflops", "dense_fp8_tflops", "fp32_tflops")
DATASHEET = (
    ("GH200", 989.4, 1978.9, 67.0), ("H200 NVL", 835.5, 1670.5, 60.0),
    ("H200", 989.4, 1978.9, 67.0), ("H100 NVL", 835.5, 1670.5, 60.0),
    ("H100 PCIe", 756.5, 1513.0, 51.2), ("H100", 989.4, 1978.9, 67.0),
    ("A100", 312.0, None, 19.5), ("L40S", 362.1, 733.0, 91.6), ("L4", 121.0, 242.5, 30.3),
    ("RTX 4090", 165.2, 330.3, 82.6),
)


def datasheet(card: str):
    """({column: TFLOP/s}, the fragment that matched) for a known card, else ({}, None)."""
    for fragment, *peaks in DATASHEET:
        if fragment in card:
            return dict(zip(DATASHEET_COLUMNS, peaks)), fragment
    return {}, None


def copy_tbs(timer, quick: bool):
    n = 1 << (26 if quick else 28)
    if peers.has("torch"):
        import torch

        src = torch.rand(n, device="cuda")
        dst = torch.empty_like(src)
        seconds = timer.device_seconds(lambda: dst.copy_(src))
    elif peers.has("cupy"):
        import cupy

        src = cupy.random.rand(n, dtype=cupy.float32)
        dst = cupy.empty_like(src)
        seconds = timer.device_seconds(lambda: cupy.copyto(dst, src))
    else:
        return None
    return 2 * 4 * n / seconds / 1e12


def cublas_bf16_tflops(timer, quick: bool):
    if not peers.has("torch"):
        return None
    import torch

    n = 4096 if quick else 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b, c = torch.randn_like(a), torch.empty_like(a)
    return 2 * n**3 / timer.device_seconds(lambda: torch.matmul(a, b, out=c)) / 1e12


def measure(timer, card: str, quick: bool, compute: bool) -> dict:
    ceilings = {"copy_tbs": copy_tbs(timer, quick), **dict.fromkeys(DATASHEET_COLUMNS),
                "dense_tflops_source": None, "cublas_bf16_tflops": None}
    if compute:
        ceilings["cublas_bf16_tflops"] = cublas_bf16_tflops(timer, quick)
        peaks, fragment = datasheet(card)
        ceilings.update(peaks)
        if fragment is not None:
            ceilings["dense_tflops_source"] = f"datasheet dense bf16 peak of the {fragment}"
        elif ceilings["cublas_bf16_tflops"] is not None:
            ceilings["dense_tflops"] = ceilings["cublas_bf16_tflops"]
            ceilings["dense_tflops_source"] = "measured cuBLAS bf16 GEMM (card not in the table)"
    return ceilings
