"""The columnar table every analysis figure comes in: frozen numpy columns with units in their names, one
kind per column (int, real, intn: an integer that may be NULL, text), comparable exactly (``differences``)."""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any, ClassVar

import numpy as np

from ...runtime.config import Parallelism, parallelism
from ...core.jsonfmt import EncodedLines, EncodedRows, encode_basestring, escape_raw
from ...core.records import frozen

__all__ = ["Table", "table", "kinds", "INT", "REAL", "TEXT", "INTN", "json_rows_of"]

_INT, _REAL, _TEXT = "int", "real", "text"
_INTN = "intn"  # an integer that may be NULL: float64 with NaN in numpy, int or None in rows()
_COLUMNS: dict[type, tuple[str, ...]] = {}  # each table class's column names, in order


@frozen(eq=False)
class Table:
    """Columns of equal length. Subclasses declare the columns as fields and their kinds in KINDS."""

    KINDS: ClassVar[dict[str, str]] = {}
    SQL_TABLE: ClassVar[str] = ""
    ORDER_BY: ClassVar[str] = ""

    @classmethod
    def columns(cls) -> tuple[str, ...]:
        cols = _COLUMNS.get(cls)
        if cols is None:  # dataclasses.fields walks every field each call: read once per class
            cols = _COLUMNS[cls] = tuple(f.name for f in fields(cls))
        return cols

    @classmethod
    def from_columns(cls, data: dict[str, Any]) -> "Table":
        """Builds the table from a mapping column -> sequence, converting each to its kind's dtype."""
        return cls(**{name: _as_kind(data[name], cls.KINDS[name]) for name in cls.columns()})

    @classmethod
    def empty(cls) -> "Table":
        return cls.from_columns({name: [] for name in cls.columns()})

    @classmethod
    def concat(cls, tables: list) -> "Table":
        """The rows of ``tables``, one after another."""
        return cls(**{name: np.concatenate([getattr(t, name) for t in tables]) for name in cls.columns()})

    def __len__(self) -> int:
        return len(getattr(self, self.columns()[0]))

    def rows(self) -> list[dict[str, Any]]:
        """The rows as dicts of plain Python values (NaN becomes None): JSON-ready."""
        cols = [(name, _python_values(getattr(self, name), self.KINDS[name])) for name in self.columns()]
        return [dict(zip((n for n, _ in cols), vals)) for vals in zip(*(v for _, v in cols))]

    def json_rows(self) -> EncodedRows:
        """The rows as JSON text, each exactly what ``json.JSONEncoder(separators=(", ", ": "),
        ensure_ascii=False, allow_nan=False).encode(row)`` gives for the dict ``rows()`` has for it, written a
        column at a time (a long table's rows were most of ``--json``'s time). Raises ValueError for an
        infinite value, as that encoder does."""
        return EncodedRows(self._row_texts(0, len(self)))

    def json_lines(self, lo: int = 0, hi: int | None = None) -> str:
        """Rows lo to hi of ``json_rows``, joined by newlines and escaped (a piece of ``EncodedLines``)."""
        return escape_raw("\n".join(self._row_texts(lo, len(self) if hi is None else hi)))

    def _row_texts(self, lo: int, hi: int):
        # One format per table ('{"a": %s, "b": %s}'), filled with each row's value texts: a string per row,
        # not per cell and key.
        names = self.columns()
        fmt = "{" + ", ".join(encode_basestring(name).replace("%", "%%") + ": %s" for name in names) + "}"
        texts = []
        for name in names:
            arr, kind = getattr(self, name)[lo:hi], self.KINDS[name]
            if arr.dtype.kind == "f":
                if np.isinf(arr).any():
                    raise ValueError("Out of range float values are not JSON compliant")
                if kind == _INTN:
                    values = ["null" if v != v else str(int(v)) for v in arr.tolist()]
                elif np.isnan(arr).any():
                    values = ["null" if v != v else float.__repr__(v) for v in arr.tolist()]
                else:
                    values = list(map(float.__repr__, arr.tolist()))
            elif arr.dtype.kind in "iu":
                values = list(map(str, arr.tolist()))
            else:
                values = ["null" if v is None else encode_basestring(v) for v in arr.tolist()]
            texts.append(values)
        return map(fmt.__mod__, zip(*texts))

    def row(self, i: int) -> dict[str, Any]:
        return {name: _python_value(getattr(self, name)[i], self.KINDS[name]) for name in self.columns()}

    def to_pandas(self):
        """The table as a pandas DataFrame (pandas is optional: ``pip install 'ktrace[notebook]'``)."""
        from .notebook import to_pandas

        return to_pandas(self)

    def _repr_html_(self) -> str:
        from .notebook import table_html

        return table_html(self)

    def where(self, mask) -> "Table":
        """The rows where ``mask`` (bool array) is true."""
        return type(self)(**{name: getattr(self, name)[mask] for name in self.columns()})

    def differences(self, other: "Table") -> list[str]:
        """Columns whose values differ from ``other``'s (NaN equals NaN): empty when the tables are equal."""
        if type(other) is not type(self):
            return [f"{type(other).__name__} is not a {type(self).__name__}"]
        if len(self) != len(other):
            return [f"{len(self)} rows != {len(other)} rows"]
        out = []
        for name in self.columns():
            a, b = getattr(self, name), getattr(other, name)
            same = np.array_equal(a, b, equal_nan=True) if a.dtype.kind == "f" else (
                a.tolist() == b.tolist())
            if not same:
                bad = [i for i, (x, y) in enumerate(zip(a.tolist(), b.tolist()))
                       if not (x == y or (isinstance(x, float) and isinstance(y, float) and
                                          math.isnan(x) and math.isnan(y)))]
                i = bad[0]
                out.append(f"{name}: {len(bad)} rows differ, first row {i}: {a[i]!r} != {b[i]!r}")
        return out


def json_rows_of(tables: list, jobs: int | Parallelism = 1) -> list:
    """Each table's rows as ``EncodedLines`` (``Table.json_lines``). jobs: worker processes, or the command's
    Parallelism: where its ``json`` stage has workers, the tables of ``json_min_rows`` rows or more are cut
    into ranges of rows of about equal cells, twice as many as the jobs, mapped by that stage (the same text
    for any number): one worker a table left the rest idle behind the longest one (at 1e8 records, the
    instance table alone took most of 6 s)."""
    par = parallelism(jobs)
    write = par.stage("json")
    jobs = write.jobs
    out = [[] for _ in tables]
    big = [i for i, t in enumerate(tables) if par.stage("json", len(t)).parallel]
    cells = {i: len(tables[i]) * len(tables[i].columns()) for i in big}
    target = max(sum(cells.values()) // (2 * jobs), 1)
    pieces = []
    for i in big:
        n = len(tables[i])
        cuts = np.linspace(0, n, max(1, min(n, round(cells[i] / target))) + 1).astype(np.int64).tolist()
        pieces += [(i, a, b) for a, b in zip(cuts[:-1], cuts[1:])]
    if len(pieces) > 1:
        for (i, _, _), text in zip(pieces, write.imap(_json_lines_at, tables, pieces)):
            out[i].append(text)
    return [EncodedLines(o) if o else EncodedLines((t.json_lines(),)) for t, o in zip(tables, out)]


def _json_lines_at(tables: list, piece: tuple[int, int, int]) -> str:
    i, lo, hi = piece
    return tables[i].json_lines(lo, hi)


def table(cls):
    """Class decorator for a Table subclass: its columns are the keys of its KINDS (name -> kind, in column
    order), each a field holding a numpy array; the class declares them once, there."""
    own = dict(cls.__dict__.get("__annotations__", {}))
    cls.__annotations__ = {**{name: "np.ndarray" for name in cls.KINDS}, **own}
    return frozen(eq=False)(cls)


def _as_kind(values, kind: str) -> np.ndarray:
    if kind == _INTN:
        kind = _REAL
    if kind == _INT:
        return np.asarray(values, dtype=np.int64).reshape(-1)
    if kind == _REAL:
        arr = np.asarray([np.nan if v is None else v for v in values] if not isinstance(values, np.ndarray)
                         else values, dtype=np.float64)
        return arr.reshape(-1)
    out = np.empty(len(values), dtype=object)
    # A column of NULLs only comes back from the engine as float NaN.
    out[:] = [None if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)
              for v in (values.tolist() if isinstance(values, np.ndarray) else values)]
    return out


def _python_value(v, kind: str = ""):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return None if math.isnan(v) else (int(v) if kind == _INTN else float(v))
    return v


def _python_values(arr: np.ndarray, kind: str = "") -> list:
    if arr.dtype.kind == "f":
        if kind == _INTN:
            return [None if math.isnan(v) else int(v) for v in arr.tolist()]
        return [None if math.isnan(v) else v for v in arr.tolist()]
    return arr.tolist()


def kinds(**kinds: str) -> dict[str, str]:
    return kinds



INT, REAL, TEXT, INTN = _INT, _REAL, _TEXT, _INTN
