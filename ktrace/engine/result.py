"""Query results: the trace processor's cell batches decoded column by column with numpy.

The engine streams a result as ``QueryResult.CellsBatch`` messages: one cell type per cell (row-major),
and the values in one packed array per type (varints, doubles, a NUL-joined string, blobs). They are
decoded here straight from the wire bytes (numpy, no per-cell Python loop), so a million-row result
costs milliseconds, not seconds.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from ktrace.engine.backend import RawQueryResult, proto_fields
from ..core.records import frozen

__all__ = ["QueryResult", "decode"]

# QueryResult.CellsBatch.CellType
_NULL, _VARINT, _FLOAT64, _STRING, _BLOB = 1, 2, 3, 4, 5
_EXACT_IN_FLOAT64 = 2**53


@frozen(eq=False)
class QueryResult:
    """The rows of one query, immutable.

    ``columns`` are the result's column names in order. ``column(name)`` is that column as a read-only
    numpy array: int64 when every cell is an integer; float64 when cells are numbers (NULL becomes
    NaN; an all-NULL column is all NaN), unless that would round an integer past 2**53, then object;
    object (str, bytes, None, mixed) otherwise. ``rows`` are tuples of Python values exactly as SQL
    returned them (NULL is None).
    Units are whatever the SQL selected: the trace processor's ``ts`` and ``dur`` are nanoseconds.
    """

    columns: tuple[str, ...]
    _cells: np.ndarray = dataclasses.field(repr=False)
    _varints: np.ndarray = dataclasses.field(repr=False)
    _floats: np.ndarray = dataclasses.field(repr=False)
    _strings: np.ndarray = dataclasses.field(repr=False)
    _blobs: np.ndarray = dataclasses.field(repr=False)
    _cache: dict = dataclasses.field(default_factory=dict, repr=False)
    cut_at_bytes: int | None = None  # the engine's reply was over this limit: these are its first rows only

    def __len__(self) -> int:
        return len(self._cells) // len(self.columns) if self.columns else 0

    def __repr__(self) -> str:
        return f"QueryResult(columns={self.columns!r}, {len(self)} rows)"

    def column(self, name: str) -> np.ndarray:
        """The column called ``name`` as a read-only numpy array (dtype rules: see the class)."""
        if name not in self.columns:
            have = ", ".join(self.columns) or "none"
            raise KeyError(f"no column {name!r} in this result; it has {have}")
        return self._column_array(self.columns.index(name))

    @functools.cached_property
    def rows(self) -> list[tuple[Any, ...]]:
        """All rows as tuples of Python values (int, float, str, bytes, None)."""
        return list(zip(*(self._python_values(j) for j in range(len(self.columns)))))

    def to_dicts(self) -> list[dict[str, Any]]:
        """All rows as dicts keyed by column name."""
        return [dict(zip(self.columns, row)) for row in self.rows]

    def head(self, n: int) -> list[tuple[Any, ...]]:
        """The first ``n`` rows as tuples of Python values, without building the others."""
        n = max(0, min(n, len(self)))
        return list(zip(*(self._object_column(j, n).tolist() for j in range(len(self.columns)))))

    # -- decoding one column ----------------------------------------------------------------------------

    def to_pandas(self):
        """The rows as a pandas DataFrame, one column per result column (dtypes as ``column()`` gives them:
        NULL is NaN in a number column, None otherwise). ImportError naming the pip command without pandas."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("QueryResult.to_pandas() needs pandas: pip install 'ktrace[notebook]' "
                              "(or pip install pandas)") from None
        return pd.DataFrame({c: self.column(c) for c in self.columns}, columns=list(self.columns))

    as_pandas_dataframe = to_pandas  # the name Perfetto's TraceProcessor gives it

    def _types(self, j: int) -> np.ndarray:
        return self._cells[j::len(self.columns)]

    def _values(self, j: int, cell_type: int, mask: np.ndarray) -> np.ndarray:
        """The values of column j's cells of ``cell_type`` (selected by ``mask``), in row order."""
        source = {_VARINT: self._varints, _FLOAT64: self._floats, _STRING: self._strings,
                  _BLOB: self._blobs}[cell_type]
        if ("only", cell_type) not in self._cache:  # every cell of the result is of this one type
            self._cache[("only", cell_type)] = len(source) == len(self._cells) and bool(
                (self._cells == cell_type).all())
        if self._cache[("only", cell_type)]:  # a cell's value is the one at its own position: no ranks
            return source[j::len(self.columns)][mask]
        key = ("rank", cell_type)
        if key not in self._cache:
            # Index of each cell within its type's value array: values are stored in cell order.
            self._cache[key] = np.cumsum(self._cells == cell_type, dtype=np.int64) - 1
        rank = self._cache[key][j::len(self.columns)][mask]
        return source[rank]

    def _column_array(self, j: int) -> np.ndarray:
        key = ("column", j)
        if key in self._cache:
            return self._cache[key]
        types = self._types(j)
        present = set(np.unique(types).tolist())
        if present == {_VARINT}:
            out = self._values(j, _VARINT, types == _VARINT)
        elif present and present <= {_VARINT, _FLOAT64, _NULL} and not _exceeds_float64(
                self._values(j, _VARINT, types == _VARINT)):
            out = np.full(len(types), np.nan)
            for cell_type in (_VARINT, _FLOAT64):
                mask = types == cell_type
                out[mask] = self._values(j, cell_type, mask)
        else:
            out = self._object_column(j)
        out.setflags(write=False)
        self._cache[key] = out
        return out

    def _object_column(self, j: int, n: int | None = None) -> np.ndarray:
        types = self._types(j)
        if n is not None:
            types = types[:n]
        out = np.empty(len(types), dtype=object)  # None everywhere: NULL cells stay None
        for cell_type in (_VARINT, _FLOAT64, _STRING, _BLOB):
            mask = types == cell_type
            if mask.any():
                values = self._values(j, cell_type, mask if n is None else _padded(mask, len(self)))
                out[mask] = values.tolist() if cell_type in (_VARINT, _FLOAT64) else values
        return out

    def _python_values(self, j: int) -> list[Any]:
        return self._object_column(j).tolist()


def _padded(mask: np.ndarray, rows: int) -> np.ndarray:
    """A mask over a column's first rows, as long as the whole column (False beyond)."""
    out = np.zeros(rows, bool)
    out[:len(mask)] = mask
    return out


def _exceeds_float64(ints: np.ndarray) -> bool:
    return bool(len(ints)) and bool((np.abs(ints) > _EXACT_IN_FLOAT64).any())


def decode(raw: RawQueryResult) -> QueryResult:
    """Builds a QueryResult from the engine's batches (each a serialized ``QueryResult.CellsBatch``)."""
    cells, varints, floats, strings, blobs = [], [], [], [], []
    for batch in raw.batches:
        for field, value in proto_fields(batch):
            if field == 1:
                cells.append(np.frombuffer(value, dtype=np.uint8))  # each type is a 1-byte varint
            elif field == 2:
                varints.append(_decode_varints(np.frombuffer(value, dtype=np.uint8)))
            elif field == 3:
                floats.append(np.frombuffer(value, dtype="<f8"))
            elif field == 4:
                blobs.append(bytes(value))
            elif field == 5:
                text = bytes(value).decode("utf-8", "replace")
                # Each string ends with a NUL, so the last split piece is the empty remainder.
                strings.extend(text.split("\0")[:-1])
    all_cells = np.concatenate(cells) if cells else np.empty(0, np.uint8)
    cut = getattr(raw, "cut_at_bytes", None)
    if cut is not None and raw.columns:  # a cut reply keeps whole rows only
        all_cells = all_cells[:len(all_cells) - len(all_cells) % len(raw.columns)]
    if raw.columns and len(all_cells) % len(raw.columns):
        raise ValueError(f"malformed query result: {len(all_cells)} cells for {len(raw.columns)} columns")
    string_array = np.empty(len(strings), dtype=object)
    string_array[:] = strings
    blob_array = np.empty(len(blobs), dtype=object)
    blob_array[:] = blobs
    return QueryResult(
        columns=raw.columns,
        _cells=all_cells,
        _varints=np.concatenate(varints) if varints else np.empty(0, np.int64),
        _floats=np.concatenate(floats) if floats else np.empty(0, np.float64),
        _strings=string_array,
        _blobs=blob_array,
        cut_at_bytes=cut,
    )


def _decode_varints(data: np.ndarray) -> np.ndarray:
    """Decodes a packed run of protobuf varints (uint8 array) into int64 (two's complement)."""
    if not len(data):
        return np.empty(0, np.int64)
    ends = np.flatnonzero(data < 0x80)
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = ends - starts + 1
    out = (data[starts] & 0x7F).astype(np.uint64)
    for k in range(1, int(lengths.max())):
        more = lengths > k
        byte = data[starts[more] + k] & 0x7F
        out[more] |= byte.astype(np.uint64) << np.uint64(7 * k)
    return out.view(np.int64)
