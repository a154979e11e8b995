"""The column sums of a GPT-2 step's bias gradients (db = dy.sum(0) over 8192 rows, for the
widths 768, 2304 and 3072), over the number of row blocks of the first pass: how many
blocks keep enough rows in flight against how many partial rows the second pass adds up
(each with the best of the second pass's tiles, `SECOND`, named after it).

Ours: `tile_column_sums.launch_two_pass_column_sums` (`tile_linear.partials` chooses the
rows a block: the "default" column); torch: `dy.sum(0)` (its reduction, in float32, rounded to
the output dtype). Each is checked against a float64 sum first. Bytes: dy read once.
Times: `triton.testing.do_bench` medians. Run (GPU): `PYTHONPATH=src python3
bench/gpt_reductions.py`.
"""
from __future__ import annotations

import torch
import triton

import verdigris as vg
from verdigris.examples.tile_column_sums import launch_two_pass_column_sums, row_blocks
from verdigris.examples.tile_linear import ROW_TILE, partials

ROWS, WIDTHS, BLOCKS = 8192, (768, 2304, 3072), (32, 64, 128, 256, 512)
SECOND = (dict(BR=8, BC=256), dict(BR=16, BC=128), dict(BR=32, BC=64), dict(BR=32, BC=32), dict(BR=64, BC=32))  # column_sums' tiles


def microseconds(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3


def main() -> int:
    vg.set_backend("cuda")
    print(torch.cuda.get_device_name(), f"{ROWS} rows, bf16; us (TB/s of dy read)")
    for cols in WIDTHS:
        dy = torch.randn(ROWS, cols, device="cuda", dtype=torch.bfloat16)
        want = dy.double().sum(0)
        db = torch.empty(cols, device="cuda", dtype=torch.bfloat16)
        cells = []
        for blocks in (None, *BLOCKS):  # None: `partials`'s choice
            per_block = partials(ROWS, cols)[0] if blocks is None else row_blocks(ROWS, ROW_TILE["BR"], blocks)
            partial = torch.empty(vg.cdiv(ROWS, per_block), cols, device="cuda")
            timed = []
            for second in SECOND:
                run = lambda p=partial, r=per_block, s=second: launch_two_pass_column_sums(  # noqa: E731
                    dy, db, p, r, second=s, **ROW_TILE)
                run()
                error = float((db.double() - want).abs().max() / want.abs().max())
                timed.append((microseconds(run), f"{second['BR']}x{second['BC']}" + (" WRONG" if error > 1e-2 else "")))
            us, second = min(timed)
            label = f"default ({vg.cdiv(ROWS, per_block)})" if blocks is None else blocks
            cells.append(f"{label} blocks {us:6.1f} ({dy.numel() * 2 / us / 1e6:.2f}; then {second})")
        torch_us = microseconds(lambda: dy.sum(0))
        print(f"  {cols:5d}: " + "  ".join(cells) + f"  | torch {torch_us:6.1f} ({dy.numel() * 2 / torch_us / 1e6:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
