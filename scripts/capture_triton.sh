#!/usr/bin/env bash
# Proton captures of the Triton sample kernels (samples/kernels/triton_*.py) on one GPU, with their ground truth.
#   scripts/capture_triton.sh [OUT_DIR]      (default: samples/proton)
set -u
out=${1:-samples/proton}
mkdir -p "$out"
cd "$(dirname "$0")/.."
k=samples/kernels
python3 -c 'import torch, triton; print("triton", triton.__version__, "torch", torch.__version__, torch.cuda.get_device_name(0))'
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv
run() { echo "== $*"; timeout 240 python3 "$@" || echo "FAILED ($?): $*"; }
run $k/triton_imbalance.py --out "$out"
run $k/triton_imbalance.py --balanced --out "$out"
run $k/triton_matmul.py --out "$out"
run $k/triton_persistent.py --out "$out"
run $k/triton_persistent.py --tiles-per-program 200 --iters 200 --buffer-size 2048 --name triton_dropped --out "$out"
