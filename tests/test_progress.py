"""Progress through the SQL path: each stage named (writing, parsing with bytes done, finalizing, each SQL
module, reading the figures); a plain progress(done, total) callback still gets bytes only; nothing extra
on a stderr that is not a terminal."""

import pytest

import ktrace
from ktrace.analysis.figures.sql.package import MODULES

from conftest import run_ktrace, sample


class Recorder:
    def __init__(self):
        self.events = []

    def __call__(self, done, total):
        self.events.append(("progress", done, total))

    def stage(self, name, total=None, unit=""):
        self.events.append(("stage", name, unit))

    def stages(self):
        return [e[1] for e in self.events if e[0] == "stage"]


def test_the_sql_path_names_every_stage_in_order():
    rec = Recorder()
    ktrace.analyze(sample("imbalance"), engine="wasm", progress=rec)
    assert rec.stages() == ["writing a temporary trace", "parsing the trace", "finalizing the trace (sorting)",
                            "SQL module ktrace.gpus", *(f"SQL module {m}" for m in MODULES), "reading the figures"]
    parsing = rec.events.index(("stage", "parsing the trace", "bytes"))
    done = [e for e in rec.events[parsing:] if e[0] == "progress"]
    assert done and done[0][1] > 0 and done[0][2] >= done[0][1]  # bytes done of the trace's bytes


def test_a_plain_callback_gets_the_bytes_loaded_only():
    seen = []
    ktrace.analyze(sample("imbalance"), engine="wasm", progress=lambda d, t: seen.append((d, t)))
    assert seen and all(t == seen[-1][1] for _, t in seen) and seen[-1][0] == seen[-1][1]


def test_query_says_when_the_query_runs():
    rec = Recorder()
    ktrace.query(sample("imbalance"), "SELECT 1 AS one", engine="wasm", progress=rec)
    assert rec.stages()[-1] == "running the query"


@pytest.mark.slow
def test_nothing_extra_on_a_stderr_that_is_not_a_terminal():
    rc, out, err = run_ktrace("analyze", sample("imbalance"), "--engine", "wasm", "--json")
    assert rc == 0 and err == "" and out.startswith("{")
