#!/usr/bin/env bash
# On a machine with two GPUs: the GPUs' clock offset, the imbalance kernel on both at once, the balanced
# "after" capture with both headers, and the multi-GPU tests. This is what produced samples/multigpu_gpu*.*
# and samples/balanced_*.*; re-run it from the repository root:
#
#   FLASHINFER_INCLUDE=DIR scripts/capture_multigpu.sh [RESULTS_DIR]     # DIR holds flashinfer/profiler.cuh
#
# Results go to RESULTS_DIR (default /tmp/ktrace-multigpu), then into capture_multigpu.tar.gz and
# capture_multigpu_log.txt in $OUT (else the repository root). On the lent 2 x H200 machine the command was
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl   # pycuda, perfetto, ...
#   PYTHONPATH=/tmp/site:$PWD FLASHINFER_INCLUDE=$PWD/.fi scripts/capture_multigpu.sh
set -uo pipefail

RES_DEFAULT=/tmp/ktrace-multigpu
source "$(dirname "$0")/_capture_env.sh"
{
  echo "capture_multigpu: $(date -u +%FT%TZ)  host $(hostname)"
  nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,clocks.sm,temperature.gpu --format=csv 2>&1
  nvidia-smi topo -m 2>&1 | head -8
  $PY -c "import pycuda, numpy; print('pycuda', pycuda.VERSION_TEXT, 'numpy', numpy.__version__)" 2>&1
} 2>&1 | tee -a "$LOG"

step "clock offset GPU 1 - GPU 0: 10 measurements of 50 rounds, 0.5 s apart (drift)"
timeout 120 $PY - "$RES/clock_offsets.json" <<'PYEOF' 2>&1 | tee -a "$LOG"
import json, sys, time
import numpy as np
from ktrace.capture.clocksync import measure_clock_offsets

runs = []
for i in range(10):
    s = measure_clock_offsets([0, 1], rounds=50)
    o = s.offsets[1]
    q = np.percentile(o.samples_ns, [10, 50, 90])
    print(f"{i}: t={(s.measured_unix_ns - (runs[0]['measured_unix_ns'] if runs else s.measured_unix_ns)) / 1e9:6.2f} s  "
          f"median {o.offset_to_reference_ns:+,} ns  spread (max-min) {o.spread_ns:,} ns  p10-p90 {q[0]:+,.0f}..{q[2]:+,.0f}  "
          f"GPU0-host {s.offsets[0].gpu_minus_host_ns:+,} ns  GPU1-host {o.gpu_minus_host_ns:+,} ns  ({s.duration_ns / 1e6:.1f} ms)")
    runs.append(s.as_dict())
    time.sleep(0.5)
t = np.array([r["measured_unix_ns"] for r in runs], float) / 1e9
off = np.array([r["offsets"][1]["offset_to_reference_ns"] for r in runs], float)
slope = np.polyfit(t - t[0], off, 1)[0]
print(f"offset median over the 10: {np.median(off):+,.0f} ns; drift {slope:+.1f} ns/s over {t[-1] - t[0]:.1f} s")
back = measure_clock_offsets([1, 0], rounds=50)
print(f"measured the other way (reference GPU 1): GPU 0 - GPU 1 = {back.offsets[1].offset_to_reference_ns:+,} ns "
      f"(spread {back.offsets[1].spread_ns:,} ns)")
json.dump({"forward": runs, "backward": back.as_dict(), "drift_ns_per_s": slope}, open(sys.argv[1], "w"), indent=1)
PYEOF

step "ktrace run --device 0,1 --header ktrace samples/kernels/imbalance.py --name multigpu"
timeout 240 "${K[@]}" run --device 0,1 --out "$RES/samples" --header ktrace --reps "$REPS" \
  samples/kernels/imbalance.py --name multigpu 2>&1 | tee -a "$LOG"

HEADERS=(ktrace)
if [ -n "${FLASHINFER_INCLUDE:-}" ]; then HEADERS+=(flashinfer); fi
for h in "${HEADERS[@]}"; do
  step "ktrace run --header $h samples/kernels/balanced.py"
  timeout 180 "${K[@]}" run --out "$RES/samples" --header "$h" --suffix "_$h" --reps "$REPS" --no-report \
    samples/kernels/balanced.py 2>&1 | tee -a "$LOG"
done

step "GPU tests: tests/gpu/test_multigpu.py"
timeout 300 $PY -m pytest -q -p no:cacheprovider -o addopts="" tests/gpu/test_multigpu.py 2>&1 | tee "$RES/pytest_gpu.txt" | tail -25 | tee -a "$LOG"

if [ -n "${FLASHINFER_INCLUDE:-}" ]; then
  step "ktrace run --device 0,1 --header flashinfer (host-clock anchors; not committed)"
  timeout 180 "${K[@]}" run --device 0,1 --out "$RES/fi" --header flashinfer --reps 10 --no-report \
    samples/kernels/imbalance.py --name multigpu_fi 2>&1 | tee -a "$LOG"
  "${K[@]}" merge "$RES"/fi/multigpu_fi_gpu0.bin "$RES"/fi/multigpu_fi_gpu1.bin --report 2>&1 | tee -a "$LOG"
fi

step "done in $(( $(date +%s) - t0 )) s"
tar -czf "$DEST/capture_multigpu.tar.gz" -C "$RES" --exclude=./cache . && ls -la "$DEST/capture_multigpu.tar.gz" | tee -a "$LOG"
cp "$LOG" "$DEST/capture_multigpu_log.txt"
