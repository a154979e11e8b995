#!/usr/bin/env bash
# The fourth session of 2026-12-07's device calls (carry `.whl`): `a` the padded logits in the
# GPT (profile, then the 300-step run of all three), the per-shape products and grouped GEMM
# (their GPU tests and bench cases); `b` the later branches' GPU tests and bench cases.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 VERDIGRIS_CACHE_DIR=${VERDIGRIS_CACHE_DIR:-/tmp/vgc}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/card.txt"
step() { local limit=$1 name=$2; shift 2; echo "=== $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "rc=$?" >> "$OUT/$name.log"; tail -${TAIL:-8} "$OUT/$name.log"; }
if [ "${1:-a}" = a ]; then
  step 130 gpu_tests python3 -m pytest -q -m gpu tests/gpu -n 12 -p no:cacheprovider -o addopts="" --deselect tests/gpu/test_grid_barrier_gpu.py
  grep -E "^(FAILED|ERROR)" "$OUT/gpu_tests.log" | head -30
  TAIL=14 step 50 gpt_profile python3 bench/gpt_profile.py --impl verdigris --top 12
  TAIL=12 step 30 launch_torch python3 bench/launch_torch.py
  TAIL=6 step 110 train_gpt python3 examples/train_gpt.py --config gpt2 --steps 300 --batch 8 --every 50 --png "$OUT/gpt.png"
  TAIL=16 step 90 bench_shapes python3 -m verdigris bench --quick --filter "Llama|grouped|GEMV" --plain-progress --out "$OUT/shapes"
  TAIL=16 step 80 bench_decode_attn python3 -m verdigris bench --quick --filter "decode|GQA|varlen|head dims|fp8 e4m3" --plain-progress --out "$OUT/attn"
fi
if [ "${1:-a}" = b ]; then  # little device time left: the new kernels' GPU tests, the GPT's step, the launch
  step 100 gpu_new python3 -m pytest -q -m gpu -n 12 -p no:cacheprovider -o addopts="" tests/gpu/test_decode_gpu.py \
    tests/gpu/test_attention_variants_gpu.py tests/gpu/test_matmul_shapes_gpu.py tests/gpu/test_torch_launch_gpu.py \
    tests/gpu/test_linear_backward_gpu.py tests/gpu/test_attention_backward_gpu.py tests/gpu/test_tile_mma.py
  grep -E "^(FAILED|ERROR)" "$OUT/gpu_new.log" | head -30
  TAIL=14 step 45 gpt_profile python3 bench/gpt_profile.py --impl verdigris --top 10
  TAIL=12 step 30 launch_torch python3 bench/launch_torch.py
fi
