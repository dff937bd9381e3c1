#!/usr/bin/env bash
# Repeated captures of sample kernels on the same inputs, for run-to-run noise (`ktrace diff` must call them
# "no significant change"): a third run of waves and imbalance, and second and third runs of worklist and
# nested, with ktrace's header. Re-run it from the repository root on a GPU machine:
#
#   scripts/capture_repeats.sh [RESULTS_DIR]
#
# Results go to RESULTS_DIR (default /tmp/ktrace-repeats), then into repeats.tar.gz and repeats_log.txt in
# $OUT (else the repository root). On the lent H200 the command was
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl   # pycuda, perfetto, ...
#   PYTHONPATH=/tmp/site:$PWD scripts/capture_repeats.sh
set -uo pipefail

RES_DEFAULT=/tmp/ktrace-repeats
source "$(dirname "$0")/_capture_env.sh"
log_header capture_repeats

step "calibrate"
"${K[@]}" calibrate 2>&1 | tee -a "$LOG"
capture() {  # driver, name
  step "ktrace run samples/kernels/$1.py --name $2"
  "${K[@]}" run --out "$RES/samples" --header ktrace --suffix _ktrace --reps "$REPS" --no-report \
    "samples/kernels/$1.py" --name "$2" 2>&1 | tee -a "$LOG"
}
capture waves waves_run3
capture imbalance imbalance_run3
capture worklist worklist_run2
capture worklist worklist_run3
capture nested nested_run2
capture nested nested_run3

step "done in $(( $(date +%s) - t0 )) s"
tar -czf "$DEST/repeats.tar.gz" -C "$RES" --exclude=./cache . && ls -la "$DEST/repeats.tar.gz" | tee -a "$LOG"
cp "$LOG" "$DEST/repeats_log.txt"
