#!/usr/bin/env bash
# The kernel-shape captures, on a GPU machine: each shape driver (samples/kernels/{waves,straggler_change,
# worklist,nested,late_start}.py) with FlashInfer's header and with ktrace's, then second runs of one kernel on
# the same inputs (waves_run2_ktrace, imbalance_run2_ktrace) for run-to-run noise, and a table of the drivers'
# ground-truth checks. Re-run it from the repository root:
#
#   FLASHINFER_INCLUDE=DIR scripts/capture_shapes.sh [RESULTS_DIR]     # DIR holds flashinfer/profiler.cuh
#
# Results go to RESULTS_DIR (default /tmp/ktrace-shapes), then into shapes.tar.gz and shapes_log.txt in $OUT
# (else the repository root). On the lent H200 the command was
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl   # pycuda, perfetto, ...
#   PYTHONPATH=/tmp/site:$PWD/.kt PYTHONSAFEPATH=1 FLASHINFER_INCLUDE=$PWD/.fi scripts/capture_shapes.sh
# with .whl as in capture_all.sh, .fi/flashinfer/profiler.cuh from flashinfer-python 0.7.4, and .kt the
# committed ktrace package (git archive HEAD ktrace), ahead of the working tree's on the path.
set -uo pipefail

RES_DEFAULT=/tmp/ktrace-shapes
source "$(dirname "$0")/_capture_env.sh"
SHAPES=(waves straggler_change worklist nested late_start)
log_header capture_shapes
{
  $PY -c "import pycuda, numpy, ktrace; print('pycuda', pycuda.VERSION_TEXT, 'numpy', numpy.__version__, 'ktrace', ktrace.__file__)" 2>&1
  echo "FLASHINFER_INCLUDE=${FLASHINFER_INCLUDE:-}"
} 2>&1 | tee -a "$LOG"

step "calibrate"
"${K[@]}" calibrate 2>&1 | tee -a "$LOG"
cp "$KTRACE_CACHE_DIR"/calibration/*.json "$RES/calibration.json" 2>/dev/null

HEADERS=(ktrace)
if [ -n "${FLASHINFER_INCLUDE:-}" ] || $PY -c "import importlib.util as u, sys; sys.exit(u.find_spec('flashinfer') is None)"; then
  HEADERS+=(flashinfer)
fi
capture() {  # header, driver, driver arguments...
  local h=$1 d=$2
  shift 2
  step "ktrace run --header $h samples/kernels/$d.py $*"
  "${K[@]}" run --out "$RES/samples" --header "$h" --suffix "_$h" --reps "$REPS" --no-report \
    "samples/kernels/$d.py" "$@" 2>&1 | tee -a "$LOG"
}
for h in "${HEADERS[@]}"; do
  for d in "${SHAPES[@]}"; do capture "$h" "$d"; done
done
capture ktrace waves --name waves_run2
capture ktrace imbalance --name imbalance_run2

step "ground-truth checks"
$PY - "$RES/samples" <<'PY' 2>&1 | tee -a "$LOG"
import json, sys
from pathlib import Path
for f in sorted(Path(sys.argv[1]).glob("*.json")):
    m = json.loads(f.read_text())
    c, g = m.get("checks", {}), m.get("ground_truth", {})
    print(f"{f.stem:28s} holds={c.get('ground_truth_holds', c.get('last_finisher_matches_ground_truth'))!s:5s} "
          f"within_clock={c.get('all_blocks_within_clock')!s:5s} sm_ok={c.get('decoded_sm_equals_block_smid')!s:5s} "
          f"last_by_clock={g.get('last_block_by_clock')} per_sm_max={g.get('blocks_per_sm_observed_max')} "
          f"x{m.get('timing', {}).get('overhead_ratio', float('nan')):.4f}")
PY

step "done in $(( $(date +%s) - t0 )) s"
tar -czf "$DEST/shapes.tar.gz" -C "$RES" --exclude=./cache . && ls -la "$DEST/shapes.tar.gz" | tee -a "$LOG"
cp "$LOG" "$DEST/shapes_log.txt"
