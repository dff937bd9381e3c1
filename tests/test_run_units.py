"""What ``ktrace run`` prints of a capture's timing, without a GPU: µs as every report writes it (``us`` only
where the terminal cannot print µ), to the hundredth (a 0.6% overhead on a 205 µs kernel stays visible)."""

from __future__ import annotations

import io
from argparse import Namespace
from types import SimpleNamespace

from conftest import sample
from ktrace.capture.timing import Comparison, Stats
from ktrace.cli import capture as run_cli
from ktrace.report.safe_text import for_stream


def _timing() -> Comparison:
    def stats(median, p10, p90):
        return Stats(median_us=median, mean_us=median, min_us=p10, max_us=p90, p10_us=p10, p90_us=p90, reps=50,
                     warmup=5)

    return Comparison(stats(205.92, 205.36, 206.50), stats(204.72, 204.22, 205.57), "CUDA events")


def test_the_timing_line_writes_microseconds_as_the_reports_do():
    line = run_cli.timing_line(_timing())
    assert line == ("timing, median of 50 interleaved launches after 5 warm-up pairs: unprofiled 204.72 µs "
                    "(p10-p90 204.22-205.57 µs), profiled 205.92 µs (p10-p90 205.36-206.50 µs); overhead x1.0059 "
                    "(+1.20 µs)")
    assert " us" not in line


class _Stream(io.StringIO):
    def __init__(self, encoding):
        super().__init__()
        self._encoding = encoding

    @property
    def encoding(self):
        return self._encoding


def test_a_terminal_that_cannot_print_mu_gets_us():
    line = run_cli.timing_line(_timing())
    assert for_stream(line, _Stream("utf-8")) == line
    assert for_stream(line, _Stream("latin-1")) == line  # µ is in Latin-1
    ascii_line = for_stream(line, _Stream("ascii"))
    assert "µ" not in ascii_line and "unprofiled 204.72 us (p10-p90 204.22-205.57 us)" in ascii_line
    ascii_line.encode("ascii")


def test_run_prints_a_capture_s_timing_in_microseconds(tmp_path, capsys):
    # what `ktrace run` prints after a capture, from a committed buffer (the capture itself needs a GPU)
    buf = tmp_path / "imbalance.bin"
    buf.write_bytes(sample("imbalance").read_bytes())
    cap = SimpleNamespace(name="imbalance", kernel=SimpleNamespace(), grid=(4, 1, 1), block=(256, 1, 1),
                          producer="ktrace", timing=_timing(), overflow=None,
                          paths={"bin": buf, "json": tmp_path / "imbalance.json"})
    run_cli._report_capture(cap, Namespace(tracks="sm", no_report=True), report=False)
    out = capsys.readouterr().out
    assert "unprofiled 204.72 µs (p10-p90 204.22-205.57 µs)" in out and "overhead x1.0059 (+1.20 µs)" in out
    assert " us" not in out and (tmp_path / "imbalance.perfetto-trace").is_file()
