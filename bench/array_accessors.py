"""What a launch of torch tensors or CuPy arrays must pay before any check: ns per access
of each metadata accessor the generated launchers could read (`runtime.fastpath._KINDS`),
on a 1-D CUDA tensor, best of 5 x 100,000 (subtract the empty lambda's figure). Needs a
GPU, torch and CuPy. Run: `python3 bench/array_accessors.py`."""
import timeit


def probes() -> dict:
    import cupy
    import torch

    t = torch.zeros(256, device="cuda")
    t2 = torch.zeros(16, 16, device="cuda")
    c = cupy.zeros(256, dtype=cupy.float32)
    data_ptr = torch.Tensor.data_ptr
    return {
        "empty lambda": lambda: None,
        "torch type(x)": lambda: type(t),
        "torch x.dtype": lambda: t.dtype,
        "torch x.get_device()": lambda: t.get_device(),
        "torch x.is_cuda": lambda: t.is_cuda,
        "torch x.device": lambda: t.device,
        "torch x.data_ptr()": lambda: t.data_ptr(),
        "torch Tensor.data_ptr(x)": lambda: data_ptr(t),
        "torch x.shape": lambda: t.shape,
        "torch x.size()": lambda: t.size(),
        "torch len(x)": lambda: len(t),
        "torch x.ndim": lambda: t.ndim,
        "torch x.stride()": lambda: t.stride(),
        "torch x.stride(0)": lambda: t.stride(0),
        "torch x.is_contiguous()": lambda: t.is_contiguous(),
        "torch x.numel()": lambda: t.numel(),
        "torch x._version": lambda: t._version,
        "torch x.shape, 2-D": lambda: t2.shape,
        "torch x.stride(), 2-D": lambda: t2.stride(),
        "torch current raw stream": lambda: torch._C._cuda_getCurrentRawStream(0),
        "cupy x.data.ptr": lambda: c.data.ptr,
        "cupy x.shape": lambda: c.shape,
        "cupy x.strides": lambda: c.strides,
        "cupy x.dtype": lambda: c.dtype,
        "cupy x.data.device_id": lambda: c.data.device_id,
        "cupy x._c_contiguous": lambda: c._c_contiguous,
        "cupy x.flags.c_contiguous": lambda: c.flags.c_contiguous,
        "cupy len(x)": lambda: len(c),
    }


def main() -> None:
    for name, access in probes().items():
        try:
            access()
        except Exception as exc:  # an accessor this version lacks
            print(f"{name:34} FAILED {exc}")
            continue
        ns = min(timeit.repeat(access, number=100_000, repeat=5)) / 100_000 * 1e9
        print(f"{name:34} {ns:6.1f} ns", flush=True)


if __name__ == "__main__":
    main()
