"""The Launch: header facts, sidecar metadata, and the names the user gave, merged with a clear precedence.

Names: ``--events``/``--groups`` (or a names file) first, then the sidecar's ``event_names``/``group_names``,
else ``event_<i>`` / ``group <g>``.
"""

from __future__ import annotations

from pathlib import Path

from ..core.errors import InputError
from ..core.filetypes import buffer_stem
from ..core.model import Launch
from ..core.names import shown_name
from ..core.sidecar import (MAX_NAME_CHARS, MAX_NAMES, launch_fields, read_names_file, read_sidecar, sidecar_path,
                       text_problem)

__all__ = ["build_launch", "parse_names"]


def parse_names(value) -> tuple[list[str] | None, str | None]:
    """(names, source) from a list, a comma-separated string, or ``@file`` / an existing file path; InputError
    for a name longer than MAX_NAME_CHARS or more than MAX_NAMES names."""
    names, source = _parse_names(value)
    if names is not None:
        if len(names) > MAX_NAMES:
            raise InputError(f"{len(names):,} names given; at most {MAX_NAMES:,}")
        for i, n in enumerate(names):
            if len(n) > MAX_NAME_CHARS:
                raise InputError(f"name {i} is {len(n):,} characters long; a name may have at most {MAX_NAME_CHARS}")
            if text_problem(n):
                raise InputError(f"name {i} ('{n.encode('utf-8', 'backslashreplace').decode()}') {text_problem(n)}; "
                                 "give names as UTF-8 text")
    return names, source


def _parse_names(value) -> tuple[list[str] | None, str | None]:
    if value is None:
        return None, None
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value], "cli"
    text = str(value)
    if text.startswith("@"):
        return read_names_file(text[1:]), "file"
    if "," not in text and Path(text).is_file():
        return read_names_file(text), "file"
    return [s.strip() for s in text.split(",")], "cli"


def _named(parse, value, option: str):
    """parse(value), its InputError prefixed with the option the names came from."""
    try:
        return parse(value)
    except InputError as e:
        msg = str(e)
        raise InputError(msg if msg.startswith(("@", "/", ".")) or ": " in msg.split(" ")[0] else
                         f"{option}: {msg}") from None


def _refuse_duplicates(names, source, sidecar) -> None:
    """Two event indices with one name would merge two phases into one: refuse it, naming the repeats."""
    if not names:
        return
    seen, dup = set(), []
    for n in names:
        if n in seen and n not in dup:
            dup.append(n)
        seen.add(n)
    if dup:
        where = {"cli": "--events", "file": "the event names file", "sidecar": f"the sidecar {sidecar}"}.get(
            source, "the event names")
        listed = ", ".join(repr(n)[:40] for n in dup[:5])
        raise InputError(f"{where}: event name(s) {listed} appear more than once; each event index needs its own "
                         "name (two indices with one name would be merged into one phase)")


WORK_OPTIONS = {"work_bytes": ("--bytes", 1e18), "work_flops": ("--flops", 1e21), "peak_gbps": ("--peak-gbps", 1e7),
                "peak_tflops": ("--peak-tflops", 1e7)}


def _work_value(key: str, v) -> float | None:
    """A work or peak option as a number; InputError for anything but a finite number in its range."""
    if v is None:
        return None
    flag, hi = WORK_OPTIONS[key]
    try:
        x = float(v) if not isinstance(v, bool) else float("nan")
    except (TypeError, ValueError):
        x = float("nan")
    low_ok = x > 0 if key.startswith("peak") else x >= 0
    if not (low_ok and x <= hi):  # NaN fails both
        what = "above 0" if key.startswith("peak") else "0 or more"
        raise InputError(f"{flag} {str(v)[:40]!r}: give a number {what}, at most {hi:.0e}")
    return x


def build_launch(num_blocks, num_groups, *, buffer_path=None, sidecar=None, events=None, groups=None,
                 **work) -> Launch:
    """The Launch for a buffer.

    sidecar: None looks for ``<buffer>.json`` next to a buffer file; a path reads that file; False skips.
    work: ``work_bytes``, ``work_flops`` (over the sidecar's ``work``), ``peak_gbps``, ``peak_tflops`` (the roofline's).
    """
    unknown = sorted(set(work) - set(WORK_OPTIONS))
    if unknown:
        raise InputError(f"unknown launch option {unknown[0]!r}; accepted: {', '.join(WORK_OPTIONS)}")
    given = {k: _work_value(k, v) for k, v in work.items() if v is not None}
    meta: dict = {}
    side_used = None
    if sidecar is not False:
        p = Path(sidecar) if sidecar not in (None, True) else (sidecar_path(buffer_path) if buffer_path else None)
        if p is not None and (sidecar not in (None, True) or p.exists()):
            meta = read_sidecar(p)
            side_used = str(p)
    f = launch_fields(meta)
    ev_names, ev_src = _named(parse_names, events, "--events")
    gr_names, _ = _named(parse_names, groups, "--groups")
    if ev_names is None and f["event_names"]:
        ev_names, ev_src = list(f["event_names"]), "sidecar"
    _refuse_duplicates(ev_names, ev_src, side_used)
    if gr_names is None and f["group_names"]:
        gr_names = list(f["group_names"])
    f.update(
        kernel=str(f["kernel"] or (buffer_stem(buffer_path) if buffer_path else "kernel")),
        event_names=tuple(shown_name(n) for n in ev_names or ()),
        group_names=tuple(shown_name(n) for n in gr_names or ()),
    )
    f.update(given)
    return Launch(num_blocks=num_blocks, num_groups=num_groups, names_source=ev_src or "default", sidecar=side_used,
                  **f)
