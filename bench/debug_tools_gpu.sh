#!/usr/bin/env bash
# GPU verification of issue #27's debugging tools; run from the repository root on a GPU
# machine: `bash bench/debug_tools_gpu.sh`. Prints the evidence of each:
#  1. compute-sanitizer (memcheck) on a read past its allocation names the Python file:line
#  2. compute-sanitizer (racecheck) on a shared-memory race in vg.unsafe() names the lines
#  3. print() in a SIMT and a tile kernel on the GPU (vprintf)
#  4. ncu's source page maps SASS to the Python lines
#  5. the line table costs nothing: identical SASS with and without it, and a timing
set -u
export PYTHONPATH=src VERDIGRIS_CACHE_DIR=${VERDIGRIS_CACHE_DIR:-/tmp/vg_debug_tools_cache}
HERE=bench/debug_tools_gpu.py
find_tool() {
  command -v "$1" 2>/dev/null && return
  for d in /usr/local/cuda/bin /usr/local/cuda-*/bin /opt/nvidia/nsight-compute/* /usr/local/NVIDIA-Nsight-Compute*; do
    [ -x "$d/$1" ] && { echo "$d/$1"; return; }
  done
  python - "$1" <<'PY' 2>/dev/null
import sys
from cuda.pathfinder import find_nvidia_binary_utility
print(find_nvidia_binary_utility(sys.argv[1]) or "")
PY
}
SAN=$(find_tool compute-sanitizer); NCU=$(find_tool ncu)
echo "compute-sanitizer: ${SAN:-not found}"; echo "ncu: ${NCU:-not found}"
echo "lines to find in $PWD/$HERE: OOB $(grep -n '# OOB-LINE' $HERE | cut -d: -f1), RACE $(grep -n '# RACE-LINE' $HERE | cut -d: -f1 | tr '\n' ' ')"

echo; echo "== 1. memcheck: a read past its allocation"
if [ -n "$SAN" ]; then "$SAN" --tool memcheck --show-backtrace device python $HERE oob 2>&1 | grep -E "Invalid|at .*\.py|debug_tools_gpu" | head -12
else echo "skipped: compute-sanitizer not found"; fi

echo; echo "== 2. racecheck: a shared-memory race inside vg.unsafe()"
if [ -n "$SAN" ]; then "$SAN" --tool racecheck --racecheck-report all python $HERE race 2>&1 | grep -E "hazard|Race|\.py" | head -12
else echo "skipped: compute-sanitizer not found"; fi

echo; echo "== 3. print on the GPU"
python $HERE print

echo; echo "== 4. ncu source page"
if [ -n "$NCU" ]; then
  rep=$(mktemp -d)/softmax
  "$NCU" --import-source yes --section SourceCounters -k regex:softmax -c 1 -o "$rep" python $HERE profile >/dev/null 2>&1
  "$NCU" -i "$rep.ncu-rep" --page source --csv --print-source cuda 2>&1 > "$rep.csv"
  grep -m1 "File Path" "$rep.csv"
  # the rows of Python lines that ran instructions: line number, source, samples, instructions
  awk -F'","' 'NR > 2 && $8 != "0" && $8 != "" {gsub(/^"/, "", $1); print "  line " $1 ": " $2 "   (" $7 " samples, " $8 " instructions)"}' "$rep.csv" | head -14
  rows=$(grep -c 'tile_softmax' "$rep.csv")
  echo "(source files named on the page: tile_softmax.py $rows)"
  if [ "$rows" = 0 ]; then  # show what ncu gave, to see why
    "$NCU" -i "$rep.ncu-rep" --page source --csv 2>&1 | head -30
  fi
else echo "skipped: ncu not found"; fi

echo; echo "== 5. line info costs nothing"
python $HERE sass
