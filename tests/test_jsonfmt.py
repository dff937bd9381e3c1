"""The JSON ktrace prints: the same value json.dumps gives, deterministic, each table row on one line."""

from __future__ import annotations

import json
import math

import pytest

import ktrace
from ktrace.core import jsonfmt

from conftest import sample


@pytest.mark.parametrize("obj", [
    {}, [], {"a": []}, {"a": {}}, [1, [2, [3]]], {"x": [{"a": 1, "b": [1, 2]}, {"a": None}]},
    {"s": "é\n\"quote\"", 1: 2, True: False, None: 0.5}, [{"k": 1.5e300}, {"k": -0.0}], "text", 7, None,
])
def test_the_text_parses_to_what_json_dumps_gives(obj):
    for ascii_only in (True, False):
        got = jsonfmt.dumps(obj, indent=2, ensure_ascii=ascii_only)
        assert json.loads(got) == json.loads(json.dumps(obj, ensure_ascii=ascii_only))


def test_nan_is_refused_as_json_dumps_refuses_it():
    with pytest.raises(ValueError):
        jsonfmt.dumps({"rows": [{"v": math.nan}]}, allow_nan=False)


def test_an_analysis_prints_one_row_per_line_and_the_same_value():
    a = ktrace.analyze(sample("waves_ktrace"), engine="numpy")
    text = a.to_json()
    assert json.loads(text) == json.loads(json.dumps(a.to_dict(), allow_nan=False))
    assert text == a.to_json()  # deterministic
    d = a.to_dict()
    rows = sum(len(d[t]) for t in ("instances", "lanes", "blocks", "lane_totals", "busy_sms"))
    assert rows > 1000 and len(text.splitlines()) < 2 * rows  # a row per line, not a line per value


def test_a_tables_rows_written_a_column_at_a_time_are_what_the_encoder_writes_of_its_dicts():
    from ktrace.analysis.model.table import INT, INTN, REAL, TEXT, Table, kinds, table

    @table
    class T(Table):
        KINDS = kinds(n=INT, x=REAL, m=INTN, s=TEXT)

    t = T.from_columns({"n": [0, -3, 2**62, 7], "x": [1.5e300, -0.0, math.nan, 0.1 + 0.2],
                        "m": [math.nan, 4.0, -2.0, 2.0**53], "s": ["é\n\"q\"\\", None, "\x9b\u202e", ""]})
    encode = json.JSONEncoder(separators=(", ", ": "), ensure_ascii=False, allow_nan=False).encode
    assert list(t.json_rows()) == [encode(r) for r in t.rows()]
    dumps = lambda obj: jsonfmt.dumps(obj, ensure_ascii=False, allow_nan=False)  # noqa: E731 (as ktrace writes it)
    assert dumps({"t": t.json_rows()}) == dumps({"t": t.rows()})
    assert dumps({"t": T.empty().json_rows()}) == dumps({"t": []})
    with pytest.raises(ValueError):
        T.from_columns({"n": [1], "x": [math.inf], "m": [1.0], "s": ["a"]}).json_rows()


@pytest.mark.parametrize("name", ["waves_ktrace", "warpgroups_ktrace", "imbalance"])
def test_an_analysis_writes_the_text_its_dicts_give(name):
    a = ktrace.analyze(sample(name), engine="numpy")
    assert a.to_json() == jsonfmt.dumps(a.to_dict(), indent=2, ensure_ascii=False, allow_nan=False)


@pytest.mark.parametrize("name", ["waves_ktrace", "warpgroups_ktrace"])
def test_long_tables_written_by_workers_give_the_same_text(name, monkeypatch):
    from ktrace.analysis.model import table

    a = ktrace.analyze(sample(name), engine="numpy")
    one = a.to_json()
    long = [t for t in (a.figures.instances, a.figures.critical_path, a.figures.lanes, a.figures.blocks) if len(t) > 8]
    assert len(long) >= 2
    from ktrace.runtime.config import Parallelism

    for jobs in (2, 3):  # every table of 8 rows or more goes to the workers
        assert a.to_json(jobs=Parallelism(jobs=jobs, cores=jobs, json_min_rows=8)) == one


@pytest.mark.parametrize("text, written", [
    ("plain ascii", "plain ascii"), ("del\x7f", "del\\u007f"), ("csi\x9b31m", "csi\\u009b31m"),
    ("bidi\u202egnp", "bidi\\u202egnp"), ("é ok", "é ok"), ("ls\u2028", "ls\\u2028"),
])
def test_what_a_terminal_would_act_on_is_escaped_and_nothing_else(text, written):
    assert jsonfmt.escape_raw(text) == written
    for obj in ({"s": text}, {text: [{"row": text}]}, [text]):
        out = jsonfmt.dumps(obj, ensure_ascii=False)
        assert json.loads(out) == obj and written in out
        assert text == written or text not in out


def test_a_tables_rows_written_in_pieces_by_workers_escape_what_a_terminal_would_act_on(monkeypatch):
    from ktrace.analysis.model import table
    from ktrace.analysis.model.table import INT, TEXT, Table, kinds, json_rows_of

    @table.table
    class T(Table):
        KINDS = kinds(n=INT, s=TEXT)

    names = ["csi\x9b31m", "bidi\u202egnp", "del\x7f", "nl\n\"q\"", None, "ls\u2028", "é ok"] * 5
    t = T.from_columns({"n": list(range(len(names))), "s": names})
    dumps = lambda obj: jsonfmt.dumps(obj, ensure_ascii=False, allow_nan=False)  # noqa: E731
    want = dumps({"t": t.rows()})
    from ktrace.runtime.config import Parallelism

    for jobs in (1, 2, 3):  # the table is cut into pieces written by workers
        got = dumps({"t": json_rows_of([t, t], Parallelism(jobs=jobs, cores=jobs, json_min_rows=4))[0]})
        assert got == want and json.loads(got)["t"] == t.rows()
        assert not any(c in got for c in "\x9b\u202e\x7f\u2028")
