"""A trace written by `ktrace merge` is analyzed per GPU (each GPU's process alone) and across GPUs, with the
same figures and findings as `ktrace analyze A.bin B.bin` on the buffers: no GPU's blocks mixed into
another's launch."""

from __future__ import annotations

import json

import pytest

import ktrace
from ktrace.api import analyze_gpus, analyze_merged, merged_gpus
from ktrace.core.errors import InputError

from conftest import run_ktrace, sample

BUFFERS = [sample("multigpu_gpu0"), sample("multigpu_gpu1")]


@pytest.fixture(scope="module")
def merged(tmp_path_factory):
    out = tmp_path_factory.mktemp("merged") / "two.perfetto-trace"
    ktrace.merge(BUFFERS, out)
    return out


@pytest.mark.slow
def test_each_gpu_of_a_merged_trace_is_analyzed_alone_like_its_buffer(merged):
    assert merged_gpus(merged) == 2
    m, b = analyze_merged(merged), analyze_gpus(BUFFERS)
    for gm, gb in zip(m.per_gpu, b.per_gpu):
        assert gm.kernel.lanes == gb.kernel.lanes == 132  # one GPU's blocks, not both
        for table in ("phases", "lanes", "waits", "critical_shares", "blocks"):
            if table == "blocks":
                assert gm.figures.blocks.dur_ns.tolist() == gb.figures.blocks.dur_ns.tolist()
                continue
            a, c = getattr(gm.figures, table), getattr(gb.figures, table)
            assert a.differences(c) == [], table
        assert [(f.kind, f.phase, f.severity) for f in gm.findings] == [(f.kind, f.phase, f.severity)
                                                                       for f in gb.findings]
        assert any(f.kind == "stable_straggler" and f.figures["block"] == 17 for f in gm.findings)
    assert m.cross_gpu.instances.differences(b.cross_gpu.instances) == []
    assert m.cross_gpu.phases.differences(b.cross_gpu.phases) == []


def test_one_analysis_of_a_merged_trace_is_refused_with_the_way_out(merged, tmp_path):
    with pytest.raises(InputError, match="2 GPUs"):
        ktrace.analyze(merged)
    one = tmp_path / "one.perfetto-trace"
    ktrace.convert(BUFFERS[0], one)
    assert merged_gpus(one) <= 1
    with pytest.raises(InputError, match="not a trace of several GPUs"):
        analyze_merged(one)


@pytest.mark.slow
def test_cli_analyze_of_a_merged_trace_gives_the_multi_gpu_json(merged):
    rc, out, err = run_ktrace("analyze", merged, "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "ktrace.analysis.multi/1" and len(doc["gpus"]) == 2
    assert all(g["kernel"]["lanes"] == 132 for g in doc["gpus"])
