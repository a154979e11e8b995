"""Launch overhead on torch tensors: the raw driver call, ours with torch tensors through the
compiled launcher and through the Python one, ours with vg.Arrays (issue 29, part 4:
<= 1.2x the raw call).

Per launch µs of `bench/runtime.py`'s axpy (three arrays and a scalar) and 16-argument
kernel (nine arrays, seven scalars), 256 elements in one block, every launch check
included; each variant's median over interleaved rounds of BATCH launches (the device
synchronized between rounds, not timed), and its ratio to the raw `cuLaunchKernel`
(cuda-bindings, arguments packed once) of the same kernel in the same process. The
torch variants use one kernel object each, its first launch made under
VERDIGRIS_LAUNCHER=c or =python (what decides which launcher it installs).

Run on a GPU: `PYTHONPATH=src python3 bench/launch_torch.py [--rounds N] [--json FILE]`.
Without a GPU, `--fake` runs it on tests/fakecuda (a driver whose launch does nothing, ~0.4
µs), torch CPU tensors posing as device 0's: the host-side cost of each launcher, with a
far cheaper raw call than a GPU's (so much larger ratios).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE]

import runtime  # noqa: E402  (bench/runtime.py: the kernels, the raw floor)


def variants(work: str, device: str, sync) -> dict:
    """name -> one launch: ours on vg.Arrays and on torch tensors (on `device`) through each
    launcher, then the raw floors."""
    import numpy as np
    import torch

    import verdigris as vg
    from verdigris import simt

    ours = runtime._module(work, "vg_runtime_kernels", runtime.OURS)
    rng = np.random.default_rng()
    host = [rng.standard_normal(runtime.N).astype(np.float32) for _ in range(9)]
    kinds = {"vg.Array": (None, [vg.asarray(h) for h in host]),
             "torch, compiled launcher": ("c", [torch.from_numpy(h).to(device) for h in host]),
             "torch, Python launcher": ("python", [torch.from_numpy(h).to(device) for h in host])}
    out, launched = {}, {}
    for kind, (mode, arrays) in kinds.items():
        axpy, sixteen = simt.kernel(ours.axpy.fn), simt.kernel(ours.sixteen.fn)
        launched[kind] = axpy, sixteen
        x, y, o = arrays[0], arrays[1], arrays[8]
        calls = {f"ours axpy ({kind})": lambda axpy=axpy, x=x, y=y, o=o: axpy[1, 256](2.0, x, y, o),
                 f"ours 16 args ({kind})": runtime.sixteen_call(sixteen, arrays)}
        if mode is not None:
            os.environ["VERDIGRIS_LAUNCHER"] = mode
        for name, call in calls.items():
            call()  # compiles, checks, installs the launcher (under this mode)
            call()
            head = (axpy if "axpy" in name else sixteen)[1, 256]
            print(f"{name}: head {type(head).__name__}", file=sys.stderr)
            out[name] = call
        os.environ.pop("VERDIGRIS_LAUNCHER", None)
    out.update(runtime.raw_variants(*launched["vg.Array"], kinds["vg.Array"][1]))
    sync()
    return out


def report(result: dict) -> None:
    floors = {"axpy": "raw cuLaunchKernel (cuda-bindings)", "16 args": "raw cuLaunchKernel, 16-argument kernel"}
    print(f"{'launch':<50}{'µs':>8}{'× raw':>8}")
    for name, us in result.items():
        kernel = "16 args" if "16" in name else "axpy"
        print(f"{name:<50}{us:8.2f}{us / result[floors[kernel]]:8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--json")
    parser.add_argument("--fake", action="store_true", help="on tests/fakecuda, no GPU")
    args = parser.parse_args()
    if args.fake and "VGFAKE_DEVICES" not in os.environ:  # rerun under the fake driver
        sys.path.insert(0, ROOT)
        from tests import fakecuda

        env = fakecuda.environment()
        env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "src"), ROOT])
        raise SystemExit(subprocess.run([sys.executable] + sys.argv, env=env).returncode)
    if args.fake:
        from tests import fakecuda

        fakecuda.torch_on_device_zero()
        sync = lambda: None  # noqa: E731
    else:
        import torch

        sync = torch.cuda.synchronize
    calls = variants(tempfile.mkdtemp(), "cpu" if args.fake else "cuda", sync)
    result = runtime.measure(calls, args.rounds, sync)
    report(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
