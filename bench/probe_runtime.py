"""Runtime probe for the lent GPU: runs the runtime's tests, then measures host-side launch
overhead of `CudaKernel.launch` against raw `cuLaunchKernel` through cuda-bindings.

Run from the repository root: `PYTHONPATH=src python3 bench/probe_runtime.py [--no-tests]`.
Each variant launches the same tiny axpy kernel (1024 elements) in batches of BATCH calls;
batches of all variants are interleaved, the device is synchronized between batches (not
timed), and the median over ROUNDS batches of the per-launch time is reported in µs.
Writes the numbers as JSON to $OUT/probe_runtime.json when $OUT is set.
"""
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time
import timeit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
ROUNDS, BATCH = 400, 50


def run_tests() -> int:
    return subprocess.call([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                            "tests/test_runtime.py", "tests/gpu/test_runtime_gpu.py"], cwd=ROOT)


def launch_variants():
    import numpy as np
    from cuda.bindings import driver as drv

    from tests.gpu.test_runtime_gpu import axpy_kernel, axpy_values
    from verdigris.runtime import arrays, driver, streams
    from verdigris.runtime.interop import describe

    rng = np.random.default_rng()
    kernel = axpy_kernel()
    n = 1024
    x, y = (arrays.asarray(rng.standard_normal(n).astype(np.float32)) for _ in range(2))
    out = arrays.asarray(np.full(n, np.nan, np.float32))
    values = axpy_values(2.0, x, y, out)
    grid, block = (n // 128, 1, 1), (128, 1, 1)
    gx, bx = grid[0], block[0]
    func, launch = kernel.function, drv.cuLaunchKernel
    prepacked = kernel.packer.pack(values)  # the raw floor: arguments already in place
    stream_object = drv.CUstream(0)
    ctypes_types = (ctypes.c_float, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                    ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64)

    for ret in (launch(func, gx, 1, 1, bx, 1, 1, 0, 0, prepacked, 0),
                launch(func, gx, 1, 1, bx, 1, 1, 0, stream_object, prepacked, 0),
                launch(func, gx, 1, 1, bx, 1, 1, 0, 0, (values, ctypes_types), 0)):
        driver.check(ret, "cuLaunchKernel")
    driver.synchronize()

    def raw_prepacked(k):
        for _ in range(k):
            launch(func, gx, 1, 1, bx, 1, 1, 0, 0, prepacked, 0)

    def raw_prepacked_custream(k):
        for _ in range(k):
            launch(func, gx, 1, 1, bx, 1, 1, 0, stream_object, prepacked, 0)

    def raw_tuple_form(k):
        for _ in range(k):
            launch(func, gx, 1, 1, bx, 1, 1, 0, 0, (values, ctypes_types), 0)

    def vg_launch(k):
        for _ in range(k):
            kernel.launch(grid, block, values, 0)

    def vg_describe_and_launch(k):  # what a dispatcher adds: describe 3 arrays, flatten
        for _ in range(k):
            a, b, c = describe(x), describe(y), describe(out)
            kernel.launch(grid, block, (2.0, a.ptr, a.shape[0], b.ptr, b.shape[0], c.ptr,
                                        c.shape[0]), streams.resolve(None, 0, False))

    variants = {f.__name__: f for f in (raw_prepacked, raw_prepacked_custream, raw_tuple_form,
                                        vg_launch, vg_describe_and_launch)}
    try:
        import torch

        tx, ty, tout = (torch.randn(n, device="cuda") for _ in range(3))

        def torch_add(k):
            for _ in range(k):
                torch.add(tx, ty, out=tout)

        def vg_launch_torch_stream(k):
            for _ in range(k):
                kernel.launch(grid, block, values, streams.resolve(None, 0, True))

        variants.update(torch_add=torch_add, vg_launch_torch_stream=vg_launch_torch_stream)
    except ImportError:
        pass

    samples = {name: [] for name in variants}
    for round_ in range(ROUNDS):
        names = list(variants)
        names = names[round_ % len(names):] + names[:round_ % len(names)]
        for name in names:
            t0 = time.perf_counter_ns()
            variants[name](BATCH)
            samples[name].append((time.perf_counter_ns() - t0) / BATCH / 1000)
            driver.synchronize()
    result = {name: {"median_us": statistics.median(v),
                     "p10_us": sorted(v)[len(v) // 10], "p90_us": sorted(v)[9 * len(v) // 10]}
              for name, v in samples.items()}
    got = out.numpy()
    want = 2.0 * x.numpy().astype(np.float64) + y.numpy()
    result["axpy_rel_error"] = float(np.linalg.norm(got - want) / np.linalg.norm(want))
    return result


def host_costs():
    """ns per call of the launch path's pieces."""
    import numpy as np

    from verdigris.runtime import arrays, driver, streams
    from verdigris.runtime.interop import byte_extent, describe
    from tests.gpu.test_runtime_gpu import axpy_kernel

    a = arrays.zeros(1024)
    a2 = arrays.zeros((64, 64))[:, ::2]
    host = np.zeros(1024, np.float32)
    env = {"describe": describe, "byte_extent": byte_extent, "a": a, "a2": a2, "host": host,
           "streams": streams, "drv": driver.api(), "packer": axpy_kernel().packer,
           "values": (2.0, 1 << 32, 1024, 2 << 32, 1024, 3 << 32, 1024)}
    stmts = {
        "describe(vg.Array)": "describe(a)",
        "describe(numpy)": "describe(host)",
        "byte_extent(1-D)": "byte_extent(a)",
        "byte_extent(2-D view)": "byte_extent(a2)",
        "ArgPacker.pack(7 args)": "packer.pack(values)",
        "streams.resolve(default)": "streams.resolve(None, 0, False)",
        "cuCtxGetCurrent": "drv.cuCtxGetCurrent()",
    }
    try:
        import torch

        env.update(t=torch.zeros(1024, device="cuda"), torch=torch)
        stmts.update({"describe(torch)": "describe(t)",
                      **{f"torch {attr}": f"t.{attr}" for attr in (
                          "data_ptr()", "shape", "stride()", "dtype", "is_cuda", "get_device()")},
                      "streams.resolve(torch current)": "streams.resolve(None, 0, True)",
                      "torch.cuda.current_stream().cuda_stream":
                          "torch.cuda.current_stream().cuda_stream"})
    except ImportError:
        pass
    try:
        import cupy

        env["c"] = cupy.zeros(1024, cupy.float32)
        stmts["describe(cupy)"] = "describe(c)"
        stmts.update({f"cupy {attr}": f"c.{attr}" for attr in (
            "data.ptr", "data.device_id", "device.id", "shape", "strides", "dtype")})
        stmts["cupy __cuda_array_interface__"] = "c.__cuda_array_interface__"
    except ImportError:
        pass
    number = 20000
    return {label: min(timeit.repeat(stmt, globals=env, number=number, repeat=5)) / number * 1e9
            for label, stmt in stmts.items()}


def main():
    status = 0 if "--no-tests" in sys.argv else run_tests()
    from verdigris.runtime import driver

    props = driver.properties(0)
    print(f"\ndevice: {props.name} {props.arch}, {props.multiprocessors} SMs; "
          f"python {sys.version.split()[0]}")
    launches = launch_variants()
    costs = host_costs()
    floor = launches["raw_prepacked"]["median_us"]
    print(f"\nper-launch host time, median of {ROUNDS} batches of {BATCH} (µs):")
    for name, r in launches.items():
        if isinstance(r, dict):
            print(f"  {name:28s} {r['median_us']:6.2f}  (p10 {r['p10_us']:.2f}, "
                  f"p90 {r['p90_us']:.2f})  {r['median_us'] / floor:5.2f}x raw_prepacked")
    print(f"  axpy result rel. error: {launches['axpy_rel_error']:.2e}")
    print("\nhost cost of launch-path pieces (ns per call, best of 5):")
    for label, ns in costs.items():
        print(f"  {label:40s} {ns:8.0f}")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "probe_runtime.json"), "w") as f:
            json.dump({"launch": launches, "host_ns": costs, "device": props.name}, f, indent=1)
    sys.exit(status)


if __name__ == "__main__":
    main()
