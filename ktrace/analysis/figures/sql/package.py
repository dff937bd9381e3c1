"""The ``ktrace`` PerfettoSQL package: its modules as ``{module name: SQL}``, registered on a Session.

The .sql files live in ``ktrace/analysis/figures/sql/ktrace/`` and are read with importlib.resources, so they work
from an installed wheel too. ``bundle_sql()`` is the whole package as one script for places that cannot
register a package (the Perfetto UI's query page): paste it, then query the tables.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources

__all__ = ["PACKAGE", "MODULES", "sql_modules", "register", "bundle_sql", "include_all", "public_tables"]

PACKAGE = "ktrace"
# Each module INCLUDEs the one before it; the last one brings in every table.
MODULES = ("ktrace.lanes", "ktrace.slices", "ktrace.blocks", "ktrace.phases", "ktrace.waits", "ktrace.critical_path")
_INCLUDE = re.compile(r"^\s*INCLUDE\s+PERFETTO\s+MODULE\s+ktrace\.[A-Za-z0-9_.*]+\s*;[ \t]*\n?",
                      re.IGNORECASE | re.MULTILINE)
_CREATE = re.compile(r"^CREATE\s+PERFETTO\s+", re.IGNORECASE | re.MULTILINE)


@lru_cache(maxsize=1)
def _read() -> tuple[tuple[str, str], ...]:
    root = resources.files("ktrace.analysis.figures.sql").joinpath(PACKAGE)
    found = {f"{PACKAGE}.{p.name[:-4]}": p.read_text(encoding="utf-8")
             for p in root.iterdir() if p.name.endswith(".sql")}
    return tuple(sorted(found.items()))


def sql_modules() -> dict[str, str]:
    """The package's modules: ``{"ktrace.phases": sql_text, ...}``."""
    return dict(_read())


_PUBLIC = re.compile(r"^CREATE\s+PERFETTO\s+(?:TABLE|VIEW)\s+(ktrace_[a-z0-9_]+)", re.IGNORECASE | re.MULTILINE)


def public_tables() -> dict[str, tuple[str, ...]]:
    """{module: the tables and views it creates for users (not ``_ktrace_``)}, modules in INCLUDE order (the
    others after them): what ``ktrace query --help`` lists and docs/analysis-schema.md documents."""
    modules = sql_modules()
    order = [m for m in MODULES if m in modules] + sorted(set(modules) - set(MODULES))
    return {m: tuple(_PUBLIC.findall(modules[m])) for m in order if _PUBLIC.search(modules[m])}


_SOURCE = "CREATE PERFETTO VIEW _ktrace_source_slice AS\nSELECT * FROM slice;"


def register(session, upid: int | None = None) -> None:
    """Registers the package on an engine Session, so ``INCLUDE PERFETTO MODULE ktrace.phases;`` works.

    upid: read only the slices of that process (one GPU of a trace written by ``ktrace merge``)."""
    modules = sql_modules()
    if upid is not None:
        narrowed = (f"CREATE PERFETTO VIEW _ktrace_source_slice AS\nSELECT * FROM slice\n"
                    f"WHERE track_id IN (SELECT id FROM process_track WHERE upid = {int(upid)});")
        modules["ktrace.slices"] = modules["ktrace.slices"].replace(_SOURCE, narrowed)
    session.add_sql_package(PACKAGE, modules)


def include_all() -> str:
    """The statement that brings in every ktrace table."""
    return f"INCLUDE PERFETTO MODULE {MODULES[-1]};\n"


def bundle_sql() -> str:
    """Every module in dependency order, without the ktrace INCLUDEs, as ``CREATE OR REPLACE`` so that
    running it twice works: for the Perfetto UI's query page or any engine without the package."""
    modules = sql_modules()
    ordered = [m for m in MODULES if m in modules] + sorted(set(modules) - set(MODULES))
    parts = []
    for name in ordered:
        text = _INCLUDE.sub("", modules[name])
        parts.append(f"-- ===== {name} =====\n" + _CREATE.sub("CREATE OR REPLACE PERFETTO ", text).strip() + "\n")
    return "\n".join(parts)
