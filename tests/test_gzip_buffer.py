"""A buffer stored gzip-compressed (``NAME.bin.gz``) reads as the raw buffer it holds, with its sidecar
``NAME.json`` beside it; a broken or oversized one is a clear error."""

from __future__ import annotations

import gzip
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ktrace
from ktrace.decoding import source
from ktrace.errors import InputError

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


@pytest.fixture
def gz_copy(tmp_path):
    raw = (SAMPLES / "imbalance_ktrace.bin").read_bytes()
    p = tmp_path / "imb.bin.gz"
    with gzip.GzipFile(p, "wb", mtime=0) as f:
        f.write(raw)
    shutil.copy(SAMPLES / "imbalance_ktrace.json", tmp_path / "imb.json")
    return p


def test_gzip_buffer_decodes_like_the_raw_one(gz_copy):
    a = ktrace.decode(SAMPLES / "imbalance_ktrace.bin")
    b = ktrace.decode(gz_copy)
    assert len(a.slices) == len(b.slices) > 0
    assert np.array_equal(a.slices.begin_ns, b.slices.begin_ns)
    assert b.launch.event_names == a.launch.event_names == ("load", "compute", "reduce")  # the sidecar was found


def test_cli_convert_writes_the_trace_beside_it(gz_copy):
    r = subprocess.run([sys.executable, "-m", "ktrace", "convert", str(gz_copy)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (gz_copy.parent / "imb.perfetto-trace").stat().st_size > 0


def test_truncated_gzip_is_a_clear_error(tmp_path, gz_copy):
    bad = tmp_path / "bad.bin.gz"
    bad.write_bytes(gz_copy.read_bytes()[:200])
    r = subprocess.run([sys.executable, "-m", "ktrace", "analyze", str(bad)], capture_output=True, text=True)
    assert r.returncode == 2
    assert "bad.bin.gz" in r.stderr and "gzip" in r.stderr and "Traceback" not in r.stderr


def test_inflating_past_the_limit_stops(tmp_path):
    p = tmp_path / "big.bin.gz"
    with gzip.GzipFile(p, "wb", mtime=0) as f:
        f.write(bytes(1 << 20))
    with pytest.raises(InputError, match="inflates to more than"):
        source._load_gzip(p, limit=1 << 16)
