"""Hand-written expected tables, in the manner of Perfetto's diff tests (test/trace_processor/diff_tests: a
small input, a query, an expected CSV written by hand): each case under tests/expected/ is a tiny buffer given
as its slices (``CASE_input.csv``) and the tables it must give (``CASE_TABLE.csv``: the columns named in the
header, every row in the table's order), each derived by hand from the input in the file's comment lines.
Both engines are held to them: the numpy engine (the main job) and the SQL package (``--engine wasm``), so a
difference between the two is settled by the hand table, not by either side."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

import ktrace
from ktrace.decoding.encode import phase_buffer

EXPECTED = Path(__file__).resolve().parent / "expected"
CASES = sorted(p.name[:-len("_input.csv")] for p in EXPECTED.glob("*_input.csv"))
TABLES = sorted((p.name.split("_", 1)[0], p.stem.split("_", 1)[1]) for p in EXPECTED.glob("*.csv")
                if not p.name.endswith("_input.csv"))
_FIGURES = {"instances": "instances", "phases": "phases", "waits": "waits", "wait_causes": "wait_causes",
            "critical_path": "critical_path", "critical_shares": "critical_shares", "lanes": "lanes",
            "blocks": "blocks", "lead_ins": "lead_ins"}


def _read(path: Path) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of a CSV whose lines starting with '#' are the derivation."""
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
    header, *rows = list(csv.reader(lines))
    return header, rows


def _cell(text: str):
    """An expected cell as a value: empty is NULL, else an integer, a float, or text."""
    if text == "":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _buffer(case: str) -> tuple[np.ndarray, str]:
    """The buffer of a case's slices (every lane runs the same number of slices, in order) and its events."""
    header, rows = _read(EXPECTED / f"{case}_input.csv")
    col = {c: i for i, c in enumerate(header)}
    names = list(dict.fromkeys(r[col["phase"]] for r in rows))  # event ids in order of first appearance
    lanes: dict[tuple[int, int], list] = {}
    for r in rows:
        lanes.setdefault((int(r[col["block"]]), int(r[col["group"]])), []).append(
            (names.index(r[col["phase"]]), int(r[col["begin_ns"]]), int(r[col["end_ns"]])))
    groups = max(g for _, g in lanes) + 1
    blocks = max(b for b, _ in lanes) + 1
    steps = {len(v) for v in lanes.values()}
    assert len(lanes) == blocks * groups and len(steps) == 1, f"{case}: every lane runs as many slices"
    order = sorted(lanes)  # lane = block * groups + group
    arr = np.asarray([lanes[key] for key in order], np.int64)  # (lanes, steps, 3)
    buf = phase_buffer(arr[:, :, 1], arr[:, :, 2], arr[:, :, 0], num_groups=groups, sm=np.arange(blocks))
    return buf, ",".join(names)


@pytest.fixture(scope="module")
def analyses(tmp_path_factory):
    """case -> {engine: Analysis}, each made when first asked for."""
    tmp = tmp_path_factory.mktemp("expected")
    made: dict = {}

    def get(case):
        if case not in made:
            buf, events = _buffer(case)
            path = tmp / f"{case}.bin"
            buf.astype("<u8").tofile(path)
            made[case] = {e: ktrace.analyze(path, engine=e, events=events) for e in ("numpy", "wasm")}
        return made[case]

    return get


def test_every_case_has_tables():
    assert CASES and all(any(c == case for c, _ in TABLES) for case in CASES)
    assert {t for _, t in TABLES} <= set(_FIGURES) | {"kernel"}


@pytest.mark.parametrize("engine", ["numpy", "wasm"])
@pytest.mark.parametrize("case,table", TABLES, ids=[f"{c}-{t}" for c, t in TABLES])
def test_the_engine_gives_the_hand_written_table(analyses, case, table, engine):
    header, rows = _read(EXPECTED / f"{case}_{table}.csv")
    fig = analyses(case)[engine].figures
    got = [fig.kernel.to_dict()] if table == "kernel" else getattr(fig, _FIGURES[table]).rows()
    want = [dict(zip(header, map(_cell, r))) for r in rows]
    assert [{c: row[c] for c in header} for row in got] == want
