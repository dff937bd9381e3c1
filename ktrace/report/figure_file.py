"""Writing a matplotlib figure to a file the way every plot of ktrace does: names shown as they are written
(never parsed as mathtext: a kernel named ``$\\frac{$`` is text), the file written through an exclusive temp
file renamed into place (never through a planted link), a clear error for a path that cannot be written
(exit 2), the figure closed whatever happens."""

from __future__ import annotations

import io
from contextlib import contextmanager
from pathlib import Path

from ..core.errors import EnvironmentMissing, InputError
from ..core.outputs import PLOT_SUFFIXES, cannot_write, planted_link, write_atomically

__all__ = ["save_figure", "pyplot", "PLOT_SUFFIXES"]


@contextmanager
def pyplot():
    """matplotlib.pyplot on the Agg backend, with mathtext off for every text made inside (names come from
    captures: ``$`` in one must not start a formula); EnvironmentMissing naming the pip install without it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise EnvironmentMissing(f"--plot needs matplotlib ({e}): pip install matplotlib") from None
    with plt.rc_context({"text.parse_math": False}):
        yield plt


def _format(out: Path) -> str:
    if not out.name.lower().endswith(PLOT_SUFFIXES):
        raise InputError(f"{out}: a plot is one of {', '.join(PLOT_SUFFIXES)} (by the name's ending); give it such "
                         f"a name, e.g. {out.with_name(out.stem + '.png')}")
    return out.suffix.lower().lstrip(".")


def save_figure(fig, out: Path) -> Path:
    """Save ``fig`` as ``out`` (its format by its name's ending; PNG at 110 dpi), creating its folder;
    returns ``out``."""
    import matplotlib.pyplot as plt
    from matplotlib.text import Text

    out = Path(out)
    try:
        fmt = _format(out)
        for t in fig.findobj(Text):  # a figure made outside pyplot(): its names are text too
            t.set_parse_math(False)
        data = io.BytesIO()
        fig.savefig(data, dpi=110, format=fmt)
        if out.is_dir():
            raise IsADirectoryError(21, "it is a folder")
        if planted_link(out):
            raise InputError(f"{out}: is a symbolic link; ktrace never writes through one: remove it or choose "
                             "another --plot")
        out.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(out, data.getvalue())
    except OSError as e:
        raise cannot_write(out, e, "plot") from None
    finally:
        plt.close(fig)
    return out
