"""gpc_imbalance: one GPC's blocks run slower and it finishes last (IKET gives each block's GPC).

The hand-built IKET trace: a persistent kernel of 132 CTAs, one per SM, on the H200's 8 GPCs (18, 12, 16, 16, 16,
18, 18, 18 SMs); each CTA's warp runs 8 tiles, a `load` then an `mma`. On GPC 3
every tile takes 1.3x as long. Truth: the other GPCs end at 8 x 1.3 µs = 10.4 µs, GPC 3 at 13.52 µs; evening the
GPCs out saves 3.12 µs. The committed IKET samples (samples/iket/) have GPCs within 2% of each other, and a
straggler CTA 17 on GPC 2: the kind must stay silent on them.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import SAMPLES, run_ktrace
from ktrace import analyze
from ktrace.analysis.findings import kinds

T0 = 1_796_442_611_252_500_000
GPC_SMS = (18, 12, 16, 16, 16, 18, 18, 18)
TILES, LOAD_NS, MMA_NS = 8, 300, 1000
SLOW_GPC, SLOW = 3, 1.3


def _range(name, start, end, loc):
    return {"endTs": T0 + end, "internalEvents": [{"eventId": 1, "timestamp": T0 + start},
                                                  {"eventId": 31, "timestamp": T0 + end}],
            "rangeColor": 4294967295, "rangeId": 1, "rangeNameIdx": name, "rangeScope": 0, "rangeType": 2,
            "startTs": T0 + start, "warpLocIdxs": [loc, loc]}


def gpc_trace(slow_gpc=SLOW_GPC, slow=SLOW):
    """(the IKET JSON document, each CTA's end in ns after the first stamp)."""
    gpc = np.repeat(np.arange(len(GPC_SMS)), GPC_SMS)
    locs, ranges, lifetimes, ends = [], [], [], []
    for cta, g in enumerate(gpc.tolist()):  # a loop over CTAs and tiles to write the truth
        f = slow if g == slow_gpc else 1.0
        t = 16 * (cta % 4)  # launch jitter
        locs.append({"ctaId": [cta, 0, 0], "gpcId": g, "smId": cta, "tpcId": cta // 2, "warpId": 0})
        load = mma = cta
        start = t
        for _ in range(TILES):
            ranges.append(_range(0, t, t + round(LOAD_NS * f), load))
            t += round(LOAD_NS * f)
            ranges.append(_range(1, t, t + round(MMA_NS * f), mma))
            t += round(MMA_NS * f)
        lifetimes.append({"startTs": T0 + start, "endTs": T0 + t, "locIdx": cta})
        ends.append(t)
    run = {"blockDimX": 256, "blockDimY": 1, "blockDimZ": 1, "contextId": 1, "gridDimX": len(gpc), "gridDimY": 1,
           "gridDimZ": 1, "gridId": 2, "kernelName": "persistent_tiles", "markers": [], "ranges": ranges,
           "warpLifetimes": lifetimes}
    doc = {"graphLaunches": {}, "launches": [run], "locationTable": locs, "meta": {"version": 1},
           "stringTable": ["load", "mma"]}
    return doc, np.array(ends)


def _write(tmp_path, doc, name="gpc"):
    p = tmp_path / f"{name}.trace.json"
    p.write_text(json.dumps(doc))
    (tmp_path / f"{name}.json").write_text(json.dumps({"device": "NVIDIA H200", "multiprocessors": 132}))
    return p


@pytest.fixture(scope="module")
def slow_gpc(tmp_path_factory):
    doc, ends = gpc_trace()
    return _write(tmp_path_factory.mktemp("gpc"), doc), ends


def _gpc(a):
    return [f for f in a.findings if f.kind == kinds.GPC_IMBALANCE]


def test_a_slow_gpc_leads_with_its_stake(slow_gpc):
    path, ends = slow_gpc
    a = analyze(path)
    gpc = np.repeat(np.arange(len(GPC_SMS)), GPC_SMS)
    truth = float(ends[gpc == SLOW_GPC].max() - ends[gpc != SLOW_GPC].max())  # 3.12 µs
    warn = [f for f in a.findings if f.severity == "warning"]
    assert warn and warn[0].kind == kinds.GPC_IMBALANCE
    g = warn[0].figures
    assert g.gpc == SLOW_GPC and g.blocks == 16 and g.sms == 16 and g.gpcs == 8
    assert g.ratio == pytest.approx(SLOW, rel=0.02)
    assert g.slower_blocks == 16 and g.last_end_ns - g.others_last_end_ns == pytest.approx(truth, abs=64)
    assert warn[0].impact_ns == pytest.approx(truth, rel=0.05)
    # the stake is replayed: GPC 3's slices as fast as the others' saves the time it runs alone
    assert g.replayed_saving_ns == pytest.approx(truth, rel=0.05)
    assert len(_gpc(a)) == 1


def test_the_short_report_names_the_gpc(slow_gpc):
    path, _ = slow_gpc
    rc, out, err = run_ktrace("analyze", path)
    assert rc == 0, err
    first = out.split("\n 1. ", 1)[1]
    assert first.startswith("GPC 3's 16 blocks run 1.30x as long as the other GPCs' and it finishes 3.12 µs after")
    assert "even the work over the GPCs" in first


def test_the_trace_says_the_same(slow_gpc, tmp_path):
    """The SQL engine reads the GPCs from the trace's launch slice: the same finding."""
    path, _ = slow_gpc
    trace = tmp_path / "gpc.perfetto-trace"
    rc, _, err = run_ktrace("convert", path, "-o", trace)
    assert rc == 0, err
    a, b = _gpc(analyze(path)), _gpc(analyze(trace))
    assert len(b) == 1 and b[0].to_dict() == a[0].to_dict()


def test_even_gpcs_and_a_single_slow_block_are_not_a_gpc(tmp_path):
    doc, _ = gpc_trace(slow=1.0)
    assert not _gpc(analyze(_write(tmp_path, doc, "even")))
    # one slow CTA (3x its tiles' time) on GPC 2: a straggler, not its GPC
    straggler = _straggler_doc()
    a = analyze(_write(tmp_path, straggler, "straggler"))
    assert not _gpc(a)


def _straggler_doc():
    """CTA 40 (GPC 2) runs its tiles 3x as long; every other CTA as in gpc_trace with no slow GPC."""
    doc, _ = gpc_trace(slow_gpc=-1)
    run = doc["launches"][0]
    mine = {40}
    t = 0
    out = []
    for r in run["ranges"]:
        if r["warpLocIdxs"][0] in mine:
            continue
        out.append(r)
    for _ in range(TILES):
        out.append(_range(0, t, t + 3 * LOAD_NS, 40))
        t += 3 * LOAD_NS
        out.append(_range(1, t, t + 3 * MMA_NS, 40))
        t += 3 * MMA_NS
    run["ranges"] = out
    for lt in run["warpLifetimes"]:
        if lt["locIdx"] in mine:
            lt["startTs"], lt["endTs"] = T0, T0 + t
    return doc


@pytest.mark.parametrize("name", ["gemm_run1", "gemm_run2", "straggler_run1", "straggler_run2", "slow_load_run1",
                                  "slow_load_run2"])
def test_the_committed_iket_captures_have_no_slow_gpc(name):
    """Their GPCs run within 2% of each other; straggler's CTA 17 ends GPC 2 76 µs late, but it is one block."""
    a = analyze(SAMPLES / "iket" / f"{name}.trace.json.gz")
    assert a.launch.get("block_gpc")
    assert not _gpc(a)
