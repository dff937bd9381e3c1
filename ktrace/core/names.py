"""The one bound on a name (docs/security.md: at most 256 characters), for every reader.

A name is drawn on every slice of its phase and printed in every report: one 200M-character phase name from an
IKET trace made a 6 GB analysis and a 432 MB JSON. A reader whose format lets names run long (an IKET trace, a
Proton trace) cuts each name with ``cut_names`` before anything is sized from it and counts what it cut (the
``names_cut`` note, said in the data-quality lines); the sidecar, which ktrace writes itself, refuses a longer
one instead (``core.sidecar``).
"""

from __future__ import annotations

__all__ = ["MAX_NAME_CHARS", "CUT_MARK", "cut_name", "cut_names", "shown_name"]

MAX_NAME_CHARS = 256
CUT_MARK = "\u2026"  # the last character of a name that was cut: "…"


def shown_name(name: str) -> str:
    """``name``, or for a name of whitespace alone (which every report would print as nothing: "block 17 finishes
    last in    ") its characters as escapes, ``\\x20\\x20\\x20``."""
    if not name or not name.isspace():
        return name
    return "".join(f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}" for c in name)


def cut_name(name: str, chars: int = MAX_NAME_CHARS) -> str:
    """``name`` when it has at most ``chars`` characters, else its first ``chars - 1`` and ``…``."""
    return name if len(name) <= chars else name[:chars - 1] + CUT_MARK


def cut_names(names) -> tuple[list[str], list[int]]:
    """(the names each cut to MAX_NAME_CHARS and shown (``shown_name``), the indices of those cut). Two long names that begin alike stay two
    names: a cut that would repeat another name ends in ``…2``, ``…3``, ... instead."""
    names = [shown_name(n) for n in names]
    long = [i for i, n in enumerate(names) if len(n) > MAX_NAME_CHARS]
    if not long:
        return names, long
    taken = {n for n in names if len(n) <= MAX_NAME_CHARS}
    for i in long:
        n, k = cut_name(names[i]), 1
        while n in taken:
            k += 1
            n = names[i][:MAX_NAME_CHARS - 1 - len(str(k))] + CUT_MARK + str(k)
        taken.add(n)
        names[i] = n
    return names, long
