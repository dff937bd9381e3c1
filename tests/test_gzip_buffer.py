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
from ktrace.core.errors import InputError
from conftest import run_ktrace_peak_mb

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


def _zeros_gz(path, header: int, mib: int):
    import zlib

    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    with open(path, "wb") as f:
        f.write(c.compress(np.array([header], "<u8").tobytes()))
        for _ in range(mib):
            f.write(c.compress(bytes(1 << 20)))
        f.write(c.flush())
    return path


def test_a_header_claiming_more_lanes_than_the_file_could_hold_is_refused_before_inflating(tmp_path):
    p = _zeros_gz(tmp_path / "claims.bin.gz", 1 | (1 << 28) << 32, 64)  # 268M lanes claimed, 64 KB of file
    rc, err, mb = run_ktrace_peak_mb("inspect", p, "--no-sidecar")
    assert rc == 2 and "Traceback" not in err, err[-2000:]
    assert "its header claims 1 blocks x 268,435,456 groups = 268,435,456 lanes, more than a" in err
    assert str(p) in err and "--num-blocks" in err
    assert mb < 150  # the header's word, not the 64 MiB after it


@pytest.mark.slow
def test_a_gzip_bomb_buffer_stops_at_the_limit_in_that_much_memory(tmp_path):
    p = _zeros_gz(tmp_path / "bomb.bin.gz", 2 | 1 << 32, 1024)  # a sane header, then 1 GiB of zeros in 1 MB
    rc, err, mb = run_ktrace_peak_mb("inspect", p, "--no-sidecar")
    assert rc == 2 and "Traceback" not in err, err[-2000:]
    assert f"inflates to more than {source.MAX_GZIP_BUFFER_BYTES:,} bytes" in err and "gunzip -k" in err
    assert mb < source.MAX_GZIP_BUFFER_BYTES / 2**20 + 150  # filled once, never copied


def test_a_fifo_named_like_a_gzip_buffer_is_refused_not_waited_on(tmp_path):
    import os

    p = tmp_path / "pipe.bin.gz"
    os.mkfifo(p)
    r = subprocess.run([sys.executable, "-m", "ktrace", "inspect", str(p)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "not a regular file" in r.stderr and str(p) in r.stderr, r.stderr[-2000:]


def test_a_gzip_buffer_of_two_members_reads_whole(tmp_path, gz_copy):
    raw = (SAMPLES / "imbalance_ktrace.bin").read_bytes()
    p = tmp_path / "two.bin.gz"
    p.write_bytes(gzip.compress(raw[:1000]) + gzip.compress(raw[1000:]))
    assert np.array_equal(source.load_buffer(p).words, np.frombuffer(raw, "<u8"))


@pytest.mark.parametrize("first_member", [0, 3, 4096])
def test_a_stream_inflated_in_one_piece_or_many_reads_the_same_words(tmp_path, monkeypatch, first_member):
    # One piece (the usual .bin.gz): its words are read where the inflate left them; several pieces (a stream
    # past PIECE_BYTES, here made small; a first member shorter than the header word): copied into one array.
    raw = (SAMPLES / "imbalance_ktrace.bin").read_bytes()
    want = np.frombuffer(raw, "<u8")
    p = tmp_path / "imb.bin.gz"
    p.write_bytes((gzip.compress(raw[:first_member], mtime=0) if first_member else b"")
                  + gzip.compress(raw[first_member:], mtime=0))
    for piece in (1 << 24, 1000):
        monkeypatch.setattr("ktrace.decoding.inflate.PIECE_BYTES", piece)
        got = source.load_buffer(p).words
        assert got.dtype == np.uint64 and np.array_equal(got, want), (first_member, piece)
