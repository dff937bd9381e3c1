#!/usr/bin/env bash
# The measured fixes on a GPU machine, for samples/fixes/: for each case of samples/kernels/fixes.py, one
# `ktrace run --ab` of its before against its after (each variant captured with ktrace's header, its own
# profiler overhead timed, then the two unprofiled builds timed in alternating pairs), moved into
# fixes/<case>/{before,after}.{bin,json}, before_vs_after.ab.json, ab.txt (what the session printed) and
# whatif.args (the `ktrace whatif` arguments that state the fix), and ncu.txt (Nsight Compute's report of the
# before kernel, --set full; NCU=0 leaves it out). Re-run it from the repository root:
#
#   scripts/capture_fixes.sh [RESULTS_DIR]        # CASES="worklist memory" to redo some
#
# Results go to RESULTS_DIR (default /tmp/ktrace-fixes), then into fixes.tar.gz and fixes_log.txt in $OUT (else
# the repository root). On the lent H100 the command was
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
#   export PYTHONPATH=/tmp/site:$PWD; scripts/capture_fixes.sh
set -uo pipefail

RES_DEFAULT=/tmp/ktrace-fixes
source "$(dirname "$0")/_capture_env.sh"
log_header capture_fixes
PAIRS=${PAIRS:-100}
REPS=${REPS:-30}
CASES=${CASES:-straggler late_start worklist serial_tail barrier waves pipeline memory}
mkdir -p "$RES/ab" "$RES/fixes"
{
  $PY -c "import pycuda, numpy, ktrace; print('pycuda', pycuda.VERSION_TEXT, 'numpy', numpy.__version__, 'ktrace', ktrace.__file__)" 2>&1
} 2>&1 | tee -a "$LOG"

step "calibrate"
"${K[@]}" calibrate 2>&1 | tee -a "$LOG"
cp "$KTRACE_CACHE_DIR"/calibration/*.json "$RES/calibration.json" 2>/dev/null

for c in $CASES; do
  step "ktrace run --ab fixes.py --case $c: before -> after"
  timeout "${CASE_TIMEOUT:-150}" "${K[@]}" run --out "$RES/ab" --header ktrace --pairs "$PAIRS" --reps "$REPS" \
    --ab "samples/kernels/fixes.py --case $c --variant before" "samples/kernels/fixes.py --case $c --variant after" \
    2>&1 | tee "$RES/ab/$c.run.txt" | tail -40 | tee -a "$LOG"
done

step "into fixes/<case>/"
$PY - "$RES" $CASES <<'PY' 2>&1 | tee -a "$LOG"
import json, shutil, sys
from pathlib import Path
res, cases = Path(sys.argv[1]), sys.argv[2:]
ARGS = {  # the fix, in `ktrace whatif` words (waves: --blocks, an option still to come)
    "straggler": "--balance compute", "late_start": "--no-late-start", "worklist": "--balance compute",
    "serial_tail": "--spread combine", "barrier": "--barrier-cost 1000", "waves": "--blocks 1584",
    "pipeline": "--speedup produce=1.6 --speedup consume=0.4", "memory": "--balance load",
}
for c in cases:
    src, dst = res / "ab", res / "fixes" / c
    rec = src / f"{c}_vs_{c}.ab.json"
    if not rec.is_file():
        print(f"{c}: no A/B record (see {c}.run.txt)")
        continue
    dst.mkdir(parents=True, exist_ok=True)
    for role in ("before", "after"):
        shutil.copy(src / f"{c}_{role}.bin", dst / f"{role}.bin")
        meta = json.loads((src / f"{c}_{role}.json").read_text())
        meta.setdefault("checks", {})["ab_record"] = "before_vs_after.ab.json"
        (dst / f"{role}.json").write_text(json.dumps(meta, indent=1) + "\n")
    data = json.loads(rec.read_text())
    for role in ("before", "after"):
        data[role].update(capture=f"{role}.bin", sidecar=f"{role}.json")
    (dst / "before_vs_after.ab.json").write_text(json.dumps(data, indent=1) + "\n")
    (dst / "whatif.args").write_text(ARGS[c] + "\n")
    shutil.copy(src / f"{c}.run.txt", dst / "ab.txt")
    v = data["verdict"]
    tb = json.loads((dst / "before.json").read_text()).get("timing") or {}
    ta = json.loads((dst / "after.json").read_text()).get("timing") or {}
    def prof(t):
        i = t.get("with_profiler") or {}
        return i.get("median_us", float("nan"))
    print(f"{c:12s} unprofiled {v.get('before_mean_us', 0):9.2f} -> {v.get('after_mean_us', 0):9.2f} us  "
          f"{v.get('change')}  profiled {prof(tb):9.2f} -> {prof(ta):9.2f} us  "
          f"holds {meta['checks'].get('ground_truth_holds')}")
PY

if [ "${NCU:-1}" != 0 ] && command -v ncu >/dev/null; then  # Nsight Compute's estimates for each before kernel
  for c in $CASES; do
    step "ncu --set full: $c before"
    [ -d "$RES/fixes/$c" ] || continue
    timeout 60 ncu --clock-control none --kernel-name regex:'^(fx_|slots|pipeline)' --launch-count 1 --set full \
      "$PY" -m ktrace run --no-timing --no-report --out "$RES/ncu" samples/kernels/fixes.py --case "$c" \
      --variant before > "$RES/fixes/$c/ncu.txt" 2>&1
    grep -h "Est. Speedup" "$RES/fixes/$c/ncu.txt" | sort -t: -k2 -rn | head -3 | tee -a "$LOG"
  done
fi

step "done in $(( $(date +%s) - t0 )) s"
tar -czf "$DEST/fixes.tar.gz" -C "$RES" --exclude=./cache fixes ab calibration.json log.txt 2>/dev/null
ls -la "$DEST/fixes.tar.gz" | tee -a "$LOG"
cp "$LOG" "$DEST/fixes_log.txt"
