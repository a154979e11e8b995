#!/usr/bin/env bash
# The fifth session of 2026-12-07's device calls (carry `.whl`). Logs go to /tmp/o and come back
# packed as $OUT/logs.tgz (the device returns at most 8 files). `a`: the GPU suite, where the GPT's
# step goes (after the padded logits and the fused LM-head loss), an eager learning-rate sweep,
# the launch cost with torch tensors, the shape and decode/attention-variant bench cases.
# `c` (next session's first call), `e`: see their lines. `gpt LR`: the three implementations, 300 steps, at peak learning rate LR, two seeds.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 VERDIGRIS_CACHE_DIR=${VERDIGRIS_CACHE_DIR:-/tmp/vgc}
LOGS=/tmp/o; mkdir -p "$LOGS"
pack() { tar czf "$OUT/logs.tgz" -C "$LOGS" .; }
trap pack EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$LOGS/card.txt"
git log -1 --format=%h > "$LOGS/commit.txt" 2>/dev/null
step() { local limit=$1 name=$2; shift 2; echo "=== $name"; timeout "$limit" "$@" > "$LOGS/$name.log" 2>&1; echo "rc=$?" >> "$LOGS/$name.log"; tail -${TAIL:-8} "$LOGS/$name.log"; pack; }
case "${1:-a}" in
a)
  step 130 gpu_tests python3 -m pytest -q -m gpu tests/gpu -n 12 -p no:cacheprovider -o addopts="" --deselect tests/gpu/test_grid_barrier_gpu.py
  grep -E "^(FAILED|ERROR)" "$LOGS/gpu_tests.log" | head -30
  TAIL=30 step 70 gpt_profile python3 bench/gpt_profile.py --impl verdigris,eager --top 14
  for lr in 6e-4 1.5e-3 3e-3; do TAIL=3 step 40 "eager_lr$lr" python3 examples/train_gpt.py --impl eager --lr $lr --steps 300 --every 100; done
  TAIL=12 step 30 launch_torch python3 bench/launch_torch.py
  TAIL=16 step 90 bench_shapes python3 -m verdigris bench --quick --filter "Llama|grouped|GEMV" --plain-progress --out "$LOGS/shapes"
  TAIL=16 step 80 bench_attn python3 -m verdigris bench --quick --filter "decode|GQA|varlen|head dims|fp8 e4m3" --plain-progress --out "$LOGS/attn"
  ;;
b)  # the GPU suite's failures by name, the host's share of the GPT's step, the three at a learning rate
  step 240 gpu_tests python3 -m pytest -q -rf -m gpu tests/gpu -n 12 -p no:cacheprovider -o addopts="" --deselect tests/gpu/test_grid_barrier_gpu.py
  grep -E "^(FAILED|ERROR)" "$LOGS/gpu_tests.log" | head -30
  TAIL=3 step 60 gpt_host python3 bench/gpt_profile.py --impl verdigris --top 20 --host
  grep -A45 "host functions by tottime" "$LOGS/gpt_host.log" | cut -c1-150
  TAIL=6 step 150 gpt_lr python3 examples/train_gpt.py --lr "$2" --steps 300 --every 50 --png "$LOGS/gpt.png"
  ;;
c)  # after the packed attention and the residual epilogue: the three on text, their GPU tests, the step
  TAIL=8 step 170 gpt_text python3 examples/train_gpt.py --steps 300 --every 50 --png "$LOGS/gpt.png"
  step 130 gpu_new python3 -m pytest -q -rf -m gpu -n 12 -p no:cacheprovider -o addopts="" tests/gpu/test_residual_gpu.py \
    tests/gpu/test_torch_attention_gpu.py tests/gpu/test_attention_backward_gpu.py tests/gpu/test_train_gpt_gpu.py \
    tests/gpu/test_attention_variants_gpu.py tests/gpu/test_norm_backward_gpu.py
  grep -E "^(FAILED|ERROR)" "$LOGS/gpu_new.log" | head -20
  TAIL=36 step 70 gpt_profile python3 bench/gpt_profile.py --impl verdigris --steps 20 --top 16
  TAIL=12 step 90 bench_attn python3 -m verdigris bench --quick --filter "^attention (fwd|bwd)( causal)? bf16|head dims" --plain-progress --out "$LOGS/attn"
  ;;
d)  # little device time left: the three on text, the attention's GPU tests
  TAIL=8 step 170 gpt_text python3 examples/train_gpt.py --steps 300 --every 50 --png "$LOGS/gpt.png"
  step 100 gpu_attn python3 -m pytest -q -rf -m gpu -n 12 -p no:cacheprovider -o addopts="" tests/gpu/test_attention_backward_gpu.py tests/gpu/test_residual_gpu.py
  grep -E "^(FAILED|ERROR)" "$LOGS/gpu_attn.log" | head -20
  ;;
e)  # the merged fp8 attention (P in registers) and grouped GEMM (warp-specialized, persistent): tests, cases
  step 200 gpu_fp8_grouped python3 -m pytest -q -rf -m gpu -n 12 -p no:cacheprovider -o addopts="" tests/gpu/test_attention_variants_gpu.py \
    tests/gpu/test_tile_mma.py tests/gpu/test_specialize_paths_gpu.py tests/gpu/test_matmul_shapes_gpu.py
  grep -E "^(FAILED|ERROR)" "$LOGS/gpu_fp8_grouped.log" | head -20
  TAIL=14 step 150 bench_fp8_grouped python3 -m verdigris bench --quick --filter "fp8 e4m3|head dims|grouped" --plain-progress --out "$LOGS/fp8g"
  ;;
gpt)
  for seed in 0 1; do TAIL=6 step 150 "gpt_seed$seed" python3 examples/train_gpt.py --lr "$2" --seed $seed --steps 300 --every 50 --png "$LOGS/gpt$seed.png"; done
  ;;
esac
