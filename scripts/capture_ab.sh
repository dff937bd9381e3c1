#!/usr/bin/env bash
# A/B sessions on a GPU (`ktrace run --ab`): the accept step of the method on real pairs, for samples/ab/.
#   imbalance.py -> balanced.py                        a large change (the straggler's work spread out)
#   more_work.py -> more_work.py --extra-work 2         about 1% (2% more compute in every block)
#   more_work.py --name noop, twice                     a no-op (the same driver twice)
# then `ktrace diff` of each pair's captures (it reads the record) and the A/B GPU tests. From the repository
# root on a GPU machine:
#
#   scripts/capture_ab.sh [RESULTS_DIR]
#
# Results go to RESULTS_DIR (default /tmp/ktrace-ab), then into ab.tar.gz and ab_log.txt in $OUT (else the
# repository root). On the lent H200 the command was
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
#   export PYTHONPATH=/tmp/site:$PWD; scripts/capture_ab.sh
set -uo pipefail

RES_DEFAULT=/tmp/ktrace-ab
source "$(dirname "$0")/_capture_env.sh"
log_header capture_ab
PAIRS=${PAIRS:-200}
mkdir -p "$RES/ab"

step "calibrate"
"${K[@]}" calibrate 2>&1 | tee -a "$LOG"
ab() {  # session name, BEFORE, AFTER
  local name=$1; shift
  step "ktrace run --ab $(printf '%q ' "$@")"
  "${K[@]}" run --out "$RES/ab" --header ktrace --pairs "$PAIRS" --ab "$@" 2>&1 \
    | tee "$RES/ab/$name.run.txt" | tee -a "$LOG"
}
ab large samples/kernels/imbalance.py samples/kernels/balanced.py
ab one_percent samples/kernels/more_work.py "samples/kernels/more_work.py --extra-work 2 --name more_work_plus2"
ab noop "samples/kernels/more_work.py --name noop" "samples/kernels/more_work.py --name noop"
for pair in "imbalance_before balanced_after large" "more_work_before more_work_plus2_after one_percent" \
            "noop_before noop_after noop"; do
  set -- $pair
  step "ktrace diff $1.bin $2.bin"
  COLUMNS=120 "${K[@]}" diff "$RES/ab/$1.bin" "$RES/ab/$2.bin" 2>&1 | tee "$RES/ab/$3.diff.txt" | tee -a "$LOG"
done
step "GPU tests"
"$PY" -m pytest -q -p no:cacheprovider -o addopts="" tests/gpu/test_ab_gpu.py "tests/gpu/test_capture_gpu.py::test_persistent_last_finisher" \
  2>&1 | tail -15 | tee -a "$LOG"

step "done in $(( $(date +%s) - t0 )) s"
tar -czf "$DEST/ab.tar.gz" -C "$RES" --exclude=./cache . && ls -la "$DEST/ab.tar.gz" | tee -a "$LOG"
cp "$LOG" "$DEST/ab_log.txt"
