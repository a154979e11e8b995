"""What a run records about the code and the card it measured, besides the card's name.

Takes: nothing (the checkout verdigris is imported from; the GPU's management tools).
Gives: `commit()` (the git commit of the checkout verdigris runs from) and `clocks()` (the
GPU's clocks, temperature, power and performance state now, for the JSON at the start and
the end of a run: a card that clocks down between them has drifted).

Guarantees: neither raises nor calls the CUDA driver. Without git, or outside a checkout,
the commit is `$VERDIGRIS_BENCH_COMMIT` (for a copy of a tree without its `.git`), else
"unknown"; without `nvidia-smi` or pynvml the clocks are `{"unavailable": why}`.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

# nvidia-smi's names of what `clocks()` reads (MHz, MHz, MHz, MHz, °C, W, P-state)
SMI_FIELDS = ("clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem", "temperature.gpu",
              "power.draw", "pstate")


def _checkout() -> Path:
    return Path(__file__).resolve().parents[1]  # the verdigris package


def commit() -> dict:
    """{"commit": the hash of HEAD, "changed": whether the tree differs from it} of the
    checkout verdigris is imported from."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=_checkout(), capture_output=True,
                              text=True, timeout=10)
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                cwd=_checkout(), capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        head = status = None
    if head is None or head.returncode or not head.stdout.strip():
        return {"commit": os.environ.get("VERDIGRIS_BENCH_COMMIT", "unknown"), "changed": None}
    return {"commit": head.stdout.strip(), "changed": bool(status.stdout.strip())}


def _visible_index() -> int:
    """The index, as nvidia-smi counts, of the GPU the run measures (the first visible)."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    return int(first) if first.isdigit() else 0


def clocks() -> dict:
    """The GPU's clocks now: nvidia-smi's SMI_FIELDS (numbers where they are), else
    pynvml's SM and memory clocks, else {"unavailable": why}."""
    try:
        done = subprocess.run(["nvidia-smi", f"--id={_visible_index()}",
                               f"--query-gpu={','.join(SMI_FIELDS)}",
                               "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as exc:
        why = f"nvidia-smi: {exc}"
    else:
        values = [v.strip() for v in done.stdout.strip().split(",")]
        if done.returncode == 0 and len(values) == len(SMI_FIELDS):
            return {"source": "nvidia-smi", **dict(zip(SMI_FIELDS, map(_number, values)))}
        why = f"nvidia-smi: {(done.stderr or done.stdout).strip()[:200] or 'no answer'}"
    try:
        return _pynvml_clocks()
    except ImportError:
        return {"unavailable": why + "; pynvml is not installed"}
    except Exception as exc:  # noqa: BLE001  pynvml's own errors, e.g. no driver
        return {"unavailable": f"{why}; pynvml: {type(exc).__name__}: {exc}"}


def _pynvml_clocks() -> dict:
    import pynvml

    pynvml.nvmlInit()
    try:
        gpu = pynvml.nvmlDeviceGetHandleByIndex(_visible_index())
        sm, mem, core = pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_MEM, pynvml.NVML_TEMPERATURE_GPU
        return {"source": "pynvml",
                "clocks.sm": pynvml.nvmlDeviceGetClockInfo(gpu, sm),
                "clocks.mem": pynvml.nvmlDeviceGetClockInfo(gpu, mem),
                "clocks.max.sm": pynvml.nvmlDeviceGetMaxClockInfo(gpu, sm),
                "clocks.max.mem": pynvml.nvmlDeviceGetMaxClockInfo(gpu, mem),
                "temperature.gpu": pynvml.nvmlDeviceGetTemperature(gpu, core)}
    finally:
        pynvml.nvmlShutdown()


def _number(text: str):
    """nvidia-smi's value as a number where it is one ("1980", "512.34"), else the text
    ("P0", "[N/A]")."""
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text
