"""Issue 7 acceptance: `python -m experiments` -- figures, result CSVs, report, atomic and
deterministic outputs. Published numbers below are the paper's (section VI) and the
artifact's CSVs (tests/data/reference)."""

from __future__ import annotations

import csv
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import matplotlib.colors
import matplotlib.pyplot as plt
import pytest

from experiments import endtoend, pareto, plots
from experiments.__main__ import main
from experiments.experiment import Context, Selection
from experiments.published import load_published
from experiments.run import RunOptions, run

from .conftest import ROOT
from .reference import CONFIGS, MODELS, SEQS, rows

FULL = Selection(("bert", "trxl", "t5", "xlm"), (1024, 4096, 16384, 65536, 262144, 1048576))
SUBSET = Selection(("bert",), (1024, 4096))
CONFIG_LABELS = ["Unfused", "FLAT", "+Cascade", "+Architecture", "+Binding"]


class FigureLog:
    """Records every figure the experiments save (and still saves it)."""

    def __init__(self) -> None:
        self.figures: dict[str, object] = {}

    def install(self, mp: pytest.MonkeyPatch) -> None:
        original = plots.save_figures

        def save(fig, stem):
            self.figures[Path(stem).name] = _describe(fig)
            return original(fig, stem)

        mp.setattr(plots, "save_figures", save)


def _describe(fig) -> dict:
    """What a bar chart shows: bars per colour, x tick labels, annotations, legend entries."""
    ax = fig.axes[0]
    bars: dict[str, int] = {}
    for patch in ax.patches:
        colour = matplotlib.colors.to_hex(patch.get_facecolor(), keep_alpha=False)
        bars[colour] = bars.get(colour, 0) + 1
    legend = ax.get_legend()
    return {
        "bars": bars,
        "ticks": [t.get_text() for t in ax.get_xticklabels()],
        "annotations": [t.get_text() for t in ax.texts],
        "legend": [t.get_text() for t in legend.get_texts()] if legend else [],
    }


def _options(out: Path, selection: Selection, experiments, jobs: int = 2) -> RunOptions:
    return RunOptions(out, selection, tuple(experiments), jobs=jobs, progress=False)


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """The attention experiment over all 24 points (what the paper's means are over); in
    one process, so the figures this process logs are the ones drawn (a pool's workers
    draw them otherwise)."""
    out = tmp_path_factory.mktemp("full")
    log = FigureLog()
    with pytest.MonkeyPatch.context() as mp:
        log.install(mp)
        summary = run(_options(out, FULL, ["attention", "cascades"], jobs=1))
    return out, summary, log


def test_figures_show_five_configurations_for_four_models_and_six_lengths(full_run):
    out, _, log = full_run
    for name in ("fig6a", "fig6b", "fig8", "fig9"):
        for suffix in (".pdf", ".png"):
            assert (out / f"{name}{suffix}").stat().st_size > 1000, name
        fig = log.figures[name]
        # one bar per configuration and point, in the paper's colours and order
        assert fig["bars"] == {c: 24 for c in plots.CONFIG_COLOURS}, (name, fig["bars"])
        assert fig["ticks"] == [s for _ in MODELS for s in SEQS]
        assert fig["annotations"] == list(MODELS)
        assert [t for t in fig["legend"] if t.rstrip(":") != "FuseMax"] == CONFIG_LABELS
    fig7 = log.figures["fig7"]
    assert fig7["ticks"] == ["FL", "+C", "+A", "+B"] * 6
    assert fig7["annotations"][:-1] == list(SEQS)
    # the short labels spelled out (the figure reads without its caption)
    assert fig7["annotations"][-1].splitlines() == [
        "FL: FLAT", "+C: +Cascade", "+A: +Architecture", "+B: +Binding"
    ]  # fmt: skip
    assert fig7["legend"] == ["QK", "LM", "SLN", "SLD", "SLNV/AV"]
    assert (out / "fig7.png").is_file() and (out / "fig7.pdf").is_file()


def _headline(report: str, label: str) -> float:
    match = re.search(rf"\| {re.escape(label)} \| ([0-9.]+)(x|%) \|", report)
    assert match, label
    value = float(match.group(1))
    return value if match.group(2) == "x" else value / 100


def test_report_headline_means_match_the_paper(full_run):
    out, _, _ = full_run
    report = (out / "report.md").read_text()
    # Paper, section VI: FuseMax 6.7x / 10.1x faster than FLAT / unfused, 79% / 77% energy.
    assert f"{_headline(report, 'speedup of FuseMax over FLAT (fig 8)'):.2g}" == "6.7"
    assert f"{_headline(report, 'speedup of FuseMax over Unfused (fig 8)'):.3g}" == "10.1"
    assert f"{_headline(report, 'energy of FuseMax / FLAT (fig 9)'):.2g}" == "0.79"
    assert f"{_headline(report, 'energy of FuseMax / Unfused (fig 9)'):.2g}" == "0.77"
    # every attention point within the earlier issues' tolerances, every bar reported
    assert "| NO |" not in report and "NO |" not in report
    for figure in ("fig6a", "fig6b", "fig7", "fig8", "fig9"):
        assert f"(`{figure}`)" in report
    assert report.count("Worst point:") == 5
    assert "analytic" in report and "published" in report and "corrected" in report
    # pending experiments are said to be pending, not silently missing
    assert "cascade" in report and "DIFFERS" not in report


def test_result_csvs_have_the_reference_columns_and_values(full_run):
    out, _, _ = full_run
    for config in CONFIGS:
        with open(out / "results" / f"attn-{config}.csv", newline="") as handle:
            ours = list(csv.DictReader(handle))
        reference = rows(f"attn-{config}")
        ref_columns = [c for c in reference[0] if c]  # unfused's header ends with a comma
        assert list(ours[0])[: len(ref_columns)] == ref_columns, config
        assert [(r["model"], r["seq_len"]) for r in ours] == [
            (r["model"], r["seq_len"]) for r in reference
        ]
        for mine, theirs in zip(ours, reference, strict=True):
            assert float(mine["latency"]) == pytest.approx(float(theirs["latency"]), rel=0.05)


def _files(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


@pytest.fixture(scope="module")
def subset_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("subset")
    run(_options(out, SUBSET, ["attention", "waterfall", "cascades"], jobs=2))
    return out


def test_two_runs_give_identical_csv_bytes(subset_run, tmp_path):
    # the second run without a process pool: order of completion must not matter
    run(_options(tmp_path, SUBSET, ["attention", "waterfall", "cascades"], jobs=1))
    first, second = _files(subset_run), _files(tmp_path)
    csvs = [name for name in first if name.endswith(".csv")]
    assert len(csvs) == 7
    assert set(first) == set(second)
    for name in csvs:
        assert first[name] == second[name], name


def _start(out: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "experiments", "--models", "bert", "--seqs", "1K,4K"]
    cmd += ["--only", "attention,waterfall,cascades", "--no-progress", "--out", str(out)]
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group: the pool's workers die with it
    )


def _kill_at_first_file(out: Path, sig: int) -> subprocess.Popen:
    proc = _start(out)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if out.is_dir() and any(p.is_file() for p in out.rglob("*")):
            os.killpg(proc.pid, sig)
            break
        time.sleep(0.001)
    proc.wait(timeout=60)
    return proc


def test_killed_run_leaves_no_partial_result_file(subset_run, tmp_path):
    complete = _files(subset_run)
    out = tmp_path / "out"
    proc = _kill_at_first_file(out, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert not (out / "report.md").exists()
    visible = {k: v for k, v in _files(out).items() if not Path(k).name.startswith(".")}
    for name, data in visible.items():
        assert data == complete[name], f"{name} is partial"
    # a re-run into the same folder clears what the killed one left and completes
    run(_options(out, SUBSET, ["attention", "waterfall", "cascades"]))
    assert _files(out) == complete


def test_terminated_run_removes_its_temporaries(tmp_path):
    out = tmp_path / "out"
    proc = _kill_at_first_file(out, signal.SIGTERM)
    assert proc.returncode == 130, proc.stderr.read().decode() if proc.stderr else ""
    leftovers = [p.name for p in out.rglob("*") if p.is_file() and ".partial-" in p.name]
    assert leftovers == []
    assert not (out / "report.md").exists()


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--models", "gpt"], "unknown model 'gpt'"),
        (["--only", "fig99"], "unknown experiment 'fig99'"),
        (["--seqs", "banana"], "--seqs"),
    ],
)
def test_bad_arguments_are_one_line_errors(run_cli, tmp_path, argv, needle):
    code, out, err = run_cli(main, [*argv, "--out", str(tmp_path / "o")])
    assert code == 2
    assert needle in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


# ------------------------------------------- figures 10-12 against the reference's shapes


@pytest.fixture
def ctx(tmp_path):
    return Context(tmp_path, FULL, load_published(), compare=True)


def test_end_to_end_figures_and_means_from_reference_shaped_rows(ctx):
    """Figures 10/11 and their report from rows in the reference's shape: here the published
    rows themselves, so the paper's means must come out (attention + the chip's linear
    layers, per configuration)."""
    totals = endtoend.published_totals(ctx.published)
    labels = dict(zip(CONFIGS, CONFIG_LABELS, strict=True))
    log = FigureLog()
    with pytest.MonkeyPatch.context() as mp:
        log.install(mp)
        paths = endtoend.draw(totals, totals, labels, ctx.out, compare=True)
    assert sorted(p.name for p in paths) == sorted(
        f"fig1{i}.{s}" for i in (0, 1) for s in ("pdf", "png")
    )
    for name in ("fig10", "fig11"):
        assert log.figures[name]["bars"] == {c: 24 for c in plots.CONFIG_COLOURS}
    means = endtoend.headline_means(totals)
    # Paper: 5.3x / 7.6x faster end to end (7.5x / 10.1x at 1M), 83% / 82% of the energy.
    assert f"{means['end2end_speedup_vs_flat']:.2g}" == "5.3"
    assert f"{means['end2end_speedup_vs_unfused']:.2g}" == "7.6"
    assert f"{means['end2end_speedup_vs_flat_at_1M']:.2g}" == "7.5"
    assert f"{means['end2end_speedup_vs_unfused_at_1M']:.3g}" == "10.1"
    assert f"{means['end2end_energy_vs_flat']:.2g}" == "0.83"
    assert f"{means['end2end_energy_vs_unfused']:.2g}" == "0.82"
    text = endtoend.render(totals, totals, labels, full=True)
    assert "| NO |" not in text and text.count("Worst point:") == 2


def test_pareto_figure_from_reference_shaped_rows(ctx):
    published = ctx.published.rows("pareto")
    paths = pareto.draw(published, ctx.published, ctx.out, compare=True)
    assert {p.name for p in paths} == {"fig12.pdf", "fig12.png"}
    curves = pareto.curves(published)
    assert sorted(curves) == sorted(MODELS) and all(len(v) == 6 for v in curves.values())
    # areas in cm^2 as in the paper's axis (0.05 .. 50)
    assert 0.01 < min(a for v in curves.values() for a, _ in v) < 0.1
    assert "Worst point" in pareto.render(published, ctx.published)
    plt.close("all")


# ------------------------------------------------ selections, interrupts, end-to-end rows


def test_published_means_cover_the_same_points_as_ours(ctx):
    """On a subset, the 'published data' column is the artifact's means over that subset:
    fed the published rows of two BERT points as ours, both columns agree."""
    totals = endtoend.published_totals(ctx.published)
    subset = {
        c: {p: q for p, q in v.items() if p in {("BERT", "1K"), ("BERT", "4K")}}
        for c, v in totals.items()
    }
    labels = dict(zip(CONFIGS, CONFIG_LABELS, strict=True))
    text = endtoend.render(subset, totals, labels, full=False)
    line = next(ln for ln in text.splitlines() if ln.startswith("| speedup of FuseMax over FLAT"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1] == cells[2] != "5.30x"  # ours == published over BERT 1K, 4K
    at_1m = next(ln for ln in text.splitlines() if "FLAT at 1M tokens" in ln)
    assert [c.strip() for c in at_1m.strip("|").split("|")][2] == "-"


def test_only_the_papers_points_count_as_a_full_run():
    assert FULL.is_full
    other = Selection(FULL.models, (512, 2048, 8192, 32768, 131072, 524288))
    assert not other.is_full
    assert not Selection(("bert", "bert", "t5", "xlm"), FULL.seqs).is_full


def test_an_interrupted_run_leaves_no_report(tmp_path, monkeypatch):
    """report.md from an earlier run goes when a new run starts: its presence always means
    the run that wrote the folder's results finished."""
    out = tmp_path / "out"
    run(_options(out, SUBSET, ["cascades"], jobs=1))
    assert (out / "report.md").exists()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("experiments.run.compute_rows", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(_options(out, SUBSET, ["cascades"], jobs=1))
    assert not (out / "report.md").exists()


def test_an_interrupt_while_drawing_amid_the_computation_stops_cleanly(tmp_path, monkeypatch):
    """An experiment's figures are drawn as soon as its rows are in, while the workers
    compute the other experiments' points: an interrupt then ends the workers at once and
    leaves neither a partial file nor a report."""
    import dataclasses
    import multiprocessing

    import experiments.run as runner

    real = runner.by_name

    def interrupted(rows, ctx):
        raise KeyboardInterrupt

    def patched(name):
        e = real(name)
        return dataclasses.replace(e, figures=interrupted) if name == "waterfall" else e

    monkeypatch.setattr(runner, "by_name", patched)
    out = tmp_path / "out"
    before = set(multiprocessing.active_children())
    with pytest.raises(KeyboardInterrupt):
        run(_options(out, SUBSET, ["attention", "waterfall", "cascades", "bounds"], jobs=2))
    assert set(multiprocessing.active_children()) - before == set()  # the workers ended
    assert not (out / "report.md").exists()
    assert [p.name for p in out.rglob("*") if ".partial-" in p.name] == []


_ABANDON = """
import os
import time
from concurrent.futures import ProcessPoolExecutor

from simulator.support.cli import abandon, worker_process


def nap(seconds):
    time.sleep(seconds)
    return seconds


if __name__ == "__main__":
    pool = ProcessPoolExecutor(max_workers=2, initializer=worker_process, initargs=(os.getpid(),))
    futures = [pool.submit(nap, 60) for _ in range(4)]
    deadline = time.monotonic() + 30
    while len(pool._processes) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)  # both workers started (and busy with a 60 s task)
    processes = list(pool._processes.values())
    assert len(processes) == 2
    start = time.perf_counter()
    abandon(pool)
    took = time.perf_counter() - start
    while any(p.is_alive() for p in processes) and time.monotonic() < deadline + 10:
        time.sleep(0.05)  # on a loaded machine the end can take a moment to be seen
    alive = sum(p.is_alive() for p in processes)
    finished = sum(f.done() and not f.cancelled() and f.exception() is None for f in futures)
    print(took, alive, finished)
"""


def test_abandoning_the_pool_ends_busy_workers_at_once(tmp_path):
    """In a process of its own (a pool's forked workers and their signals stay out of the
    test runner's, which may itself be a worker of pytest-xdist)."""
    script = tmp_path / "abandon.py"
    script.write_text(_ABANDON)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env
    )
    assert out.returncode == 0, out.stderr
    took, alive, finished = out.stdout.split()
    assert float(took) < 10  # not the 60 s the tasks would take
    assert int(alive) == 0 and int(finished) == 0


def test_end_to_end_csvs_reproduce_the_artifacts_linear_layers(tmp_path):
    """The end2end experiment itself: its end2end-{flat,proposal}.csv (the linear layers
    under the artifact's constraints) within 3% of the published files (issue 6), and its
    report says so."""
    out = tmp_path / "e2e"
    selection = Selection(("bert", "xlm"), (4096, 262144))
    run(_options(out, selection, ["end2end"], jobs=1))
    for name in ("end2end-flat", "end2end-proposal"):
        published = {(r["model"], r["seq_len"]): r for r in rows(name)}
        with open(out / "results" / f"{name}.csv", newline="") as handle:
            ours = list(csv.DictReader(handle))
        assert len(ours) == 4
        for r in ours:
            ref = published[(r["model"], r["seq_len"])]
            for column in ("traffic", "latency", "energy"):
                assert float(r[column]) == pytest.approx(float(ref[column]), rel=0.03), (
                    name,
                    r["model"],
                    r["seq_len"],
                    column,
                )
    report = (out / "report.md").read_text()
    assert "Linear layers against the artifact's `end2end-*.csv`" in report


def test_points_that_share_work_go_to_the_same_tasks():
    from experiments.run import tasks_of

    points = [(c, m) for c in "abc" for m in (1, 2)]  # config-major, as the experiments list
    assert tasks_of(points, 4) == [[0, 1, 2, 3], [4, 5]]
    by_model = tasks_of(points, 3, share=lambda p: p[1])
    assert by_model == [[0, 2, 4], [1, 3, 5]]
    assert {points[i][1] for i in by_model[0]} == {1}
    assert tasks_of(points, 2, share=lambda p: p[1]) == [[0, 2], [4], [1, 3], [5]]
    assert sorted(i for task in by_model for i in task) == list(range(len(points)))


def test_rows_come_back_in_the_order_of_the_points_whatever_the_tasks(monkeypatch):
    """Tasks grouped by a share key hold points out of their order (every other point): the
    rows are still in point order, and `finished` gets them once every task is in."""
    from experiments import run as runner
    from experiments.experiment import Experiment

    points = [(c, m) for c in "xyz" for m in range(4)]
    experiment = Experiment(
        "toy", "toy", lambda sel: points, _toy_row, share=lambda p: p[1] % 2, chunk=2
    )
    monkeypatch.setattr(runner, "by_name", lambda name: experiment)
    got = {}
    rows = runner.compute_rows(
        [experiment], SUBSET, jobs=1, progress=False, finished=lambda n, r: got.setdefault(n, r)
    )
    assert rows["toy"] == [_toy_row(None, p) for p in points]
    assert got["toy"] == rows["toy"]


def _toy_row(_specs, point):
    return f"{point[0]}{point[1]}"
