#!/usr/bin/env bash
# Set up the peer that scripts/bench_convert.py compares ktrace against: FlashInfer 0.7.4's own exporter
# (flashinfer/profiler/__init__.py, export_to_perfetto_trace) with the packages it imports (torch, tg4perfetto).
#
# None of this is a ktrace dependency. It goes into its own venv (default /tmp/peer, override with PEER_VENV),
# and only the one exporter file is taken from the ~100 MB flashinfer-python wheel, into .bench/ (ignored).
# The exporter really needs torch (it asserts dtype == torch.uint64 and indexes the buffer one tensor element at
# a time, which is most of its cost), so torch is installed: 2.13.0, the CPU build that lies on this disk for
# Python 3.11 (pip takes it offline; a plain `torch` would fetch a multi-GB CUDA build).
# tg4perfetto is an sdist whose build runs protoc: Debian's protobuf-compiler.
#
# Idempotent: rerun it any time. Usage: bash scripts/setup_bench_peer.sh
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PEER="${PEER_VENV:-/tmp/peer}"
PYTHON="${PYTHON:-python3.11}"
FI_VERSION="0.7.4"
FI_FILE="$REPO/.bench/flashinfer-$FI_VERSION/flashinfer/profiler/__init__.py"

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if ! command -v protoc >/dev/null 2>&1; then
  echo "== apt: protobuf-compiler (tg4perfetto's build runs protoc)"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler
fi
echo "protoc: $(protoc --version)"

if [ ! -x "$PEER/bin/python" ]; then
  echo "== venv $PEER ($PYTHON)"
  "$PYTHON" -m venv "$PEER"
fi
"$PEER/bin/python" -m pip install -q --upgrade pip
echo "== pip into $PEER: tg4perfetto, numpy, torch==2.13.0 (CPU)"
"$PEER/bin/python" -m pip install -q "tg4perfetto==0.0.6" numpy "torch==2.13.0"

if [ ! -f "$FI_FILE" ]; then
  echo "== flashinfer-python==$FI_VERSION: extracting flashinfer/profiler/__init__.py only"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  "$PEER/bin/python" -m pip download -q --no-deps -d "$tmp" "flashinfer-python==$FI_VERSION"
  mkdir -p "$(dirname "$FI_FILE")"
  "$PEER/bin/python" - "$tmp" "$FI_FILE" <<'EOF'
import glob, sys, zipfile
whl = glob.glob(sys.argv[1] + "/flashinfer_python-*.whl")[0]
with zipfile.ZipFile(whl) as z, open(sys.argv[2], "wb") as f:
    f.write(z.read("flashinfer/profiler/__init__.py"))
EOF
fi

"$PEER/bin/python" - "$FI_FILE" <<'EOF'
import hashlib, sys
import torch, tg4perfetto  # noqa: F401  (fails here, not in the benchmark, if the install is broken)
data = open(sys.argv[1], "rb").read()
assert b"def export_to_perfetto_trace" in data, "not FlashInfer's exporter"
print(f"torch {torch.__version__}; exporter {sys.argv[1]} sha256 {hashlib.sha256(data).hexdigest()[:16]}")
EOF
echo "peer ready: $PEER/bin/python scripts/_peer_flashinfer.py BUF OUT"
