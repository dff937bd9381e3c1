#!/usr/bin/env bash
# Every sample capture, on a GPU machine: calibrate, run each driver in samples/kernels/ with FlashInfer's
# header and with ktrace's, the GPU tests, and a log. This is what produced samples/*_ktrace.* and
# samples/*_flashinfer.*; re-run it from the repository root:
#
#   FLASHINFER_INCLUDE=DIR scripts/capture_all.sh [RESULTS_DIR]     # DIR holds flashinfer/profiler.cuh
#
# Results (captures, traces, calibration, log, test report) go to RESULTS_DIR (default
# /tmp/ktrace-capture), then into capture.tar.gz and capture_log.txt in $OUT (else the repository root). On the lent H200 the command was
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl   # pycuda, perfetto, ...
#   PYTHONPATH=/tmp/site:$PWD FLASHINFER_INCLUDE=$PWD/.fi scripts/capture_all.sh
# with .whl holding a pycuda wheel built on a machine with the CUDA toolkit (docs: shared/gpu/README.md)
# and .fi/flashinfer/profiler.cuh from flashinfer-python 0.7.4.
set -uo pipefail

RES_DEFAULT=/tmp/ktrace-capture
source "$(dirname "$0")/_capture_env.sh"
log_header capture_all
{
  $PY -c "import pycuda, numpy; print('pycuda', pycuda.VERSION_TEXT, 'numpy', numpy.__version__)" 2>&1
  echo "FLASHINFER_INCLUDE=${FLASHINFER_INCLUDE:-}"
} 2>&1 | tee -a "$LOG"

step "calibrate"
"${K[@]}" calibrate 2>&1 | tee -a "$LOG"
cp "$KTRACE_CACHE_DIR"/calibration/*.json "$RES/calibration.json" 2>/dev/null

HEADERS=(ktrace)
if [ -n "${FLASHINFER_INCLUDE:-}" ] || $PY -c "import importlib.util as u, sys; sys.exit(u.find_spec('flashinfer') is None)"; then
  HEADERS+=(flashinfer)
fi
for h in "${HEADERS[@]}"; do
  for d in imbalance moving_straggler warpgroups instants blocks5000; do
    report=--no-report
    [ "$d" = imbalance ] && report=
    step "ktrace run --header $h samples/kernels/$d.py"
    "${K[@]}" run --out "$RES/samples" --header "$h" --suffix "_$h" --reps "$REPS" $report \
      "samples/kernels/$d.py" 2>&1 | tee -a "$LOG"
  done
done
step "ktrace run --header ktrace samples/kernels/instants.py --capacity 6 --name overflow"
"${K[@]}" run --out "$RES/samples" --header ktrace --suffix _ktrace --reps "$REPS" --no-report \
  samples/kernels/instants.py --capacity 6 --name overflow 2>&1 | tee -a "$LOG"

step "GPU tests"
$PY -m pytest -q -p no:cacheprovider -o addopts="" tests/gpu 2>&1 | tee "$RES/pytest_gpu.txt" | tail -25 | tee -a "$LOG"

step "done in $(( $(date +%s) - t0 )) s"
tar -czf "$DEST/capture.tar.gz" -C "$RES" --exclude=./cache . && ls -la "$DEST/capture.tar.gz" | tee -a "$LOG"
cp "$LOG" "$DEST/capture_log.txt"
