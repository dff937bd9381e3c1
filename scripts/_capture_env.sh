# Shared set-up of the capture scripts (sourced, not run): RES (results folder, $1 or the default the caller
# puts in RES_DEFAULT), DEST ($OUT or the repository root), LOG, the Python (PY) and its ktrace command (K),
# REPS, step() to head each part of the log and log_header() to begin it.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RES=${1:-$RES_DEFAULT}
DEST=${OUT:-$ROOT}
mkdir -p "$RES/samples" "$DEST"
LOG=$RES/log.txt
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$ROOT
export PYTHONUNBUFFERED=1
export KTRACE_CACHE_DIR=$RES/cache
PY=${PYTHON:-python3}
REPS=${REPS:-50}
K=("$PY" -m ktrace)
cd "$ROOT"

step() { echo; echo "### $*" | tee -a "$LOG"; }
log_header() {  # NAME: the log's first lines: the run, the time, the host and its GPU
  { echo "$1: $(date -u +%FT%TZ)  host $(hostname)"
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv 2>&1
  } 2>&1 | tee -a "$LOG"
}
t0=$(date +%s)
