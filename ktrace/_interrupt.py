"""Ctrl-C while the ``ktrace`` command is still importing (before ``cli.main`` can catch it): one line and
exit 130, as for Ctrl-C during a command, never a traceback. Installed only when the process is the
``ktrace`` command (or ``python -m ktrace``), so a program that imports ktrace keeps its own behaviour."""

from __future__ import annotations

import os
import sys

__all__ = ["quiet_interrupts", "is_command"]


def is_command() -> bool:
    """True when this process runs the ktrace command line (``ktrace ...`` or ``python -m ktrace``)."""
    first = sys.argv[0] if sys.argv else ""
    return first == "-m" or os.path.basename(first) in ("ktrace", "ktrace.exe")


def quiet_interrupts() -> None:
    """An excepthook that ends an uncaught KeyboardInterrupt with "ktrace: interrupted" and exit 130."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        if issubclass(kind, KeyboardInterrupt):
            try:
                sys.stderr.write("ktrace: interrupted\n")
                sys.stderr.flush()
            finally:
                os._exit(130)
        previous(kind, value, tb)

    sys.excepthook = hook
