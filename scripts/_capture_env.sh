# Shared set-up of the capture scripts (sourced, not run): RES (results folder, $1 or the default the caller
# puts in RES_DEFAULT), DEST ($OUT or the repository root), LOG, the Python (PY) and its ktrace command (K),
# REPS, and step() to head each part of the log.
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
t0=$(date +%s)
