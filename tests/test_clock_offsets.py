"""Clock offsets the user supplies (--offset GPU=NS, --clocks FILE) for captures whose sidecars carry none:
on test_merge.py's two hand-built GPUs (GPU 1's clock 16.4 us ahead) and on the real two-H200 capture."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import ktrace
from ktrace.analysis.figures.across_gpus import cross_gpu
from ktrace.decoding.align import align, open_decoders
from ktrace.decoding.clocks import given_offsets, parse_offsets, read_clocks_file
from ktrace.core.errors import InputError

from conftest import SAMPLES, run_ktrace
from test_merge import OFFSET, parse, write_gpu


@pytest.fixture
def bare(tmp_path):
    """The pair without measured offsets in their sidecars (as a harness of one's own would save them)."""
    return [write_gpu(tmp_path, g, sync=False) for g in (0, 1)]


def _shifts(paths, **kw):
    return [c.shift_ns for c in align(open_decoders(paths), given=given_offsets(**kw)).clocks]


def test_offset_places_the_gpus_as_the_measured_one_does(bare, tmp_path):
    measured = cross_gpu([write_gpu(tmp_path, g, name=f"m{g}") for g in (0, 1)])
    al = align(open_decoders(bare), given=given_offsets(offsets=[f"1={OFFSET}"]))
    x = cross_gpu(bare, alignment=al)
    assert [c.shift_ns for c in al.clocks] == [0, -OFFSET]
    assert np.array_equal(x.per_gpu.end_ns, measured.per_gpu.end_ns)
    assert np.array_equal(x.instances.end_skew_ns, measured.instances.end_skew_ns)
    assert [c.offset_source for c in al.clocks] == ["reference (no offset given: its own clock)", f"--offset 1={OFFSET}"]


def test_an_offset_off_by_u_moves_the_skews_by_at_most_u(bare):
    u = 300
    exact = cross_gpu(bare, alignment=align(open_decoders(bare), given=given_offsets(offsets=[f"1={OFFSET}"])))
    off = cross_gpu(bare, alignment=align(open_decoders(bare), given=given_offsets(offsets=[f"1={OFFSET + u}"])))
    assert np.abs(off.instances.end_skew_ns - exact.instances.end_skew_ns).max() <= u


@pytest.mark.parametrize("key", ["1", "run_gpu1.bin", "run_gpu1", "0000:00:07.0"])
def test_a_gpu_is_named_by_index_file_stem_or_bus(bare, key):
    assert _shifts(bare, offsets=[f"{key}={OFFSET}"]) == [0, -OFFSET]


def test_clocks_file_with_uncertainty_and_offset_overrides_it(bare, tmp_path):
    f = tmp_path / "clocks.json"
    f.write_text(json.dumps({"offsets_ns": {"1": OFFSET}, "uncertainty_ns": 500}))
    al = align(open_decoders(bare), given=given_offsets(clocks=f))
    assert [c.shift_ns for c in al.clocks] == [0, -OFFSET] and al.spread_ns == 500
    assert al.clocks[1].offset_source == f"--clocks {f}"
    assert _shifts(bare, clocks=f, offsets=["1=100"]) == [0, -100]


def test_clocks_file_from_ktrace_run_device(bare, tmp_path):
    def meas(off, spread):
        return {"offsets": [{"device_index": 0, "pci_bus_id": "0000:00:06.0", "offset_to_reference_ns": 0,
                             "spread_ns": 200},
                            {"device_index": 1, "pci_bus_id": "0000:00:07.0", "offset_to_reference_ns": off,
                             "spread_ns": spread}]}
    f = tmp_path / "clock_sync.json"
    f.write_text(json.dumps({"before": meas(OFFSET - 100, 400), "after": meas(OFFSET + 100, 300)}))
    got = read_clocks_file(f)
    assert got["1"].offset_ns == OFFSET and got["1"].uncertainty_ns == 400 and got["0000:00:07.0"] == got["1"]
    assert _shifts(bare, clocks=f) == [0, -OFFSET]


@pytest.mark.parametrize("values,needle", [
    (["1"], "write GPU=NS"), (["1=abc"], "write GPU=NS"), (["=5"], "write GPU=NS"), (["1=5", "1=6"], "given twice"),
])
def test_bad_offsets(values, needle):
    with pytest.raises(InputError, match=needle):
        parse_offsets(values)


def test_offset_for_no_buffer_lists_the_names(bare):
    with pytest.raises(InputError, match=r"--offset 7: no buffer by that name.*run_gpu1\.bin"):
        align(open_decoders(bare), given=given_offsets(offsets=["7=5"]))


def test_offset_with_align_start_is_refused(bare):
    with pytest.raises(InputError, match="use one or the other"):
        align(open_decoders(bare), "start", given=given_offsets(offsets=["1=5"]))


@pytest.mark.parametrize("text,needle", [("[1]", "a clocks file holds"), ("{", "not valid JSON"),
                                         ('{"offsets_ns": {"1": 1.5}}', "integer ns")])
def test_bad_clocks_files(tmp_path, text, needle):
    f = tmp_path / "c.json"
    f.write_text(text)
    with pytest.raises(InputError, match=needle):
        read_clocks_file(f)


def test_the_real_two_gpu_capture_with_its_offset_given(tmp_path):
    """multigpu_gpu{0,1} (two H200s, one run) with the sidecars' offsets removed, then given back by hand."""
    paths = []
    for g in (0, 1):
        shutil.copy(SAMPLES / f"multigpu_gpu{g}.bin", tmp_path)
        meta = json.loads((SAMPLES / f"multigpu_gpu{g}.json").read_text())
        measured = meta["timer"].pop("offset_to_reference_ns"), meta["timer"].pop("offset_spread_ns")
        meta["timer"].pop("clock_sync")
        (tmp_path / f"multigpu_gpu{g}.json").write_text(json.dumps(meta))
        paths.append(tmp_path / f"multigpu_gpu{g}.bin")
    off, spread = measured
    want = ktrace.merge([SAMPLES / "multigpu_gpu0.bin", SAMPLES / "multigpu_gpu1.bin"], tmp_path / "want.perfetto-trace")
    got = ktrace.merge(paths, tmp_path / "got.perfetto-trace", offsets=[f"1={off}"])
    assert [c.shift_ns for c in got.alignment.clocks] == [c.shift_ns for c in want.alignment.clocks] == [0, -off]
    assert spread > 0 and got.alignment.clocks[1].offset_source == f"--offset 1={off}"


@pytest.mark.slow
def test_cli_merge_and_analyze_with_offset(bare, tmp_path):
    out = tmp_path / "m.perfetto-trace"
    rc, stdout, err = run_ktrace("merge", *bare, "-o", out, "--offset", f"1={OFFSET}")
    assert rc == 0, err
    assert "aligned by the clock offsets given" in stdout and f"from --offset 1={OFFSET}" in stdout
    launches = [p for p in parse(out) if p.HasField("track_event") and p.track_event.name == "persistent_phases"]
    args = [{a.name: (a.string_value or a.int_value) for a in p.track_event.debug_annotations} for p in launches]
    assert [a["clock_shift_ns"] for a in args] == [0, -OFFSET]
    assert args[1]["clock_offset_source"] == f"--offset 1={OFFSET}"
    rc, stdout, err = run_ktrace("analyze", *bare, "--json", "--offset", f"1={OFFSET}")
    assert rc == 0, err
    gpus = json.loads(stdout)["cross_gpu"]["alignment"]["gpus"]
    assert [g["shift_ns"] for g in gpus] == [0, -OFFSET] and gpus[1]["offset_source"] == f"--offset 1={OFFSET}"
    rc, _, err = run_ktrace("merge", *bare, "--offset", "1=x")
    assert rc == 2 and "write GPU=NS" in err


@pytest.mark.parametrize("key", ["timer_anchor_ns", "anchor_ns", "globaltimer_anchor_ns", "launch_globaltimer_ns"])
def test_anchor_under_an_alternative_key_places_a_flashinfer_capture(tmp_path, key):
    """FlashInfer's header writes no anchor: a harness that read %globaltimer at launch may save it under any of
    these keys, and the buffer then has an absolute time (so --offset can place it beside another GPU's)."""
    from test_merge import T0

    p = write_gpu(tmp_path, 0, producer="flashinfer", sync=False, host=False, anchored=False)
    meta = json.loads(p.with_suffix(".json").read_text())
    assert ktrace.decode(p).time_origin == "first record"
    meta[key] = T0
    p.with_suffix(".json").write_text(json.dumps(meta))
    d = ktrace.decode(p)
    assert d.launch.timer_anchor_ns == T0 and d.time_origin != "first record"
