"""The decoding options, one set of names everywhere: checked once, aliases folded, unknown names refused.

``events``/``groups`` are the decoder's names; ``event_names``/``group_names`` (what the capture API and the
sidecar call them) are accepted for the same thing, so code written against either reads a buffer alike.
"""

from __future__ import annotations

from ..core.errors import InputError

__all__ = ["DECODE_OPTIONS", "ALIASES", "PROTON_OPTIONS", "IKET_OPTIONS", "decode_options"]

DECODE_OPTIONS = ("sidecar", "events", "groups", "layout", "num_blocks", "num_groups", "name", "lanes", "sm_clock_mhz",
                  "proton_log", "launch", "work_bytes", "work_flops", "peak_gbps", "peak_tflops")
# Those that apply to a Triton Proton trace (proton.py) and to an NVIDIA IKET trace (iket.py): here, so that
# opening a buffer checks them without importing either reader.
PROTON_OPTIONS = ("lanes", "sm_clock_mhz", "proton_log")
IKET_OPTIONS = ("lanes", "launch", "work_bytes", "work_flops", "peak_gbps", "peak_tflops")
ALIASES = {"event_names": "events", "group_names": "groups"}


def decode_options(options: dict, *, where: str = "decoding") -> dict:
    """``options`` with the aliases folded into their names (``event_names`` -> ``events``).

    Raises InputError for a name that is not a decoding option (listing the accepted ones) and for an option
    given under both of its names with different values."""
    unknown = sorted(k for k in options if k not in DECODE_OPTIONS and k not in ALIASES)
    if unknown:
        accepted = ", ".join(DECODE_OPTIONS + tuple(f"{a} (= {n})" for a, n in ALIASES.items()))
        raise InputError(f"{where}: unknown option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                         f"accepted: {accepted}")
    out = {k: v for k, v in options.items() if k not in ALIASES}
    for alias, name in ALIASES.items():
        if alias not in options:
            continue
        value = options[alias]
        if out.get(name) is not None and value is not None and _names(out[name]) != _names(value):
            raise InputError(f"{where}: {name}={out[name]!r} and {alias}={value!r} disagree; give one of them")
        if out.get(name) is None:
            out[name] = value
    return out


def _names(v):
    return tuple(v) if isinstance(v, (list, tuple)) else v
