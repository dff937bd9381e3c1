"""The finding kinds' registry (ktrace/analysis/findings/kinds/): every kind is one module with every part
(what it detects, typed figures, rank, short text, headline, what the trace draws, what diff compares) and one
registry line; no module outside the registry spells a kind's name; the typed figures serialize to the JSON's
figures as before (optional figures left out while they hold their default)."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

from ktrace.analysis.compare.catalog import PHASE_FIGURES
from ktrace.analysis.findings import kinds
from ktrace.analysis.findings.kinds.base import Kind, KindFigures
from ktrace.core.records import is_frozen

ROOT = Path(__file__).resolve().parent.parent / "ktrace"
KINDS_DIR = ROOT / "analysis" / "findings" / "kinds"
HELPERS = {"base", "last_finisher", "last_finisher_figures", "wait_figures"}  # modules of the package that are not a kind

# Where a kind's name is spelled outside the registry on purpose: the same word names something else.
NOT_A_KIND = {
    ("analysis/model/results.py", "critical_path"),  # the critical path's table
    ("analysis/__init__.py", "critical_path"),  # the JSON's critical path section
    ("analysis/figures/sql/reader.py", "critical_path"),  # the table read from SQL
    ("analysis/figures/numpy/instances.py", "critical_path"),  # the function that builds the table
    ("analysis/figures/numpy/phase_tables.py", "idle_lanes"),  # the phases table's column
    ("analysis/findings/verdicts.py", "idle_lanes"),  # the phases table's column, read
    ("runtime/config.py", "critical_path"),  # the parallel stage that builds the table
    ("analysis/figures/numpy/stream.py", "critical_path"),  # that stage, asked for
}


def _kind_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules([str(KINDS_DIR)]) if m.name not in HELPERS)


def test_every_kind_module_is_registered_once_and_every_registered_kind_has_a_module():
    registered = [k.name for k in kinds.KINDS]
    assert len(registered) == len(set(registered))
    assert sorted(registered) == _kind_modules()  # the module is named as its kind
    for name in _kind_modules():
        mod = importlib.import_module(f"ktrace.analysis.findings.kinds.{name}")
        assert mod.NAME == name and mod.KIND.name == name and kinds.get(name) is mod.KIND


@pytest.mark.parametrize("kind", kinds.KINDS, ids=lambda k: k.name)
def test_a_kind_declares_every_part(kind: Kind):
    missing = [f.name for f in dataclasses.fields(Kind) if getattr(kind, f.name, None) is None and f.name != "diff"]
    assert not missing, f"{kind.name} lacks {missing}"
    assert kind.detects.strip()
    for part in ("lead", "short", "headline", "span", "roles"):
        assert callable(getattr(kind, part)), f"{kind.name}.{part} is not a function"
    assert kind.figures and all(issubclass(c, KindFigures) and is_frozen(c) for c in kind.figures)
    assert kind.diff is None or kind.diff in PHASE_FIGURES, f"{kind.name}: diff compares an unknown figure"


def test_the_ranks_order_the_kinds_without_ties():
    ranks = [k.rank for k in kinds.KINDS]
    assert len(ranks) == len(set(ranks))
    assert kinds.LEAD_ORDER[0] == kinds.SERIAL_TAIL and kinds.LEAD_ORDER[-1] == kinds.CRITICAL_PATH


def test_no_kind_name_is_spelled_outside_the_registry():
    names = "|".join(kinds.names())
    pattern = re.compile(rf"""["']({names})["']""")
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if path.is_relative_to(KINDS_DIR):
            continue
        for m in pattern.finditer(path.read_text(encoding="utf-8")):
            if (rel, m.group(1)) not in NOT_A_KIND:
                found.append(f"{rel}: {m.group(0)}")
    assert not found, "read kinds.NAME or kinds.get(name) instead: " + ", ".join(found)


def test_a_kind_missing_a_part_fails_to_register():
    with pytest.raises(TypeError):
        Kind("new_kind", "something", (KindFigures,), 99, lambda v: 99, lambda v: "", lambda f, v: ("", ""),
             lambda f, fig, m: None, lambda f, fig, m, t: [])  # no diff given


def test_typed_figures_serialize_in_order_and_leave_out_the_optional_defaults():
    from ktrace.analysis.findings.kinds.large_wait import WaitFigures

    g = WaitFigures(next_phase="b", group=None, count=3, sum_ns=30.0, mean_ns=10.0, p50_ns=9.0, max_ns=12.0,
                    waited_for="grid", synced_instances=3, tested_instances=3, follow_slope=1.0,
                    lane_time_fraction=0.2, tick_ns=32.0, waited_block=None, max_k=2)
    assert "cluster_size" not in g.to_dict() and "tiny_phase" not in g
    assert list(g.to_dict())[-2:] == ["waited_block", "max_k"]
    h = g.with_(claimed_ns=5.0, tiny_phase=True, cluster_size=4)
    d = h.to_dict()
    assert list(d)[-2:] == ["tiny_phase", "claimed_ns"]  # what finding-making added comes after the kind's own
    assert list(d).index("cluster_size") == list(d).index("tick_ns") + 1
    assert h["cluster_size"] == 4 and h.get("replayed_saving_ns") is None and dict(h) == d
    with pytest.raises(dataclasses.FrozenInstanceError):
        h.count = 4


def test_the_findings_of_a_sample_carry_their_kinds_typed_figures():
    import ktrace

    a = ktrace.analyze("samples/imbalance_ktrace.bin")
    assert a.findings
    for f in a.findings:
        kind = kinds.get(f.kind)
        assert kind is not None and isinstance(f.figures, kind.figures), f.kind
        assert f.to_dict()["figures"] == f.figures.to_dict()


@pytest.mark.parametrize("module", ["ktrace.analysis.findings.verdict", "ktrace.report.whatif_report",
                                    "ktrace.analysis.findings.kinds.base", "ktrace.analysis.findings.stakes"])
def test_a_findings_module_imports_first_in_a_fresh_interpreter(module):
    """The kinds' modules import Verdict: a module they import must not import the kinds' package back
    (``ktrace whatif`` imports verdict.py first)."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-600:]


def test_a_work_lists_busiest_lane_leads_just_behind_a_stable_straggler():
    """A load imbalance read from the lanes' totals (a work list) leads its cause before a late start but after a
    stable straggler, wherever the kinds' ranks start (serial_tail took rank 0 after this order was set)."""
    from types import SimpleNamespace

    from ktrace.analysis.findings.kinds import late_start, load_imbalance, stable_straggler
    by_totals = SimpleNamespace(kind=load_imbalance.NAME, figures={"basis": "lane_totals"})
    by_instances = SimpleNamespace(kind=load_imbalance.NAME, figures={"basis": "instances"})
    rank = load_imbalance.KIND.rank_of
    assert stable_straggler.KIND.rank < rank(by_totals) < late_start.KIND.rank
    assert rank(by_instances) == load_imbalance.KIND.rank
