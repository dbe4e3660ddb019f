"""`python -m simulator.plot`: a sweep's metric against a swept parameter (issue 36)."""

from __future__ import annotations

import csv

import pytest

from simulator.plot import independent, lines, read_sweep
from simulator.plot import main as plot_main
from simulator.sweep import main as sweep_main


def _overlaps(fig, texts) -> list[tuple[str, str]]:
    """Pairs of the visible, non-empty `texts` whose boxes on the drawn figure overlap."""
    renderer = fig.canvas.get_renderer()
    texts = [t for t in texts if t.get_visible() and t.get_text().strip()]
    boxes = [t.get_window_extent(renderer) for t in texts]
    return [
        (texts[i].get_text()[:20], texts[j].get_text()[:20])
        for i in range(len(boxes))
        for j in range(i + 1, len(boxes))
        if boxes[i].overlaps(boxes[j])
    ]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "sweep.csv"
    code = sweep_main(
        ["--grid", "pe_dim=64,128", "seq=4K,16K,64K", "accel=binding,flat",
         "--engine", "analytic", "--no-progress", "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    return out


def test_one_line_per_configuration(sweep):
    columns, rows = read_sweep(sweep)
    params = columns[: columns.index("latency_s")]
    varying = [c for c in params if c != "seq" and len({r[c] for r in rows}) > 1]
    # pe_dim_1d and the registers follow pe_dim and accel: not lines of their own
    assert independent(rows, varying) == ["accel", "pe_dim"]
    data = lines(rows, "seq", "latency_s", ["accel", "pe_dim"])
    assert len(data) == 4 and all(len(points) == 3 for points in data.values())
    for points in data.values():
        assert [p[0] for p in points] == sorted(p[0] for p in points)
        assert all(p[1] > 0 for p in points)


def test_draws_png_and_pdf(sweep, tmp_path, capsys):
    stem = tmp_path / "latency"
    assert plot_main([str(sweep), "--x", "seq", "-o", str(stem)]) == 0
    png = stem.with_name("latency.png")
    pdf = stem.with_name("latency.pdf")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and pdf.read_bytes()[:5] == b"%PDF-"
    assert "wrote" in capsys.readouterr().out


def test_rows_with_an_error_are_left_out(sweep, tmp_path):
    columns, rows = read_sweep(sweep)
    rows[0]["error"] = "does not fit"
    bad = tmp_path / "with-error.csv"
    with bad.open("w", newline="") as fh:
        w = csv.DictWriter(fh, columns)
        w.writeheader()
        w.writerows(rows)
    assert plot_main([str(bad), "--x", "seq", "-o", str(tmp_path / "f")]) == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--x", "banana"], "no column 'banana'"),
        (["--x", "seq", "--y", "accel"], "holds no numbers"),
        (["--x", "seq", "--by", "nope"], "--by: no column 'nope'"),
    ],
)
def test_bad_columns_are_one_line(sweep, tmp_path, capsys, argv, message):
    assert plot_main([str(sweep), *argv, "-o", str(tmp_path / "f")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not list(tmp_path.glob("f.*"))  # nothing half-written


def test_the_figure_is_legible_at_print_size(sweep, tmp_path, monkeypatch):
    """At most 7 in wide, no text under 7 pt, and no two visible texts (ticks, labels,
    title, legend) overlap."""
    import matplotlib.figure
    import matplotlib.text

    seen = []
    original = matplotlib.figure.Figure.savefig

    def record(fig, fname, *args, **kwargs):
        result = original(fig, fname, *args, **kwargs)
        texts = [t for t in fig.findobj(matplotlib.text.Text) if t.get_text().strip()]
        seen.append(
            (fig.get_figwidth(), min(t.get_fontsize() for t in texts), _overlaps(fig, texts))
        )
        return result

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", record)
    assert plot_main([str(sweep), "--x", "seq", "-o", str(tmp_path / "f")]) == 0
    assert seen
    for width, smallest, overlaps in seen:
        assert width <= 7.0 + 1e-9 and smallest >= 7 and not overlaps, overlaps


def test_compare_shows_small_bars_beside_large_ones(tmp_path, monkeypatch):
    """simulator.compare at 1M tokens: DRAM traffic of 6.8 TB beside 6.8 PB. The panel is
    logarithmic and every bar carries its value (a 38 GB bar was invisible beside 38,000
    GB on a linear axis); the utilisation is in percent; no two texts overlap."""
    import matplotlib.figure

    from simulator.compare import main as compare_main

    seen = []
    original = matplotlib.figure.Figure.savefig

    def record(fig, fname, *args, **kwargs):
        result = original(fig, fname, *args, **kwargs)
        # titles, the legend and the bars' value labels (tick labels are matplotlib's)
        texts = [fig._suptitle] if fig._suptitle else []
        for ax in fig.axes:
            texts += [ax.title, *ax.texts]
        for legend in fig.legends:
            texts += legend.get_texts()
        seen.append((fig, _overlaps(fig, texts)))
        return result

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", record)
    assert compare_main(["--cascades", "attention-3pass,attention-1pass", "--seq", "1M",
                         "--engine", "analytic", "--out", str(tmp_path / "cmp")]) == 0  # fmt: skip
    fig, overlaps = seen[0]
    dram = next(ax for ax in fig.axes if ax.get_title().startswith("DRAM"))
    assert dram.get_yscale() == "log" and "(log)" in dram.get_title()
    bars = [p for p in dram.patches if p.get_height() > 0]
    labels = [t for t in dram.texts if t.get_text().strip()]
    assert len(labels) == len(bars) >= 4
    util = next(ax for ax in fig.axes if "utilisation" in ax.get_title())
    assert any(t.get_text().endswith("%") for t in util.get_yticklabels())
    assert not overlaps, overlaps


def test_per_tensor_per_level_statistics(capsys):
    """`simulator.run --format json` lists reads, fills and updates per Einsum, tensor and
    level (Timeloop's statistics); `--breakdown` sums them per tensor and level. BERT at
    4K tokens under +Binding reads K and V from DRAM once: batch x heads x S x E values."""
    import json

    from simulator.run import main as run_main

    assert run_main(["--seq", "4K", "--accel", "binding", "--engine", "analytic",
                     "--format", "json"]) == 0  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    rows = doc["results"] if isinstance(doc, dict) and "results" in doc else doc
    record = rows[0] if isinstance(rows, list) else rows
    accesses = record["accesses"]
    assert {a["level"] for a in accesses} <= {"DRAM", "buffer", "registers"}
    once = 64 * 12 * 4096 * 64
    for tensor in ("K", "V", "Q"):
        dram = [a for a in accesses if a["tensor"] == tensor and a["level"] == "DRAM"]
        assert sum(a["reads"] for a in dram) == once
    # the buffer's fills of K are DRAM's reads of it: what leaves one level enters the next
    fills = sum(a["fills"] for a in accesses if a["tensor"] == "K" and a["level"] == "buffer")
    assert fills == once
    assert run_main(["--seq", "4K", "--accel", "binding", "--engine", "analytic",
                     "--breakdown"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "accesses per tensor and level" in out and "updates" in out


def test_the_silicon_figure_names_shapes_without_overlap(tmp_path, monkeypatch):
    """validate's figure numbers the shapes off by more than 10% and names them in a key:
    no two of its texts (numbers, key, title, legend) overlap, and every number is in the
    key."""
    import matplotlib.figure

    from simulator.validate import main as validate_main

    seen = []
    original = matplotlib.figure.Figure.savefig

    def record(fig, fname, *args, **kwargs):
        result = original(fig, fname, *args, **kwargs)
        ax = fig.axes[0]
        seen.append((ax, _overlaps(fig, [ax.title, *ax.texts, *ax.get_legend().get_texts()])))
        return result

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", record)
    assert validate_main(["--plot", str(tmp_path / "v"), "-o", str(tmp_path / "v.txt")]) == 0
    ax, overlaps = seen[0]
    numbers = [t.get_text() for t in ax.texts if t.get_text().isdigit()]
    key = next(t.get_text() for t in ax.texts if "\n" in t.get_text())
    assert numbers and all(f"{n}  " in key for n in numbers)
    assert not overlaps, overlaps


@pytest.mark.parametrize("tool", ["compare", "roofline", "plot"])
@pytest.mark.parametrize("step", ["png", "pdf", "rename-png", "rename-pdf"])
def test_ctrl_c_at_every_step_of_a_figure_write(sweep, tmp_path, monkeypatch, capsys, tool, step):
    """Ctrl-C made to arrive deterministically while the PNG is drawn, while the PDF is
    drawn, or as either is renamed into place: the command says one line and exits 130,
    and the figure's PNG and PDF are both absent (never one without the other, never a
    temporary left)."""
    import os as os_module

    import matplotlib.figure

    from simulator.compare import main as compare_main
    from simulator.roofline import main as roofline_main
    from simulator.support import atomic

    original_save = matplotlib.figure.Figure.savefig
    original_replace = os_module.replace
    calls = {"save": 0, "replace": 0}

    def save(fig, fname, *args, **kwargs):
        calls["save"] += 1
        if (step, calls["save"]) in (("png", 1), ("pdf", 2)):
            raise KeyboardInterrupt
        return original_save(fig, fname, *args, **kwargs)

    def replace(src, dst):
        calls["replace"] += 1
        if (step, calls["replace"]) in (("rename-png", 1), ("rename-pdf", 2)):
            raise KeyboardInterrupt
        return original_replace(src, dst)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", save)
    monkeypatch.setattr(atomic.os, "replace", replace)
    out = tmp_path / "out"
    out.mkdir()
    stem = out / "fig"
    argv = {
        "compare": ["--cascades", "attention-1pass,attention-3pass", "--seq", "1K",
                    "--engine", "analytic", "--out", str(stem)],
        "roofline": ["--seqs", "1K,4K", "-o", str(stem)],
        "plot": [str(sweep), "--x", "seq", "-o", str(stem)],
    }[tool]  # fmt: skip
    main = {"compare": compare_main, "roofline": roofline_main, "plot": plot_main}[tool]
    assert main(argv) == 130
    assert capsys.readouterr().err.strip().endswith("no partial result file was left")
    assert sorted(p.name for p in out.iterdir()) == []


def _recorded_axes(monkeypatch) -> list:
    """The axes of each figure saved while the test runs."""
    import matplotlib.figure

    seen: list = []
    original = matplotlib.figure.Figure.savefig

    def record(fig, fname, *args, **kwargs):
        seen.append(fig.axes[0])
        return original(fig, fname, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", record)
    return seen


def test_columns_the_x_parameter_determines_are_no_lines(sweep, tmp_path, monkeypatch):
    """--x pe_dim: pe_dim_1d and the registers follow pe_dim; one line per (accel, seq),
    each across both pe_dims -- not a one-point line per pe_dim_1d."""
    seen = _recorded_axes(monkeypatch)
    assert (
        plot_main([str(sweep), "--x", "pe_dim", "--y", "util_2d", "-o", str(tmp_path / "f")]) == 0
    )
    drawn = seen[0].get_lines()
    assert len(drawn) == 2 * 3  # accel x seq
    assert all(len(line.get_xdata()) == 2 for line in drawn)
    assert not any("pe_dim_1d" in line.get_label() for line in drawn)


def test_by_refuses_to_join_points_of_another_parameter(sweep, tmp_path, capsys, monkeypatch):
    """--by accel while pe_dim varies too: each accel's line would zigzag between the two
    pe_dims at every seq. One line naming pe_dim and its values, nothing written; with
    --where pe_dim=64 the two accels' lines are drawn."""
    seen = _recorded_axes(monkeypatch)
    out = tmp_path / "f"
    assert plot_main([str(sweep), "--x", "seq", "--by", "accel", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "differ in pe_dim (64, 128)" in err and "--where" in err
    assert not list(tmp_path.iterdir())
    assert plot_main([str(sweep), "--x", "seq", "--by", "accel", "--where", "pe_dim=64",
                      "-o", str(out)]) == 0  # fmt: skip
    drawn = seen[0].get_lines()
    assert sorted(line.get_label() for line in drawn) == ["accel=binding", "accel=flat"]
    assert all(len(line.get_xdata()) == 3 for line in drawn)


def test_more_than_ten_lines_look_different(tmp_path, monkeypatch):
    """Twelve lines (a hand-written sweep): no two share colour, dash and marker."""
    seen = _recorded_axes(monkeypatch)
    sweep = tmp_path / "twelve.csv"
    rows = [f"{k},{x},{k * x}" for k in range(12) for x in (1, 2, 3)]
    sweep.write_text("k,x,latency_s\n" + "\n".join(rows) + "\n")
    assert plot_main([str(sweep), "--x", "x", "-o", str(tmp_path / "f")]) == 0
    drawn = seen[0].get_lines()
    looks = {(line.get_color(), line.get_linestyle(), line.get_marker()) for line in drawn}
    assert len(drawn) == 12 and len(looks) == 12


def test_compare_leaves_out_value_labels_that_would_overlap():
    """Twelve narrow bars side by side (three cascades, four strategies), each labelled as
    compare labels them: the labels that would overlap one shown are hidden, left to right,
    and no two shown ones overlap; one per run of equal neighbours at least stays."""
    from simulator.compare import SMALL_PT, _thin_out
    from simulator.support.figures import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(1.6, 3.0), layout="constrained")
    ax.set_yscale("log")
    heights = [6.8e6, 6.8e6, 6.8e6, 1e7, 6.8e3, 6.8e3, 1.3e7, 6.8e6, 6.8e6, 6.8e6, 6.8e6, 1e7]
    bars = ax.bar([i * 0.2 for i in range(12)], heights, 0.2)
    labels = ax.bar_label(bars, [f"{y:.2g}" for y in heights], fontsize=SMALL_PT, rotation=90)
    assert _overlaps(fig, labels)  # as drawn, they overlap
    _thin_out(fig, labels)
    shown = [t for t in labels if t.get_visible()]
    assert 1 < len(shown) < len(labels) and not _overlaps(fig, shown)
    plt.close(fig)
