#!/usr/bin/env bash
# The probe's cost and the perturbation of whole kernels, both headers, on a GPU machine: `ktrace calibrate`
# twice, the previous ktrace header's probe (when OLD_HEADER_INCLUDE names a folder holding it as
# flashinfer/profiler.cuh), the waves and imbalance samples with each header in two rounds (A B, then B A),
# the capacity guard's overflow capture against the committed one (same records, same drop counts), the GPU
# tests, and both headers' probe loops disassembled. Re-run it from the repository root:
#
#   FLASHINFER_INCLUDE=DIR [OLD_HEADER_INCLUDE=DIR] scripts/probe_cost.sh [RESULTS_DIR]
#
# Results go to RESULTS_DIR (default /tmp/ktrace-probe), then probe.tar.gz and probe_log.txt in $OUT (else
# the repository root). On the lent H200 (docs/probe-cost.md has the figures):
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
#   PYTHONPATH=/tmp/site FLASHINFER_INCLUDE=$PWD/.fi OLD_HEADER_INCLUDE=$PWD/.fi/old scripts/probe_cost.sh
set -uo pipefail

RES_DEFAULT=/tmp/ktrace-probe
source "$(dirname "$0")/_capture_env.sh"
log_header probe_cost

for i in 1 2; do
  step "calibrate ($i)"
  "${K[@]}" calibrate 2>&1 | tee -a "$LOG"
  cp "$KTRACE_CACHE_DIR"/calibration/*.json "$RES/calibration_$i.json" 2>/dev/null
done
if [ -n "${OLD_HEADER_INCLUDE:-}" ]; then
  step "the previous ktrace header's probe"
  $PY - "$OLD_HEADER_INCLUDE" <<'PY' 2>&1 | tee -a "$LOG" "$RES/old_header.txt"
import json, sys
from ktrace.capture.calibrate import measure_probe_cost
r = measure_probe_cost("flashinfer", flashinfer_include=sys.argv[1])
print(f"previous ktrace header: {r['ns_per_probe']:.2f} ns, {r['cycles_per_probe']:.1f} cycles per probe")
PY
fi

run() {  # header, round, driver
  step "ktrace run --header $1 samples/kernels/$3.py (round $2)"
  "${K[@]}" run --out "$RES/samples" --header "$1" --suffix "_$1_r$2" --reps "$REPS" --no-report \
    "samples/kernels/$3.py" 2>&1 | tee -a "$LOG"
}
for d in waves imbalance; do
  run ktrace 1 $d; run flashinfer 1 $d; run flashinfer 2 $d; run ktrace 2 $d
done
step "ktrace run --header ktrace samples/kernels/instants.py --capacity 6 --name overflow"
"${K[@]}" run --out "$RES/samples" --header ktrace --suffix _ktrace --reps 5 --no-report \
  samples/kernels/instants.py --capacity 6 --name overflow 2>&1 | tee -a "$LOG"

step "summary"
$PY - "$RES/samples" <<'PY' 2>&1 | tee -a "$LOG"
import json, sys
from pathlib import Path
import numpy as np
import ktrace
res = Path(sys.argv[1])
for f in sorted(res.glob("*_r[12].json")):
    m = json.loads(f.read_text()); t = m["timing"]; c = m.get("checks", {})
    print(f"{f.stem:24s} on {t['with_profiler']['median_us']:9.2f} us  off {t['without_profiler']['median_us']:9.2f} us"
          f"  x{t['overhead_ratio']:.4f} ({t['overhead_us']:+.2f} us)  holds={c.get('ground_truth_holds', c.get('last_finisher_matches_ground_truth'))}"
          f" sm_ok={c.get('decoded_sm_equals_block_smid')}")
new, old = ktrace.decode(res / "overflow_ktrace.bin"), ktrace.decode("samples/overflow_ktrace.bin")
same = (len(new.slices), len(new.instants), new.dropped_records) == (len(old.slices), len(old.instants), old.dropped_records)
print(f"overflow: slices {len(new.slices)}/{len(old.slices)} instants {len(new.instants)}/{len(old.instants)} "
      f"dropped {new.dropped_records}/{old.dropped_records} -> same as the committed capture: {same}")
PY

step "GPU tests"
$PY -m pytest -q -p no:cacheprovider -o addopts="" tests/gpu 2>&1 | tee "$RES/pytest_gpu.txt" | tail -25 | tee -a "$LOG"

step "SASS of the probe loop, both headers"
$PY - "$RES" <<'PY' 2>&1 | tee -a "$LOG"
import subprocess, sys
from pathlib import Path
from ktrace.capture.build import BuildSpec, resolve_header
from ktrace.capture.calibrate import PROBE_SRC
res = Path(sys.argv[1])
for h in ("ktrace", "flashinfer"):
    spec = BuildSpec(PROBE_SRC, "ktrace_probe_loop", resolve_header(h), "probe_loop.cu")
    cu, cubin = res / f"probe_{h}.cu", res / f"probe_{h}.cubin"
    cu.write_text(spec.text())
    subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", *spec.nvcc_options(True), *[f"-I{d}" for d in spec.all_include_dirs()],
                    str(cu), "-o", str(cubin)], check=True)
    (res / f"probe_{h}.sass").write_text(subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True).stdout)
    print(h, "SASS lines:", len((res / f"probe_{h}.sass").read_text().splitlines()))
PY

step "done in $(( $(date +%s) - t0 )) s"
tar -czf "$DEST/probe.tar.gz" -C "$RES" --exclude=./cache . && ls -la "$DEST/probe.tar.gz" | tee -a "$LOG"
cp "$LOG" "$DEST/probe_log.txt"
