#!/usr/bin/env bash
# The verdict captures, on a GPU machine: each of samples/kernels/{slots,cluster,untimed,pipeline}.py with
# FlashInfer's header and with ktrace's, then runs 2 to 5 of each with ktrace's header on the same inputs
# (NAME_run2_ktrace ... NAME_run5_ktrace; run 1 is NAME_ktrace), and a table of the drivers' ground-truth
# checks. One failing driver does not stop the others: its status goes into the table. Re-run it from the
# repository root:
#
#   FLASHINFER_INCLUDE=DIR scripts/capture_verdicts.sh [RESULTS_DIR]    # DIR holds flashinfer/profiler.cuh
#
# Results go to RESULTS_DIR (default /tmp/ktrace-verdicts), then into verdicts.tar.gz and verdicts_log.txt in
# $OUT (else the repository root). REPS (default 20) timed launches per build and capture; RUN_TIMEOUT
# (default 180) seconds for one driver. On the lent H200, as for capture_shapes.sh:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl   # pycuda, perfetto, ...
#   PYTHONPATH=/tmp/site:$PWD FLASHINFER_INCLUDE=$PWD/.fi scripts/capture_verdicts.sh
set -uo pipefail

RES_DEFAULT=/tmp/ktrace-verdicts
REPS=${REPS:-20}
RUN_TIMEOUT=${RUN_TIMEOUT:-180}
source "$(dirname "$0")/_capture_env.sh"
DRIVERS=(slots cluster untimed pipeline)
RUNS=5
log_header capture_verdicts
{
  $PY -c "import pycuda, numpy, ktrace; print('pycuda', pycuda.VERSION_TEXT, 'numpy', numpy.__version__, 'ktrace', ktrace.__file__)" 2>&1
  echo "FLASHINFER_INCLUDE=${FLASHINFER_INCLUDE:-}  REPS=$REPS"
} 2>&1 | tee -a "$LOG"

step "calibrate"
"${K[@]}" calibrate 2>&1 | tee -a "$LOG"
cp "$KTRACE_CACHE_DIR"/calibration/*.json "$RES/calibration.json" 2>/dev/null

HEADERS=(ktrace)
if [ -n "${FLASHINFER_INCLUDE:-}" ] || $PY -c "import importlib.util as u, sys; sys.exit(u.find_spec('flashinfer') is None)"; then
  HEADERS+=(flashinfer)
fi
STATUS=$RES/status.tsv
: > "$STATUS"
capture() {  # header, driver, capture name (the stem before the header's suffix)
  local h=$1 d=$2 n=$3 t rc
  step "ktrace run --header $h samples/kernels/$d.py --name $n"
  t=$(date +%s)
  timeout "$RUN_TIMEOUT" "${K[@]}" run --out "$RES/samples" --header "$h" --suffix "_$h" --reps "$REPS" \
    --no-report "samples/kernels/$d.py" --name "$n" 2>&1 | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  printf '%s\t%s\t%s\t%s\n' "${n}_$h" "$rc" "$(( $(date +%s) - t ))" "$d" >> "$STATUS"
  [ "$rc" = 0 ] || echo "!!! ${n}_$h: exit status $rc (going on)" | tee -a "$LOG"
}
for h in "${HEADERS[@]}"; do
  for d in "${DRIVERS[@]}"; do capture "$h" "$d" "$d"; done
done
for k in $(seq 2 "$RUNS"); do
  for d in "${DRIVERS[@]}"; do capture ktrace "$d" "${d}_run$k"; done
done

step "ground-truth checks"
$PY - "$RES/samples" "$STATUS" <<'PY' 2>&1 | tee -a "$LOG"
import json, sys
from pathlib import Path

samples, status = Path(sys.argv[1]), Path(sys.argv[2])
KEYS = {  # the facts each driver was built to show, as its sidecar records them
    "slots": ("blocks_per_sm_by_occupancy_api", "blocks_per_sm_by_limits", "max_blocks_concurrent_on_one_sm",
              "waves_in_slots", "span_in_block_lengths_by_clock", "slot_utilization_by_clock"),
    "cluster": ("slow_block", "slow_block_partner", "cluster_size_by_gpu", "expected_partner_wait_ns_per_iteration",
                "others_wait_after_compute_ns_max_by_clock"),
    "untimed": ("late_block", "late_spin_ns_by_clock", "untimed_ns_by_clock_median_per_multiplier"),
    "pipeline": ("bounding_group_name", "produce_ns_median_by_clock", "consume_ns_median_by_clock",
                 "expected_consumer_idle_per_tile_ns"),
}
rows = [line.split("\t") for line in status.read_text().splitlines() if line]
bad = 0
print(f"{'capture':26s} {'rc':>3s} {'s':>4s} holds  within sm_ok last  x_overhead  facts")
for name, rc, secs, driver in rows:
    f = samples / f"{name}.json"
    if not f.exists():
        bad += 1
        print(f"{name:26s} {rc:>3s} {secs:>4s} (no sidecar)")
        continue
    m = json.loads(f.read_text())
    c, g = m.get("checks", {}), m.get("ground_truth", {})
    holds = c.get("ground_truth_holds")
    bad += rc != "0" or holds is not True
    facts = " ".join(f"{k}={g.get(k)}" for k in KEYS.get(driver, ()))
    print(f"{name:26s} {rc:>3s} {secs:>4s} {holds!s:5s}  {c.get('all_blocks_within_clock')!s:5s}  "
          f"{c.get('decoded_sm_equals_block_smid')!s:5s} {g.get('last_block_by_clock')!s:4s}  "
          f"x{m.get('timing', {}).get('overhead_ratio', float('nan')):.4f}  {facts}")
print(f"{len(rows) - bad}/{len(rows)} captures ran and hold their ground truth")
PY

step "done in $(( $(date +%s) - t0 )) s"
tar -czf "$DEST/verdicts.tar.gz" -C "$RES" --exclude=./cache . && ls -la "$DEST/verdicts.tar.gz" | tee -a "$LOG"
cp "$LOG" "$DEST/verdicts_log.txt"
