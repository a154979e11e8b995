#!/usr/bin/env bash
# One warm device machine's worth of checks for the work of 2026-12-07 (second session):
# every GPU test (the grid-barrier tests apart, last: a wrong barrier hangs), the training
# kernels' and norm backward's benches, the attention cases with every SDPA backend, and
# ncu's source page (`tests`: the tests only; `new`: the new test files only). Carry `.whl` (z3-solver for cp312).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 VERDIGRIS_CACHE_DIR=${VERDIGRIS_CACHE_DIR:-/tmp/vgc}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/card.txt"
step() { local limit=$1 name=$2; shift 2; echo "=== $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "rc=$?" >> "$OUT/$name.log"; tail -6 "$OUT/$name.log"; }
if [ "${1:-all}" = new ]; then  # the session's new GPU test files only, the grid barrier last
  step 150 gpu_new python3 -m pytest -q -m gpu -n 12 -p no:cacheprovider -o addopts="" tests/gpu/test_tile_order_gpu.py \
    tests/gpu/test_tile_skip_gpu.py tests/gpu/test_tile_vocabulary_gpu.py tests/gpu/test_port_walls_gpu.py \
    tests/gpu/test_train_kernels_gpu.py tests/gpu/test_norm_backward_gpu.py tests/gpu/test_tile_pieces_gpu.py \
    tests/gpu/test_tile_batched_dot_gpu.py tests/gpu/test_tile_locks_gpu.py tests/gpu/test_tile_rounding_gpu.py \
    tests/gpu/test_deep_barrier_loops_gpu.py tests/gpu/test_attention_backward_gpu.py tests/gpu/test_tile_tfloat32_gpu.py \
    tests/gpu/test_linear_backward_gpu.py tests/gpu/test_tile_mma.py
  step 40 grid_barrier python3 -m pytest -q -m gpu tests/gpu/test_grid_barrier_gpu.py -p no:cacheprovider -o addopts=""
  exit 0
fi
if [ "${1:-all}" = check ]; then  # the GPU suite and the linear backward's bench (split-K), no GPT run
  step 150 gpu_tests python3 -m pytest -q -m gpu tests/gpu -n 12 -p no:cacheprovider -o addopts="" --deselect tests/gpu/test_grid_barrier_gpu.py
  step 70 linear_backward python3 bench/linear_backward.py --json "$OUT/linear_backward.json"
  exit 0
fi
if [ "${1:-all}" = train ]; then  # the linear op's split-K A/B, the GPU suite, then the GPT run of examples/train_gpt.py (issue #28)
  step 60 linear_op_ab python3 bench/linear_op_ab.py
  step 160 gpu_tests python3 -m pytest -q -m gpu tests/gpu -n 12 -p no:cacheprovider -o addopts="" --deselect tests/gpu/test_grid_barrier_gpu.py
  step 330 train_gpt python3 examples/train_gpt.py --config gpt2 --steps 300 --batch 8 --every 25 --png "$OUT/gpt.png"
  exit 0
fi
step 320 gpu_tests python3 -m pytest -q -m gpu tests/gpu -n 12 -p no:cacheprovider -o addopts="" --deselect tests/gpu/test_grid_barrier_gpu.py
step 60 grid_barrier python3 -m pytest -q -m gpu tests/gpu/test_grid_barrier_gpu.py -p no:cacheprovider -o addopts=""
[ "${1:-all}" = tests ] && exit 0
step 100 train_kernels python3 bench/train_kernels.py --quick
step 100 norm_backward python3 bench/norm_backward.py
step 120 attention python3 -m verdigris bench --quick --filter "attention" --plain-progress --out "$OUT/attention"
