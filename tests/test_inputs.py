"""The one input resolver (ktrace.inputs): what each kind of input becomes, options checked once, buffers
opened once."""

import numpy as np
import pytest

import ktrace
from ktrace import inputs
from ktrace.core.filetypes import is_trace as filetypes_is_trace
from ktrace.decoding import BufferDecoder
from ktrace.core.errors import InputError
from ktrace.view import is_trace as view_is_trace

from conftest import sample


def test_one_is_trace_everywhere(tmp_path):
    assert ktrace.is_trace is inputs.is_trace is view_is_trace is filetypes_is_trace
    trace = tmp_path / "t.perfetto-trace"
    ktrace.convert(sample("imbalance"), trace)
    odd = tmp_path / "capture.dat"
    odd.write_bytes(trace.read_bytes())
    assert inputs.is_trace(trace) and inputs.is_trace(odd) and inputs.is_trace(tmp_path / "x.pftrace.gz")
    assert not inputs.is_trace(sample("imbalance")) and not inputs.is_trace(tmp_path / "missing")


def test_decode_options_refused_for_traces_only(tmp_path):
    trace = tmp_path / "t.perfetto-trace"
    ktrace.convert(sample("imbalance"), trace)
    with pytest.raises(InputError, match="apply to buffers, not traces"):
        inputs.buffer_options([trace], {"events": "a", "layout": None})
    with pytest.raises(InputError, match="are traces"):
        inputs.buffer_options([trace, trace], {"events": "a"})
    assert inputs.buffer_options([trace], {"events": None, "sidecar": False}) == {"events": None, "sidecar": False}
    assert inputs.buffer_options([trace, sample("imbalance")], {"events": "a"}) == {"events": "a"}
    with pytest.raises(InputError, match="apply to buffers"):
        ktrace.analyze(trace, events="a")


def test_open_input_kinds(tmp_path):
    buf = sample("imbalance")
    with inputs.open_input(buf, need="decoder") as inp:
        assert inp.kind == "buffer" and isinstance(inp.decoder, BufferDecoder) and inp.trace is None
    with inputs.open_input(buf, need="trace") as inp:
        temp = inp.trace
        assert temp.is_file() and inp.summary.slices > 0 and inp.session is None
    assert not temp.exists()  # removed on exit
    words = np.fromfile(buf, dtype="<u8")
    with inputs.open_input(words, need="session", sidecar=False) as inp:
        assert inp.kind == "buffer" and inp.session.query("SELECT 1 AS x").rows == [(1,)]
    d = ktrace.decode(buf)
    with inputs.open_input(d, need="trace") as inp:
        assert inp.kind == "decoded" and inp.trace.is_file()


@pytest.mark.slow
def test_several_gpus_open_each_buffer_once(monkeypatch):
    opened = []
    real = BufferDecoder.__init__

    def counting(self, source, **kw):
        opened.append(str(source))
        real(self, source, **kw)

    monkeypatch.setattr(BufferDecoder, "__init__", counting)
    pair = [str(sample("multigpu_gpu0")), str(sample("multigpu_gpu1"))]
    m = ktrace.analyze_gpus(pair)
    assert sorted(opened) == sorted(pair)
    assert [a.source for a in m.per_gpu] == pair and m.to_dict()["schema"] == "ktrace.analysis.multi/1"



def test_merge_with_report_opens_each_buffer_once(monkeypatch, tmp_path):
    opened = []
    real = BufferDecoder.__init__

    def counting(self, source, **kw):
        opened.append(1)
        real(self, source, **kw)

    monkeypatch.setattr(BufferDecoder, "__init__", counting)
    res = ktrace.merge([sample("multigpu_gpu0"), sample("multigpu_gpu1")], tmp_path / "m.perfetto-trace", report=True)
    assert len(opened) == 2 and res.path.is_file() and res.cross_gpu is not None


def test_figure_values_computed_once_per_capture(monkeypatch):
    from ktrace.analysis.compare import catalog
    from ktrace.analysis.gates.checks import evaluate
    from ktrace.analysis.gates.rules import parse_rule

    cap = catalog.Capture(ktrace.analyze(ktrace.decode(sample("imbalance"))))
    calls = []
    real = catalog.phase_values
    monkeypatch.setattr(catalog, "phase_values", lambda a: calls.append(1) or real(a))
    rules = [parse_rule(t) for t in ("*.imbalance < 100", "*.wall_us > 0", "*.max_dur_us >= 0")]
    assert len(evaluate(rules, cap)) >= 3
    assert len(calls) == 1
