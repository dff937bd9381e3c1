"""A report as plain text, for ``str()`` and ``print()`` of a result in Python: what the command prints, without
colour, at the terminal's width ($COLUMNS; 100 columns where there is no terminal, as in a notebook)."""

from __future__ import annotations

import io
import shutil

from .safe_text import safe_console

__all__ = ["analysis_str", "diff_str", "check_str", "renderables_str"]

NO_TERMINAL_WIDTH = 100


def renderables_str(renderables, width: int | None = None) -> str:
    """Rich renderables as plain text (no escape codes), ``width`` columns (default: the terminal's)."""
    width = width or shutil.get_terminal_size((NO_TERMINAL_WIDTH, 24)).columns
    out = io.StringIO()
    con = safe_console(file=out, width=width, no_color=True, color_system=None, highlight=False,
                       force_terminal=False, force_jupyter=False)
    for r in renderables:
        con.print(r)
    return out.getvalue()


def analysis_str(a, width: int | None = None) -> str:
    """The text report of an Analysis, as ``ktrace analyze`` prints it, but for its last line: what else there
    is, as the Analysis' attributes rather than the command's flags."""
    from .analysis_report import analysis_text

    return renderables_str(analysis_text(a, python=True), width)


def diff_str(d, width: int | None = None) -> str:
    """A Diff as ``ktrace diff`` prints it."""
    from .compare_report import diff_text

    return renderables_str(diff_text(d), width)


def check_str(c, width: int | None = None) -> str:
    """A Check as ``ktrace check`` prints it."""
    from .compare_report import check_text

    return renderables_str(check_text([c]), width)
