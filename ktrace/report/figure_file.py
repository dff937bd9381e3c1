"""Writing a matplotlib figure to a file the way every plot of ktrace does: a clear error for a path that
cannot be written (exit 2), the figure closed whatever happens."""

from __future__ import annotations

from pathlib import Path

from ..outputs import cannot_write

__all__ = ["save_figure"]


def save_figure(fig, out: Path) -> Path:
    """Save ``fig`` as ``out`` (PNG at 110 dpi), creating its folder; returns ``out``."""
    import matplotlib.pyplot as plt

    out = Path(out)
    try:
        if out.is_dir():
            raise IsADirectoryError(21, "it is a folder")
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=110)
    except OSError as e:
        raise cannot_write(out, e, "plot") from None
    finally:
        plt.close(fig)
    return out
