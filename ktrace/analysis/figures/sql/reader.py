"""The analysis figures from the ``ktrace`` SQL package, run on an engine Session.

Returns the same ``Figures`` as the numpy engine (stream.py), so the two can be compared exactly.
"""

from __future__ import annotations

from dataclasses import fields

from ...model.results import (Blocks, BusySms, CriticalPath, CriticalShares, Figures, Kernel, LaneTotals, Occupancy,
                      PhaseInstances, PhaseLanes, Phases, Table, Waits)
import numpy as np

from ....core.progress import stage
from ...evidence import in_parts
from ....runtime.config import thread_pool
from ...evidence.waits import TopSlices, is_timed_wait, lead_ins
from ..numpy.phase_tables import wait_causes_of
from .package import MODULES, include_all, register

__all__ = ["sql_figures", "query_table", "gpu_processes"]

_SLICES = "INCLUDE PERFETTO MODULE ktrace.slices;\n"  # what the kernel, launch and top-level slices need
_SQL_NAMES = {"group": "grp"}  # SQL column for a Python field, where they differ ('group' is a keyword)


def query_table(session, table: type[Table]) -> Table:
    """One ktrace table (e.g. ``Phases``) read from a Session on which the package is registered."""
    select = ", ".join(f"{_SQL_NAMES.get(c, c)} AS {c}" if c in _SQL_NAMES else c for c in table.columns())
    select = select.replace(" AS group", ' AS "group"')
    r = session.query(f"{include_all()}SELECT {select} FROM {table.SQL_TABLE} ORDER BY {table.ORDER_BY}")
    return table.from_columns({c: r.column(c) for c in table.columns()})


def sql_figures(session, *, register_package: bool = True, upid: int | None = None, progress=None) -> Figures:
    """Every figure of the analysis, computed by the SQL package on ``session`` (an open engine Session).

    register_package: register the ``ktrace`` package first (pass False when it already is). progress: told
    of each SQL module as it runs, then of "reading the figures" (``ktrace.core.progress``).
    """
    if register_package:
        register(session, upid)
    if upid is None:
        stage(progress, "SQL module ktrace.gpus")
        _refuse_several_gpus(session)
    # The wait evidence is numpy's work (evidence.py) on the top-level slices, which the first two modules
    # give: it runs in a thread while the engine, which holds no GIL, runs the other modules (the figures are
    # the same; 0.6 s of a 1e6-record analysis no longer waits for the engine).
    _include(session, progress, MODULES[:2], 0)
    kernel, launch, top = _kernel(session), _launch(session), _top_slices(session)
    names = _phase_names(session)
    # Beyond EVIDENCE_MAX_SLICES top-level slices, the evidence reads the sample the numpy engine reads
    # (evidence/in_parts.py), which needs the instance table; and, as there, no replay (top: None).
    sampled = len(top.lane) > in_parts.EVIDENCE_MAX_SLICES and int(top.block.max()) <= int(top.lane.max())
    with thread_pool(1, "ktrace-evidence") as beside:
        causes = None if sampled else beside.submit(wait_causes_of, top, kernel, names, launch)
        _include(session, progress, MODULES[2:], 2)
        stage(progress, "reading the figures")
        phases, instances = query_table(session, Phases), query_table(session, PhaseInstances)
        tables = {name: query_table(session, table) for name, table in (
            ("lanes", PhaseLanes), ("waits", Waits), ("critical_path", CriticalPath),
            ("critical_shares", CriticalShares), ("blocks", Blocks), ("lane_totals", LaneTotals),
            ("busy_sms", BusySms), ("occupancy", Occupancy))}
        if sampled:
            nb = launch.get("num_blocks")
            nb = nb if isinstance(nb, int) and nb > 0 else None
            read = in_parts.read_top_evidence(top, kernel.tick_ns, names, nb, instances)
            evidence, top = in_parts.finish_evidence(read), None
        else:
            evidence = causes.result(), lead_ins(top, instances.phase_index, instances.k, instances.last_lane)
        timed = _timed_slices(session, names) if top is not None else None
        return Figures(kernel=kernel, launch=launch, phases=phases, instances=instances, **tables,
                       wait_causes=evidence[0], lead_ins=evidence[1], top=top, timed=timed)


def _include(session, progress, modules, done: int) -> None:
    """Runs the package's modules (each INCLUDEs the ones before it); a progress with a ``stage`` method is
    told of each one (``done`` of all MODULES before them), else they run as one statement. Each ends in a
    SELECT: on a session whose package was pasted in (the Perfetto UI's query page), the INCLUDEs are dropped
    and a statement of INCLUDEs alone would be no SQL at all."""
    if not hasattr(progress, "stage"):
        session.query(f"INCLUDE PERFETTO MODULE {modules[-1]};\nSELECT 1")
        return
    for i, module in enumerate(modules, done):
        stage(progress, f"SQL module {module}", len(MODULES), "modules")
        progress(i, len(MODULES))
        session.query(f"INCLUDE PERFETTO MODULE {module};\nSELECT 1")


def _phase_names(session) -> dict[int, str]:
    """phase_index -> phase name (ktrace.slices' _ktrace_phase_order, which ktrace_phase numbers its rows by)."""
    r = session.query(f"{_SLICES}SELECT phase_index, phase FROM _ktrace_phase_order")
    return {int(i): str(name) for i, name in r.rows}


def _top_slices(session) -> TopSlices:
    """The top-level phase slices, read once, for the wait evidence (computed with numpy: evidence.py), in the
    package's own _ktrace_top_slice's lane order (by begin, then slice id), the order the evidence sorts them
    into (a check, not a sort, when they come in it). Read as few columns as give them all: integers cross
    the engine's boundary several times faster than the phase names, and each column costs as much again
    (the block and group are the lane's quotient and remainder by num_groups, phase_index and k are the
    halves of inst)."""
    r = session.query(f"{_SLICES}SELECT (SELECT n FROM _ktrace_groups) AS n, "
                      "(SELECT COUNT(*) FROM _ktrace_lane_track WHERE grp >= (SELECT n FROM _ktrace_groups)) AS outside")
    n, outside = (int(v) for v in r.rows[0])
    # A trace whose lane tracks name a group of num_groups or more (not one ktrace wrote; a group is never
    # negative, ktrace.lanes reads digits) has lanes that do not divide into a block and a group: read its
    # blocks. A num_groups of 0 or less puts every group there.
    cols = ("lane", "inst", "ts", "end_ts") + (("block",) if outside else ())
    r = session.query(f"{_SLICES}SELECT {', '.join(cols)} FROM _ktrace_top_slice")
    lane, inst, ts, end_ts, *blocks = (np.asarray(r.column(c), np.int64) for c in cols)
    block = blocks[0] if blocks else lane // n
    return TopSlices(lane, block, lane - block * n, inst >> 32, inst & 0xFFFFFFFF, ts, end_ts)


def _timed_slices(session, names: dict[int, str]) -> TopSlices | None:
    """The slices of timed-wait phases nested in the lanes' work (depth 1 or more), as the numpy engine keeps
    them (evidence/in_parts.py nested_waits): the replay reads them as waits; None where there is none."""
    codes = sorted(i for i, nm in names.items() if is_timed_wait(nm))
    if not codes:
        return None
    r = session.query(f"{_SLICES}SELECT lane, inst, ts, end_ts, block, grp FROM _ktrace_slice "
                      f"WHERE depth > 0 AND inst / 4294967296 IN ({', '.join(map(str, codes))}) ORDER BY lane, ts, id")
    lane, inst, ts, end_ts, block, grp = (np.asarray(r.column(c), np.int64) for c in
                                          ("lane", "inst", "ts", "end_ts", "block", "grp"))
    if not len(lane):
        return None
    return TopSlices(lane, block, grp, inst >> 32, inst & 0xFFFFFFFF, ts, end_ts)


def _refuse_several_gpus(session) -> None:
    """A trace written by ``ktrace merge`` holds several GPUs' blocks on one axis: the per-launch figures
    would mix them (a figure no real block has). Refuse it with the way to the per-GPU analysis."""
    r = session.query("INCLUDE PERFETTO MODULE ktrace.gpus;\nSELECT COUNT(DISTINCT gpu) AS n FROM ktrace_gpu_phase_instance")
    n = int(r.rows[0][0] or 0)
    if n > 1:
        from ....core.errors import InputError

        raise InputError(f"{session.trace_name}: a trace of {n} GPUs (written by ktrace merge): one analysis "
                         "would mix their blocks; use ktrace.analyze_merged (the CLI does: each GPU, then across "
                         "GPUs)")


def gpu_processes(session) -> list[tuple[int, str]]:
    """(upid, name) of each GPU process of a trace written by ``ktrace merge``, in GPU order; [] otherwise."""
    r = session.query("SELECT p.upid, p.name FROM process p WHERE p.upid IN (SELECT upid FROM process_track) "
                      "AND p.pid > 0 ORDER BY p.pid")
    return [(int(u), str(n)) for u, n in r.rows]


def _kernel(session) -> Kernel:
    r = session.query(f"{_SLICES}SELECT * FROM ktrace_kernel")
    row = dict(zip(r.columns, r.rows[0]))
    return Kernel(**{f.name: row[f.name] for f in fields(Kernel)})


def _launch(session) -> dict:
    r = session.query(f"{_SLICES}SELECT key, value_type, int_value, real_value, string_value "
                      "FROM ktrace_launch_arg")
    column = {"int": 2, "real": 3, "string": 4}
    return {row[0]: row[column.get(row[1], 4)] for row in r.rows}
