"""Data-parallel training across GPUs: verdigris kernels compute, torch.distributed (NCCL)
communicates.

Linear least squares by gradient descent. Every process holds one GPU and a shard of the
rows of X and y; each step, verdigris kernels compute the shard's residual r = X w - y and
gradient g = X^T r, NCCL sums the gradients of all shards (all_reduce), and a verdigris
kernel applies the step w -= lr / N * g on every GPU, so the weights stay identical. Rank 0
checks the result against the same descent in float64 NumPy on the whole data.

Run: `python examples/data_parallel.py` (one process per GPU, through mp.spawn), or
`torchrun --nproc-per-node=2 examples/data_parallel.py`. Needs 2 or more GPUs and NCCL.
"""
import os
import socket
import sys

import numpy as np

import verdigris as vg
from verdigris import simt

ROWS, COLS, STEPS, LR = 1 << 16, 64, 50, 0.5
BLOCK = 128


@simt.kernel
def residual(x, w, y, r):
    i = simt.global_id(0)
    if i < r.shape[0]:
        acc = -y[i]
        for j in range(w.shape[0]):
            acc += x[i, j] * w[j]
        r[i] = acc


@simt.kernel
def gradient(x, r, g):
    j = simt.global_id(0)
    if j < g.shape[0]:
        acc = g[j] * 0.0
        for i in range(r.shape[0]):
            acc += x[i, j] * r[i]
        g[j] = acc


@simt.kernel
def descend(w, g, step):
    j = simt.global_id(0)
    if j < w.shape[0]:
        w[j] = w[j] - step * g[j]


def problem():
    """The whole data set, the same in every process."""
    rng = np.random.default_rng(1234)
    x = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    w_true = rng.standard_normal(COLS).astype(np.float32)
    y = (x @ w_true + 0.01 * rng.standard_normal(ROWS)).astype(np.float32)
    return x, y


def reference(x, y) -> np.ndarray:
    x, y = x.astype(np.float64), y.astype(np.float64)
    w = np.zeros(COLS)
    for _ in range(STEPS):
        w -= LR / ROWS * (x.T @ (x @ w - y))
    return w


def train(rank: int, world: int) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank))
    x_all, y_all = problem()
    shard = slice(rank * ROWS // world, (rank + 1) * ROWS // world)
    x = torch.from_numpy(x_all[shard]).cuda()
    y = torch.from_numpy(y_all[shard]).cuda()
    w = torch.zeros(COLS, device="cuda")
    r = torch.empty_like(y)
    g = torch.empty_like(w)
    for _ in range(STEPS):
        residual[vg.cdiv(r.numel(), BLOCK), BLOCK](x, w, y, r)
        gradient[vg.cdiv(COLS, BLOCK), BLOCK](x, r, g)
        dist.all_reduce(g)  # the sum over every shard, on torch's current stream
        descend[vg.cdiv(COLS, BLOCK), BLOCK](w, g, LR / ROWS)
    torch.cuda.synchronize()
    gathered = [torch.empty_like(w) for _ in range(world)]
    dist.all_gather(gathered, w)
    if rank == 0:
        want = reference(x_all, y_all)
        spread = max(float((v - gathered[0]).abs().max()) for v in gathered)
        error = float(np.linalg.norm(gathered[0].cpu().numpy() - want) / np.linalg.norm(want))
        ok = spread == 0.0 and error < 1e-4
        print(f"{world} GPUs, {ROWS} x {COLS}, {STEPS} steps: relative error {error:.2e} vs "
              f"float64 NumPy, weights identical on every GPU: {spread == 0.0}")
        print("matches the single-process reference" if ok else "DOES NOT MATCH")
        if not ok:
            sys.exit(1)
    dist.destroy_process_group()


def _spawned(rank: int, world: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    train(rank, world)


def main() -> None:
    import torch

    for name in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST"):
        os.environ.setdefault(name, "0" if name == "NCCL_NVLS_ENABLE" else "1")
    if "RANK" in os.environ:  # started by torchrun
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
        return
    world = torch.cuda.device_count()
    if world < 2:
        sys.exit("this example needs 2 or more GPUs")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.multiprocessing.spawn(_spawned, args=(world, port), nprocs=world, join=True)


if __name__ == "__main__":
    main()
