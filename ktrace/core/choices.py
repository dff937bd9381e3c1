"""The choices and defaults of options that a layer acts on and the command line offers: track trees,
engines, clock alignments, the A/B threshold. They live here, importing nothing, so that building the
parser (``ktrace --help``, any command's ``--help``) does not import numpy, the writer or the engine; the
layers that act on them import them from here."""

from __future__ import annotations

__all__ = ["TRACK_MODES", "ENGINES", "ALIGN_MODES", "DEFAULT_THRESHOLD_PCT"]

TRACK_MODES = ("sm", "block", "flat")  # launch > SM > block > group, launch > block > group, one track per lane
ENGINES = ("auto", "wasm", "native")  # the trace processor: embedded (wasm), $KTRACE_TP_SHELL (native)
ALIGN_MODES = ("offset", "start")  # several GPUs: by the measured clock offsets, or by each first record
DEFAULT_THRESHOLD_PCT = 0.25  # ktrace run --ab: the change that counts, % of the before time
