#!/usr/bin/env bash
# Captures of FlashInfer's own instrumented kernels (BatchAttention, the Hopper MLA decode kernel) on the lent
# H200: the set-up of ../shared/gpu/flashinfer.md (the FlashInfer 0.7.4 subset in .fi, the tvm-ffi wheel, the
# environment), the wheels in .whl (pycuda and the rest, for `ktrace calibrate`) when there are any, then
# scripts/capture_flashinfer.py. From the repository root, carrying .fi and .whl:
#
#   bash scripts/capture_flashinfer.sh [RESULTS_DIR]
#
# Results go to RESULTS_DIR (default /tmp/ktrace-flashinfer): samples/NAME_runK.bin + .json, summary.json, the
# build logs; then into flashinfer.tar.gz and flashinfer_log.txt in $OUT (else the repository root).
set -uo pipefail

RES_DEFAULT=/tmp/ktrace-flashinfer
source "$(dirname "$0")/_capture_env.sh"
log_header capture_flashinfer

step "set-up: FlashInfer subset, tvm-ffi, wheels"
mkdir -p /tmp/fi && tar -xJf .fi/flashinfer.tar.xz -C /tmp/fi 2>&1 | tee -a "$LOG"
"$PY" -m pip install -q --no-index --no-deps --target /tmp/fisite .fi/apache_tvm_ffi-*.whl 2>&1 | tail -3 | tee -a "$LOG"
if compgen -G ".whl/*.whl" > /dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>&1 | tail -3 | tee -a "$LOG"
fi
export PYTHONPATH=/tmp/fi:/tmp/fisite:/tmp/site:$PYTHONPATH
export FLASHINFER_WORKSPACE_BASE=/tmp/fiws FLASHINFER_CUDA_ARCH_LIST=9.0a TVM_FFI_DISABLE_TORCH_C_DLPACK=1 \
       CUDA_HOME=/usr/local/cuda
echo "set-up done in $(( $(date +%s) - t0 )) s" | tee -a "$LOG"

step "capture_flashinfer.py"
"$PY" scripts/capture_flashinfer.py --results "$RES" ${CAPTURE_ARGS:-} 2>&1 | tee -a "$LOG"
rc=${PIPESTATUS[0]}

step "done in $(( $(date +%s) - t0 )) s (rc $rc)"
tar -czf "$DEST/flashinfer.tar.gz" -C "$RES" --exclude=./cache . && ls -la "$DEST/flashinfer.tar.gz" | tee -a "$LOG"
cp "$LOG" "$DEST/flashinfer_log.txt"
exit "$rc"
