"""Small inputs, large costs: each is refused (or done) within seconds and in bounded memory, by
construction: gzip inflated a piece at a time with its ratio checked, packets checked as they are walked,
lanes scanned a range at a time whatever the header claims, rules split in one pass."""

import os
import subprocess
import sys
import zlib

import numpy as np
import pytest

_MB = 1 << 20
_PACKET_OF_2_GIB = b"\x0a" + bytes([0x80, 0x80, 0x80, 0x80, 0x08])  # the header of a packet of 2^31 bytes


def _gzip(path, pieces, level=6):
    c = zlib.compressobj(level, zlib.DEFLATED, 31)
    with open(path, "wb") as f:
        for p in pieces:
            f.write(c.compress(p))
        f.write(c.flush())
    return path


def _measured(*args):
    """(rc, stderr, the child's peak RSS in MB) of the installed ktrace: refused at once means before the bomb
    is inflated, which its memory shows (no time is asserted)."""
    code = ("import resource, subprocess, sys; "
            "p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
            "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024); "
            "sys.stderr.write(p.stderr)")
    p = subprocess.run([sys.executable, "-c", code, "ktrace", *map(str, args)], capture_output=True, text=True,
                       timeout=300)
    rc, mb = p.stdout.split()
    return int(rc), p.stderr, int(mb)


def test_a_gzip_trace_holding_one_2_gib_packet_is_refused_at_once(tmp_path):
    trace = _gzip(tmp_path / "big.perfetto-trace", [_PACKET_OF_2_GIB] + [bytes(_MB)] * 64, level=1)
    rc, err, mb = _measured("analyze", trace)
    assert rc == 2 and "Traceback" not in err, err
    assert "a field of 2,147,483,648 bytes at byte 0: larger than any trace packet" in err
    assert mb < 600


@pytest.mark.slow
def test_a_trace_bad_from_its_first_bytes_is_refused_before_the_engine_starts(tmp_path):
    # With an empty cache, starting the embedded engine would compile it (~15 s): the refusal comes first.
    trace = _gzip(tmp_path / "big.perfetto-trace", [_PACKET_OF_2_GIB] + [bytes(_MB)] * 4, level=1)
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if k != "KTRACE_TP_SHELL"}
    p = subprocess.run(["ktrace", "query", str(trace), "SELECT 1"], capture_output=True, text=True, timeout=300,
                       env={**env, "KTRACE_CACHE_DIR": str(cache)})
    assert p.returncode == 2 and "larger than any trace packet" in p.stderr, p.stderr
    assert "compiling the trace processor" not in p.stderr
    assert not cache.exists() or not [f for f in cache.rglob("*") if f.is_file()], sorted(cache.rglob("*"))


@pytest.mark.slow
def test_a_gzip_trace_of_millions_of_empty_packets_is_refused_at_once(tmp_path):
    trace = _gzip(tmp_path / "empty.perfetto-trace", [b"\x0a\x00" * (_MB // 2)] * 64, level=9)
    assert trace.stat().st_size < 200_000
    rc, err, mb = _measured("analyze", trace)
    assert rc == 2 and "Traceback" not in err, err
    assert "too small to hold slices" in err
    assert mb < 600


@pytest.mark.slow
def test_a_gzip_stream_that_inflates_too_far_is_refused(tmp_path):
    # one real-looking packet header per MiB: big packets of zeros, 1,000 times smaller compressed
    pieces = []
    for _ in range(16):
        pieces += [b"\x0a" + bytes([0x80, 0x80, 0x40]), bytes((1 << 20) - 4)]  # packets of 1 MiB
    trace = _gzip(tmp_path / "zeros.perfetto-trace", pieces, level=9)
    rc, err, _ = _measured("analyze", trace)
    assert rc == 2 and "inflates more than 200 times" in err and "Traceback" not in err, err


@pytest.mark.slow
@pytest.mark.parametrize("lanes", [1 << 25, (1 << 28) - 1])  # 256 MiB and 2 GiB of holes
def test_a_header_claiming_millions_of_lanes_over_a_sparse_file_is_refused_small(tmp_path, lanes):
    buf = tmp_path / "sparse.bin"
    with open(buf, "wb") as f:
        f.write(np.array([1 | (lanes << 32)], "<u8").tobytes())
        f.truncate(8 + 8 * lanes)
    code = ("import resource, sys\nfrom ktrace.api import inspect\nfrom ktrace.core.errors import InputError\n"
            "try:\n    inspect(sys.argv[1], sidecar=False)\nexcept InputError as e:\n    print(str(e)[:300])\n"
            "print(int(open('/proc/self/status').read().split('VmHWM:')[1].split()[0]) // 1024)")
    # VmHWM: this process's own peak (ru_maxrss would keep the test runner's, inherited across exec)
    p = subprocess.run([sys.executable, "-c", code, str(buf)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    # every lane costs memory in the figures, records or not: a lane past the first 4M needs records; the mapped
    # file's pages count in the RSS (and are the page cache's); anonymous memory stays far below
    assert f"= {lanes:,} lanes, but the buffer holds 0 records" in p.stdout, p.stdout
    assert int(p.stdout.split()[-1]) < 600


def test_a_rule_of_100000_spaces_is_refused_at_once():
    from ktrace.analysis.gates.rules import rule_book
    from ktrace.core.errors import InputError

    for rule in (" " * 100_000, "a" + " " * 100_000 + "b", "kernel.wall_us " + " " * 100_000 + "x"):
        try:  # a parser that backtracks over the spaces would not come back (no time is asserted)
            rule_book([rule])
        except InputError as e:
            assert len(str(e)) < 1000  # the rule is shown cut, not 100,000 spaces

