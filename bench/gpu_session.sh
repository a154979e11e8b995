#!/usr/bin/env bash
# A session's device calls (carry `.whl`; earlier sessions' calls are in git's history). Logs go
# to /tmp/o and come back packed as $OUT/logs.tgz (the device returns at most 8 files). Each case's
# steps run in order of importance, each under its own time limit: see the cases' lines.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 VERDIGRIS_CACHE_DIR=${VERDIGRIS_CACHE_DIR:-/tmp/vgc}
LOGS=/tmp/o; mkdir -p "$LOGS"
pack() { tar czf "$OUT/logs.tgz" -C "$LOGS" .; }
trap pack EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$LOGS/card.txt"
git log -1 --format=%h > "$LOGS/commit.txt" 2>/dev/null
step() { local limit=$1 name=$2; shift 2; echo "=== $name"; timeout "$limit" "$@" > "$LOGS/$name.log" 2>&1; echo "rc=$?" >> "$LOGS/$name.log"; tail -${TAIL:-8} "$LOGS/$name.log"; pack; }
case "${1:-gpt}" in
gpt)  # the GPT under CUDA graphs (all three), the norm backward and bias sums at GPT-2's rows
  TAIL=8 step 200 gpt_graph python3 examples/train_gpt.py --graph --steps 300 --every 100 --png "$LOGS/gpt_graph.png"
  TAIL=6 step 90 new_tests python3 -m pytest -q -x -m gpu tests/gpu/test_residual_gpu.py tests/gpu/test_norm_backward_gpu.py -n 8 -p no:cacheprovider -o addopts=""
  TAIL=14 step 70 norm_gpt python3 bench/norm_backward.py --rows 8192 --cols 768
  TAIL=5 step 30 reductions python3 bench/gpt_reductions.py
  TAIL=60 step 120 gpt_kernels python3 bench/gpt_profile.py --impl verdigris,eager --steps 5 --top 25 --graph
  ;;
short)  # little device time left: the graphed table (each run's figures printed as it ends), then the new GPU tests
  TAIL=12 step 230 gpt_graph python3 examples/train_gpt.py --graph --steps 300 --every 100
  TAIL=6 step 60 new_tests python3 -m pytest -q -x -m gpu tests/gpu/test_residual_gpu.py -n 8 -p no:cacheprovider -o addopts=""
  ;;
attn)  # attention backward: each kernel's configurations against torch's best SDPA backend
  TAIL=6 step 120 attn_tests python3 -m pytest -q -x -m gpu tests/gpu/test_attention_backward_gpu.py tests/gpu/test_torch_attention_gpu.py tests/gpu/test_tile_mma.py -n 8 -p no:cacheprovider -o addopts=""
  TAIL=30 step 250 attn_gpt python3 bench/attention_backward.py --shape gpt
  TAIL=30 step 300 attn_issue python3 bench/attention_backward.py --shape issue
  ;;
attn_defaults)  # the attention GPU tests at the new launches, then the GPT under graphs and its profile
  TAIL=6 step 120 attn_tests python3 -m pytest -q -x -m gpu tests/gpu/test_attention_backward_gpu.py tests/gpu/test_torch_attention_gpu.py tests/gpu/test_tile_mma.py -n 8 -p no:cacheprovider -o addopts=""
  TAIL=8 step 200 gpt_graph python3 examples/train_gpt.py --graph --steps 300 --every 100
  TAIL=25 step 60 gpt_kernels python3 bench/gpt_profile.py --impl verdigris --steps 5 --top 20 --graph
  ;;
last)  # little device time: the GPT under graphs at the new attention launches, the new GPU tests, the profile
  TAIL=8 step 150 gpt_graph python3 examples/train_gpt.py --graph --steps 300 --every 100
  TAIL=6 step 50 new_tests python3 -m pytest -q -x -m gpu tests/gpu/test_attention_backward_gpu.py tests/gpu/test_tile_mma.py -k "examples or atomics or one_tile or attention" -n 8 -p no:cacheprovider -o addopts=""
  TAIL=25 step 35 gpt_kernels python3 bench/gpt_profile.py --impl verdigris --steps 5 --top 20 --graph
  ;;
regs_ab)  # the producer warp group's registers, 40 (as is) against 24 (FlashAttention-3's; ptxas then
  # reports no spill in dK/dV at head dim 128, 24 bytes at 64): attention backward and GPT-2's MLP
  # products, each variant twice in alternation, a fresh process and compile cache each
  for round in 1 2; do
    for regs in 40 24; do
      sed -i "s/^PRODUCER_REGISTERS = .*/PRODUCER_REGISTERS = $regs/" src/verdigris/tile/specialize.py
      VERDIGRIS_CACHE_DIR=/tmp/vgc_$regs TAIL=4 step 150 "attn_regs${regs}_$round" python3 bench/attention_backward.py --shape gpt
      VERDIGRIS_CACHE_DIR=/tmp/vgc_$regs TAIL=4 step 120 "linear_regs${regs}_$round" python3 bench/linear_backward.py
    done
  done
  git checkout src/verdigris/tile/specialize.py
  ;;
stores_ab)  # TMA stores of n-d output tiles (attention's O, dK, dV, dQ): 2-d only (as is) against up to 5-d
  for round in 1 2; do
    for rank in 2 5; do
      sed -i "s/^STORE_MAX_RANK = .*/STORE_MAX_RANK = $rank/" src/verdigris/tile/epilogue.py
      VERDIGRIS_CACHE_DIR=/tmp/vgc_s$rank TAIL=4 step 150 "attn_bwd_rank${rank}_$round" python3 bench/attention_backward.py --shape gpt
      VERDIGRIS_CACHE_DIR=/tmp/vgc_s$rank TAIL=8 step 200 "attn_fwd_rank${rank}_$round" python3 -m verdigris bench --quick --filter "^attention fwd( causal)? bf16$"
    done
  done
  git checkout src/verdigris/tile/epilogue.py
  ;;
host)  # the host's stack under a step launched op by op
  TAIL=70 step 60 gpt_host python3 bench/gpt_profile.py --impl verdigris --steps 10 --top 25 --host
  ;;
suite)  # the GPU suite
  step 280 gpu_tests python3 -m pytest -q -rf -m gpu tests/gpu -n 12 -p no:cacheprovider -o addopts="" --deselect tests/gpu/test_grid_barrier_gpu.py
  grep -E "^(FAILED|ERROR)" "$LOGS/gpu_tests.log" | head -30
  ;;
esac
