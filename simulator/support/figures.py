"""matplotlib for the tools that draw (I/O edge): headless, fonts a paper can embed.

Imported inside the drawing functions, so a command that draws nothing starts without
matplotlib (a second of import). PDFs and PostScript embed their text as TrueType (Type 42)
fonts, not Type 3: conference checks reject Type 3.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from simulator.support.atomic import atomic_paths, interrupts_held

EMBEDDABLE_FONTS = {"pdf.fonttype": 42, "ps.fonttype": 42}
# Drawn at the size they print: a two-column paper's text width, no text under 7 pt.
WIDE_IN = 7.0
TEXT_PT, SMALL_PT = 8, 7


def pyplot() -> Any:
    """`matplotlib.pyplot`, on the Agg backend, with TrueType fonts in PDFs. Imported with
    Ctrl-C held (it comes right after): matplotlib's first import loads C extensions, and an
    interrupt inside one is an ImportError traceback, not the interrupt it is."""
    with interrupts_held():
        import matplotlib  # noqa: PLC0415 - only drawing needs it

        matplotlib.use("Agg")
        matplotlib.rcParams.update(EMBEDDABLE_FONTS)
        import matplotlib.backends.backend_agg  # noqa: PLC0415, F401 - its C extension now
        import matplotlib.backends.backend_pdf  # noqa: PLC0415, F401
        import matplotlib.pyplot as plt  # noqa: PLC0415
        import PIL.Image  # noqa: PLC0415, F401

    return plt


def freeze_layout(fig: Any) -> None:
    """Run the figure's layout engine once and keep what it placed: no engine afterwards
    (what is drawn next is drawn where the layout put it). A figure without one, or whose
    layout is already frozen, is left as it is."""
    from matplotlib.layout_engine import PlaceHolderLayoutEngine  # noqa: PLC0415 - drawing

    engine = fig.get_layout_engine()
    if engine is None or isinstance(engine, PlaceHolderLayoutEngine):
        return
    fig.canvas.draw()
    fig.set_layout_engine("none")


# Matplotlib writes its version and the date into PNG/PDF metadata by default: left out, so
# identical figures are identical files.
_METADATA = {
    ".png": {"Software": None},
    ".pdf": {"Creator": None, "Producer": None, "CreationDate": None},
}


def save_figures(fig: Any, stem: Path) -> list[Path]:
    """`stem`.png and `stem`.pdf, written whole and together or not at all, without
    timestamps (the same figure draws the same bytes); the figure is closed. A figure
    under a layout engine (`layout="constrained"`) is laid out once, then drawn in both
    formats where that layout put everything (matplotlib would lay it out twice more for
    each format)."""
    freeze_layout(fig)
    written = [stem.with_name(stem.name + suffix) for suffix in (".png", ".pdf")]
    with atomic_paths(written) as temps:  # the PNG and the PDF together, or neither
        for tmp, suffix in zip(temps, (".png", ".pdf"), strict=True):
            fig.savefig(tmp, format=suffix[1:], dpi=150, metadata=_METADATA[suffix])
    pyplot().close(fig)
    return written
