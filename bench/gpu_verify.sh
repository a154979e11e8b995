#!/usr/bin/env bash
# The GPU runs this session's work still owes (see the closing note of 2026-12-07), for one
# warm device machine, from the repository root:
#   tests   every test under tests/gpu (-n 8: compiles run in parallel)
#   new     the new GPU tests only (tile ordering, print, assume, narrow, names, numbers,
#           64-bit wrap, launch limits, examples, sorts, scans), then bench/debug_tools_gpu.sh
#   bench   the tile cases of `verdigris bench --quick`, this tree against a snapshot of an
#           older one in .snap_old (`mkdir .snap_old && git archive REV src bench | tar -x -C
#           .snap_old`), two rounds, alternating
# Carry `.whl` (z3-solver for cp312, the device image lacks it) and, for bench, `.snap_old`.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 VERDIGRIS_CACHE_DIR=${VERDIGRIS_CACHE_DIR:-/tmp/vgc}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
case "${1:-new}" in
  tests)
    python3 -m pytest -q -m gpu tests/gpu -n 8 -p no:cacheprovider -o addopts="" 2>&1 | tee "$OUT/gpu_tests.log" | tail -45 ;;
  new)
    python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider -o addopts="" tests/gpu/test_tile_order_gpu.py \
      tests/gpu/test_print_gpu.py tests/gpu/test_assume_gpu.py tests/gpu/test_narrow_gpu.py \
      tests/gpu/test_names_are_values_gpu.py tests/gpu/test_numbers_gpu.py tests/gpu/test_wrap64_gpu.py \
      tests/gpu/test_launch_gpu.py tests/gpu/test_tile_examples.py tests/gpu/test_examples_gpu.py \
      tests/gpu/test_tile_sort_gpu.py tests/gpu/test_tile_scans_gpu.py 2>&1 | tee "$OUT/gpu_new.log" | tail -30
    bash bench/debug_tools_gpu.sh 2>&1 | tee "$OUT/debug.log" | tail -60 ;;
  bench)
    F='vector add \(tile\)|softmax|LayerNorm|RMSNorm|row sum|transpose \(tile\)'
    for round in 1 2; do
      echo "=== round $round: this tree"
      python3 -m verdigris bench --quick --filter "$F" --plain-progress --out "$OUT/new$round" 2>&1 | tail -22
      echo "=== round $round: .snap_old"
      (cd .snap_old && PYTHONPATH=$PWD/src:/tmp/site python3 -m verdigris bench --quick --filter "$F" \
        --plain-progress --out "$OUT/old$round" 2>&1 | tail -22)
    done ;;
esac
