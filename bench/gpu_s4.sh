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
  TAIL=14 step 60 gpt_profile python3 bench/gpt_profile.py --impl verdigris --top 12
  TAIL=6 step 150 train_gpt python3 examples/train_gpt.py --config gpt2 --steps 300 --batch 8 --every 50 --png "$OUT/gpt.png"
  step 100 shapes_tests python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider -o addopts="" tests/gpu/test_matmul_shapes_gpu.py tests/gpu/test_linear_backward_gpu.py
  TAIL=30 step 200 shapes_bench python3 -m verdigris bench --quick --filter "Llama|grouped" --plain-progress --out "$OUT/shapes"
fi
