"""The last mile for users (issue 28): interrupts, benchmarks' verdict, outputs, messages."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.bench import verdict
from simulator.support.errors import SpecError


def test_bench_verdict_fails_over_target():
    """`make bench` prints every row, then names those over their target and exits 1."""
    text, code = verdict([("fast", 0.5, 1.0), ("slow", 39.0, 30.0), ("also slow", 2.6, 2.0)])
    assert code == 1
    assert text.splitlines()[1].startswith("fast") and "0.50" in text.splitlines()[1]
    assert text.splitlines()[-1] == "over target: slow (1.30x); also slow (1.30x)"
    text, code = verdict([("fast", 0.5, 1.0), ("exact", 1.0, 1.0)])
    assert code == 0 and text.splitlines()[-1] == "every benchmark within its target"
    text, code = verdict([("suite", float("inf"), 180.0)])  # a failing test suite has no time
    assert code == 1 and text.splitlines()[-1] == "over target: suite (failed)"


ENTRY_POINTS = {
    "run": ["-m", "simulator.run", "--model", "bert", "--seq", "1M", "--engine", "cycle"],
    "sweep": ["-m", "simulator.sweep", "--grid", "pe_dim=64,128,256", "model=bert,xlm,t5,trxl",
              "seq=1K,4K,16K,64K", "--engine", "cycle", "--jobs", "2", "--out", "OUT/s.csv"],
    "compare": ["-m", "simulator.compare", "--cascades", "attention-1pass,attention-3pass",
                "--seq", "4K", "--out", "OUT/cmp"],
    "rewrite": ["-m", "simulator.cascade", "rewrite", "attention-3pass", "--target-passes", "1",
                "-o", "OUT/a1.yaml"],
    "validate": ["-m", "simulator.validate", "--out", "OUT/v.txt"],
    "trace": ["-m", "simulator.trace", "--seq", "64K", "--epochs", "200", "--out", "OUT/t.png"],
    "roofline": ["-m", "simulator.roofline", "--seqs", "1K..1M", "-o", "OUT/r"],
    "export": ["-m", "simulator.export", "timeloop", "--accel", "binding", "--seq", "4K", "-o",
               "OUT/tl"],
    "bind": ["-m", "simulator.bind", "attention-1pass", "--strategy", "fused", "-o",
             "OUT/m.yaml"],
}  # fmt: skip


INTERRUPTED_LINE = "interrupted: no partial result file was left\n"


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt(args: list[str], out: Path, delay: float) -> tuple[int | None, str, list[str]]:
    """Start an entry point in its own process group, Ctrl-C the group after `delay`."""
    cmd = [sys.executable, *[a.replace("OUT", str(out)) for a in args]]
    p = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # Ctrl-C as a terminal delivers it: a suite started in the background (a shell
        # without job control) would hand its children SIGINT ignored, and nothing to test
        preexec_fn=_sigint_default,
    )
    time.sleep(delay)
    if p.poll() is not None:
        return None, "", []  # finished first: nothing to interrupt
    os.killpg(p.pid, signal.SIGINT)
    _out, err = p.communicate(timeout=60)
    return p.returncode, err, sorted(x.name for x in out.iterdir())


@pytest.mark.parametrize(
    "name, delay",
    [(name, 0.25) for name in sorted(ENTRY_POINTS)]
    + [(name, 2.0) for name in ("compare", "rewrite", "sweep", "validate")],
)
def test_ctrl_c_is_one_line_and_130(tmp_path, name, delay):
    """Ctrl-C while the modules load (0.25 s) or while working (2 s): one line, exit 130,
    no result file (a sweep keeps its journal, for --resume)."""
    rc, err, files = _interrupt(ENTRY_POINTS[name], tmp_path, delay)
    if rc is None or rc == 0:
        # finished first (or its work was done, tearing down, when the signal came): its
        # files complete -- a figure's PNG and PDF together
        assert _pairs_complete(files), files
        pytest.skip(f"{name} finished within {delay} s")
    assert (rc, err) == (130, "interrupted: no partial result file was left\n")
    assert all(f.endswith(".journal") or f == "tl" for f in files), files


def _pairs_complete(files: list[str]) -> bool:
    stems = {f.rsplit(".", 1)[0] for f in files if f.endswith((".png", ".pdf"))}
    return all(f"{s}.png" in files and f"{s}.pdf" in files for s in stems)


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    "args, wrote",
    [
        (["-m", "simulator.compare", "--cascades", "attention-1pass", "--seq", "1K",
          "--strategies", "unfused", "--engine", "analytic", "--out", "OUT"],
         ["compare.pdf", "compare.png"]),
        (["-m", "simulator.sweep", "--grid", "seq=1K", "accel=unfused", "--engine", "analytic",
          "--out", "OUT"],
         ["sweep.csv"]),
        (["-m", "simulator.cascade", "rewrite", "softmax", "-o", "OUT"],
         ["softmax-rewritten.yaml"]),
    ],
)  # fmt: skip
def test_an_existing_folder_as_out_writes_inside_it(tmp_path, args, wrote):
    out = tmp_path / "results"
    out.mkdir()
    r = _run([a.replace("OUT", str(out)) for a in args], tmp_path)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == wrote


@pytest.mark.parametrize(
    "args",
    [
        ["-m", "simulator.compare", "--cascades", "attention-1pass", "--seq", "1K", "--out",
         "MISSING/cmp"],
        ["-m", "simulator.sweep", "--grid", "seq=1K", "--out", "MISSING/x.csv"],
        ["-m", "simulator.cascade", "rewrite", "attention-3pass", "-o", "MISSING/x.yaml"],
        ["-m", "simulator.validate", "--out", "MISSING/v.txt"],
    ],
)  # fmt: skip
def test_a_missing_folder_is_one_line_and_nothing_created(tmp_path, args):
    missing = tmp_path / "no" / "such"
    r = _run([a.replace("MISSING", str(missing)) for a in args], tmp_path)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "does not exist" in r.stderr, r.stderr
    assert not (tmp_path / "no").exists()


LONG_SWEEP = [
    "-m", "simulator.sweep", "--grid", "pe_dim=32,64,128,256", "model=bert,xlm,t5,trxl",
    "seq=1K,4K,16K,64K,256K", "--engine", "cycle", "--jobs", "1", "--no-progress",
]  # fmt: skip


def test_two_sweeps_never_share_an_out(tmp_path):
    """A running sweep holds its --out: a second one (with --resume too) is one line naming
    the holder's PID, and changes nothing; once the first ends, the out is free again."""
    from simulator.support.journal import lock_path
    from simulator.sweep import main as sweep_main

    out = tmp_path / "s.csv"
    first = subprocess.Popen(
        [sys.executable, *LONG_SWEEP, "--out", str(out)], stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while not lock_path(out).exists() or not lock_path(out).read_text().strip():
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.05)
        for extra in ([], ["--resume"]):
            r = _run([*LONG_SWEEP, "--out", str(out), *extra], tmp_path)
            assert r.returncode == 2
            assert r.stderr == (
                f"error: {out} is being written by a running sweep (PID {first.pid}): wait "
                "for it to end, or give another --out\n"
            )
    finally:
        first.kill()
        first.wait()
    # killed: the kernel released the lock; the journal stays for --resume
    assert sweep_main(["--grid", "seq=1K", "--engine", "analytic", "--no-progress",
                       "--out", str(tmp_path / "t.csv")]) == 0  # fmt: skip
    assert not lock_path(tmp_path / "t.csv").exists()


def test_a_comment_in_the_sweep_file_does_not_refuse_a_resume(tmp_path):
    from simulator.sweep import _parameters_digest, _specs_digest, build_parser, sweep_spec
    from simulator.timing.options import TimingOptions

    text = "sweep:\n  grid:\n    model: [bert]\n    seq: [1K, 4K]\n"
    digests = []
    for body in (text, "# a comment added\n" + text.replace("[bert]", "[bert]   # BERT")):
        path = tmp_path / "s.yaml"
        path.write_text(body)
        args = build_parser().parse_args(["--spec", str(path)])
        spec = sweep_spec(args)
        extra = (None, None, TimingOptions(), {})
        digests.append((_specs_digest(None, None, spec), _parameters_digest(spec, extra)))
    assert digests[0] == digests[1]


def test_a_killed_sweep_leaves_no_worker(tmp_path):
    """kill -9 of a sweep with two workers: both workers end with it."""
    p = subprocess.Popen(
        [sys.executable, *LONG_SWEEP[:-3], "--jobs", "2", "--no-progress",
         "--out", str(tmp_path / "s.csv")],
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    workers: list[int] = []
    while len(workers) < 2:
        assert time.monotonic() < deadline and p.poll() is None
        time.sleep(0.1)
        workers = _children(p.pid)
    p.kill()
    p.wait()
    deadline = time.monotonic() + 10
    while any(_alive(w) for w in workers):
        assert time.monotonic() < deadline, f"workers still running: {workers}"
        time.sleep(0.1)


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize(
    "module, args, message",
    [
        ("run", ["--model", "", "--seq", "1K"], "--model is empty"),
        ("run", ["--seq", "-4K"], "--seq: '-4K' is not a count"),
        ("run", ["--seq", "1K", "--mapping", "FOLDER"], "a folder, not a spec file"),
        ("cascade", ["passes", "/dev/null"], "/dev/null: a device or pipe, not a spec file"),
        ("cascade", ["passes", "FOLDER"], "a folder, not a spec file"),
        # +Cascade names no strategy for a point its tiles do not divide (+Binding's pads)
        ("run", ["--seq", "1K", "--pe-dim", "3", "--accel", "cascade"], "--pe-dim"),
    ],
)
def test_messages_say_what_is_wrong(tmp_path, capsys, module, args, message):
    from simulator.cascade.__main__ import main as cascade_main
    from simulator.run import main as run_main

    main = {"run": run_main, "cascade": cascade_main}[module]
    assert main([a.replace("FOLDER", str(tmp_path)) for a in args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_trace_says_it_draws_256_epochs_at_most(tmp_path, capsys):
    from simulator.trace import main as trace_main

    assert trace_main(["--seq", "256K", "--epochs", "100000000"]) == 0
    captured = capsys.readouterr()
    assert "--epochs 100000000: tracing the first 256" in captured.err
    assert "traced 256" in captured.out


def test_cascade_list_cuts_descriptions_at_words(capsys):
    from simulator.cascade.__main__ import main as cascade_main
    from simulator.cascade.parse import load_cascade

    from .conftest import CASCADES

    assert cascade_main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()[2:]
    described = {line.split()[0]: line.split(None, 3)[3] for line in lines if len(line.split()) > 3}
    assert described
    for name, shown in described.items():
        full = " ".join(load_cascade(CASCADES / f"{name}.yaml").description.split())
        if shown.endswith("..."):
            kept = shown[:-3]
            assert full.startswith(kept) and full[len(kept)] == " ", (name, shown)
        else:
            assert full.startswith(shown), (name, shown)


def _fonts(pdf: Path) -> set[str]:
    """The font subtypes a PDF embeds (its /Subtype names of font objects)."""
    import re

    data = pdf.read_bytes()
    return set(re.findall(rb"/Subtype\s*/(Type3|TrueType|Type1|CIDFontType2|CIDFontType0)", data))


def test_every_figure_is_legible_at_print_size(tmp_path, monkeypatch):
    """Every figure the experiments and the tools draw is at most 7 in wide (a two-column
    paper's text width) with no text under 7 pt -- legible where it prints, not only on a
    screen -- and its PDF embeds TrueType fonts, no Type 3 (conference checks reject
    them)."""
    import matplotlib.figure
    import matplotlib.text

    from experiments.__main__ import main as experiments_main
    from simulator.compare import main as compare_main
    from simulator.roofline import main as roofline_main
    from simulator.trace import main as trace_main
    from simulator.validate import main as validate_main

    seen: dict[str, tuple[float, float]] = {}
    original = matplotlib.figure.Figure.savefig

    def record(fig, fname, *args, **kwargs):
        sizes = [
            t.get_fontsize()
            for t in fig.findobj(matplotlib.text.Text)
            if t.get_visible() and t.get_text().strip()
        ]
        seen[Path(str(fname)).name] = (fig.get_figwidth(), min(sizes))
        return original(fig, fname, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", record)
    out = tmp_path / "exp"
    only = "attention,end2end,pareto,waterfall,bounds,silicon"
    assert experiments_main(["--out", str(out), "--only", only, "--models", "bert,xlm",
                             "--seqs", "1K,64K", "--jobs", "1", "--no-progress"]) == 0  # fmt: skip
    assert compare_main(["--cascades", "attention-1pass,attention-3pass", "--seq", "1K",
                         "--engine", "analytic", "--out", str(tmp_path / "cmp")]) == 0  # fmt: skip
    assert roofline_main(["--seqs", "1K,4K", "-o", str(tmp_path / "roof")]) == 0
    assert trace_main(["--seq", "4K", "--out", str(tmp_path / "trace.pdf")]) == 0
    from .test_silicon import _small_csv

    small = _small_csv(tmp_path)
    assert validate_main(["--measured", str(small), "--plot", str(tmp_path / "v")]) == 0
    assert len(seen) >= 16
    wide = {name: w for name, (w, _pt) in seen.items() if w > 7.0 + 1e-9}
    small_text = {name: pt for name, (_w, pt) in seen.items() if pt < 7}
    assert not wide and not small_text, (wide, small_text)
    pdfs = sorted(tmp_path.rglob("*.pdf"))
    assert len(pdfs) >= 12
    for pdf in pdfs:
        fonts = _fonts(pdf)
        assert fonts and b"Type3" not in fonts, (pdf.name, fonts)


def test_any_size_answers_within_seconds(tmp_path):
    """A point whose cycle simulation never reaches a steady state (minutes at 1K tokens
    with 256 heads of width 8) answers within seconds by default: the analytic engine's
    numbers for it, and a note saying so."""
    start = time.monotonic()
    r = _run(["-m", "simulator.run", "--seq", "1K", "--embed", "8", "--heads", "256",
              "--accel", "binding"], tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - start < 20
    assert "+Binding" in r.stdout
    assert "outruns the 2 s default budget" in r.stdout and "analytic engine's numbers" in r.stdout


def test_decode_sweep_rows_show_the_cache(tmp_path):
    from simulator.sweep import main as sweep_main

    out = tmp_path / "d.csv"
    grid = ["model=llama3-8b", "phase=decode", "context=4K,32K"]
    assert (
        sweep_main(["--grid", *grid, "--engine", "analytic", "--no-progress", "--out", str(out)])
        == 0
    )
    import csv as _csv

    rows = list(_csv.DictReader(out.read_text().splitlines()))
    assert [(r["seq"], r["context"]) for r in rows] == [("4096", "4096"), ("32768", "32768")]


def test_roofline_leaves_out_what_cannot_run(tmp_path, capsys):
    """The default set at lengths FLAT's buffer cannot hold: FLAT is left out with a note,
    as simulator.run does; named with --accel, it is an error."""
    from simulator.roofline import main as roofline_main

    assert roofline_main(["--seqs", "1K,64M", "--engine", "analytic", "-o",
                          str(tmp_path / "r")]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "note: flat left out at 64M" in out and "+Binding" in out
    assert roofline_main(["--seqs", "64M", "--accel", "flat", "-o", str(tmp_path / "r")]) == 2


def test_report_and_specs_speak_of_the_project_only():
    """No tracker issue numbers and no file outside the repository in what users read:
    the report's text (written by experiments/*.py) and the specs' comments."""
    from .conftest import ROOT

    files = [*ROOT.glob("experiments/*.py")]
    for folder in ("arch", "mappings", "cascades"):
        files += [*(ROOT / folder).rglob("*.yaml"), *(ROOT / folder).rglob("*.md")]
    pattern = re.compile(r"\bissues? \d+|fusemax-reference", re.I)
    hits = [f"{f.relative_to(ROOT)}: {m.group(0)}" for f in files for m in
            pattern.finditer(f.read_text())]  # fmt: skip
    assert not hits, hits


def test_experiments_check_their_out_folder_before_any_work(tmp_path):
    """An existing file as --out, or a folder whose parent is missing: one line, exit 2, in
    well under the seconds the experiments take, nothing written."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    for out, says in ((afile, "a file, not a folder"), (tmp_path / "no" / "x", "does not exist")):
        started = time.perf_counter()
        p = _run(["-m", "experiments", "--out", str(out)], Path(__file__).resolve().parent.parent)
        assert p.returncode == 2 and says in p.stderr and len(p.stderr.splitlines()) == 1
        assert time.perf_counter() - started < 10
    assert afile.read_text() == "x" and not (tmp_path / "no").exists()


def test_a_huge_sweep_says_its_size_and_asks_for_yes(tmp_path, run_cli):
    """A grid of 200,000 points: refused in one line, before any work, saying its size and
    that --yes runs it; nothing written."""
    from simulator.sweep import main as sweep_main

    ten = ",".join(str(2**i) for i in range(4, 14))
    out = tmp_path / "s.csv"
    argv = ["--grid", f"pe_dim={ten}", f"seq={ten}", f"pe_dim_1d={ten}", "model=bert,xlm"]
    argv += [f"register_words_1d={ten}", f"register_words_2d={ten}", "--out", str(out)]
    code, printed, err = run_cli(sweep_main, argv)
    assert code == 2 and printed == "" and len(err.strip().splitlines()) == 1, err
    assert "200,000 points" in err and "--yes" in err
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_grid_is_streamed_never_a_list():
    """A grid of 10^12 points: its first points come at once, the chunks are read a window
    at a time from the stream (an endless stream still gives its first chunks), and the
    checks before any work look only as far as the first point that binds."""
    import itertools

    from simulator.drivers.configs import Specs
    from simulator.drivers.design_space import Point, check, points
    from simulator.spec.sweep_file import SweepSpec
    from simulator.sweep import chunked

    values = tuple(16 * (i + 1) for i in range(10_000))
    spec = SweepSpec("grid").with_grid(
        (("pe_dim", values), ("buffer_bytes", values), ("pe_dim_1d", values[:10_000]))
    )
    first = list(itertools.islice(points(spec), 3))  # (a list of 10^12 points never comes)
    check(spec, Specs())
    assert [p.index for p in first] == [0, 1, 2]
    assert first[1].get("pe_dim_1d") == 32 and first[1].get("pe_dim") == 16

    endless = (Point(i, (("pe_dim", 16),)) for i in itertools.count())
    chunks = list(itertools.islice(chunked(endless, jobs=2, window=16), 8))
    assert [c[0].index for c in chunks] == [0, 1, 2, 3, 4, 5, 6, 7]
    assert [p.index for p in chunks[0]] == [0, 8] and [p.index for p in chunks[7]] == [7, 15]


def test_sweep_rows_go_out_in_grid_order_as_soon_as_those_before_are_in():
    """Rows finish out of order (workers, resumed rows from the journal); each is written
    when every row before it is: the CSV is in grid order and nothing waits longer."""
    from simulator.sweep import Sink

    emitted: list[int] = []
    ticks: list[int] = []
    sink = Sink(None, ticks.append, lambda row: emitted.append(row["i"]), {1: {"i": 1}})
    assert emitted == []
    sink.finished([(3, {"i": 3}), (4, {"i": 4, "error": "no mapping fits"})])
    assert emitted == []  # 0 and 2 not in yet
    sink.finished([(0, {"i": 0})])
    assert emitted == [0, 1]
    sink.finished([(2, {"i": 2})])
    assert emitted == [0, 1, 2, 3, 4] and sink.written == 5 and sink.failed == 1
    assert ticks == [2, 1, 1] and sink.waiting == {}


def test_ctrl_c_inside_an_extension_import_is_still_an_interrupt(run_cli):
    """Ctrl-C landing inside a C extension's first import surfaces as an ImportError whose
    cause is the KeyboardInterrupt: still one line and exit 130, not a traceback; any other
    ImportError is not taken for one."""
    from simulator.support.cli import EXIT_INTERRUPTED, INTERRUPTED, guarded

    @guarded
    def imports_interrupted(argv):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as interrupt:
            raise ImportError("initialization failed") from interrupt

    @guarded
    def imports_broken(argv):
        raise ImportError("no module named nothing")

    code, printed, err = run_cli(imports_interrupted, [])
    assert (code, printed, err) == (EXIT_INTERRUPTED, "", INTERRUPTED + "\n")
    with pytest.raises(ImportError, match="nothing"):
        run_cli(imports_broken, [])


HOOKED = """
import sys
from simulator.support.interrupts import install_interrupt_hook
install_interrupt_hook()
class Named:
    def __set_name__(self, owner, name):
        if sys.argv[1] == "interrupt":
            raise KeyboardInterrupt
        raise ValueError("a broken descriptor")
class Built:
    field = Named()
"""


@pytest.mark.parametrize("how", ["interrupt", "broken"])
def test_ctrl_c_while_a_class_is_built_at_import_is_an_interrupt(tmp_path, how):
    """Ctrl-C landing in a class's `__set_name__` while a module is imported (lark's
    grammar classes, before `main` runs) surfaces as "RuntimeError: Error calling
    __set_name__" caused by the KeyboardInterrupt: the hook still ends it with one line and
    exit 130; the same error with another cause is still a traceback."""
    script = tmp_path / "hooked.py"
    script.write_text(HOOKED)
    done = _run([str(script), how], Path.cwd())
    if how == "interrupt":
        assert (done.returncode, done.stderr) == (130, INTERRUPTED_LINE)
    else:
        assert done.returncode == 1 and "a broken descriptor" in done.stderr


def _out_commands(tmp_path: Path) -> dict[str, tuple]:
    """Each command that writes one text file with --out/-o: its main and arguments."""
    from simulator.bind.__main__ import main as bind_main
    from simulator.cascade_cli import main as cascade_main
    from simulator.sweep import main as sweep_main
    from simulator.validate import main as validate_main
    from tests.test_silicon import _small_csv

    small = _small_csv(tmp_path)
    return {
        "sweep": (sweep_main, ["--grid", "seq=1K", "accel=unfused", "--engine", "analytic",
                               "--jobs", "1", "--no-progress", "--out"], "accel,"),
        "bind": (bind_main, ["attention-1pass", "--seq", "1K", "--rule", "--out"], "# Generated"),
        "validate": (validate_main, ["--measured", str(small), "--format", "csv", "--out"],
                     "shape,kind,"),
        "rewrite": (cascade_main, ["rewrite", "softmax", "-o"], "# Rewritten"),
    }  # fmt: skip


@pytest.mark.parametrize("name", ["sweep", "bind", "validate", "rewrite"])
def test_out_never_replaces_a_link_or_a_fifo(tmp_path, capsys, name):
    """--out through a symbolic link writes its target (the link stays a link); into a FIFO
    writes through the FIFO (it stays a FIFO, its reader gets the output); nothing else is
    left beside them."""
    main, args, start = _out_commands(tmp_path)[name]
    folder = tmp_path / "out"
    folder.mkdir()
    target = folder / "target.txt"
    target.write_text("old\n")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    assert main([*args, str(link)]) == 0, capsys.readouterr().err
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text().startswith(start)
    assert sorted(p.name for p in folder.iterdir()) == ["target.txt"]

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader: writing does not wait
    try:
        assert main([*args, str(fifo)]) == 0, capsys.readouterr().err
        assert fifo.is_fifo()
        assert os.read(reader, 1 << 16).decode().startswith(start)
    finally:
        os.close(reader)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


@pytest.mark.parametrize("command", ["compare", "rewrite"])
@pytest.mark.parametrize("problem", ["missing", "negative bandwidth"])
def test_a_bad_architecture_is_one_line_and_exit_2(tmp_path, capsys, command, problem):
    """A missing or invalid --arch stops the command in one line, exit 2 -- not a "not
    bound" line per strategy (compare) or "the input is returned" (rewrite), exit 0."""
    from simulator.cascade_cli import main as cascade_main
    from simulator.compare import main as compare_main

    arch = tmp_path / "chip.yaml"
    if problem == "missing":
        message = f"--arch {arch}: no such file"
    else:
        text = (Path(__file__).parent.parent / "arch" / "h100.yaml").read_text()
        arch.write_text(text.replace("bandwidth_bytes_per_s: 3.35e12", "bandwidth_bytes_per_s: -1"))
        message = "chip.yaml:29:5: attribute 'bandwidth_bytes_per_s' of 'HBM' must be positive"
    if command == "compare":
        code = compare_main(["--cascades", "attention-1pass", "--seq", "4K", "--engine",
                             "analytic", "--arch", str(arch)])  # fmt: skip
    else:
        code = cascade_main(["rewrite", "softmax", "--arch", str(arch)])
    out, err = capsys.readouterr()
    assert code == 2
    assert err.count("\n") == 1 and message in err, err
    assert out == ""


def test_a_table_for_renamed_arrays_names_what_is_missing(tmp_path, capsys):
    """FuseMax copied with its tables and its 2D array renamed: the table prices PE2D's
    units, which the architecture no longer has. One line naming the table's component and
    the architecture's real ones -- no "(known: ...)" listing nothing."""
    from simulator.run import main as run_main
    from simulator.spec.expr import evaluate

    root = Path(__file__).parent.parent
    shutil.copytree(root / "arch" / "tables", tmp_path / "tables")
    arch = tmp_path / "renamed.yaml"
    arch.write_text((root / "arch" / "fusemax.yaml").read_text().replace("PE2D", "MyArray"))
    code = run_main(["--arch", str(arch), "--mapping", "auto", "--seq", "1K", "--engine",
                     "analytic"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "'PE2D.mac'" in err and "MyArray.mac" in err and "..." not in err
    with pytest.raises(SpecError, match=r"unknown name 'datawidth' \(no names are defined here\)"):
        evaluate("12.9 * (datawidth / 16) ** 2", {})
    many = {f"n{i:02d}": 1 for i in range(20)}
    with pytest.raises(SpecError, match=r"\(known: n00, n01, .*, n11, and 8 more\)"):
        evaluate("missing + 1", many)


def test_a_search_cut_short_by_its_budget_says_so(run_cli):
    """--search-s too small to evaluate the space: the candidates never evaluated are not
    "pruned" (that is the bound's proof); they are counted apart, with the remedy."""
    from simulator.run import main as run_main

    argv = ["--seq", "4K", "--mapping", "auto", "--engine", "analytic", "--search-s", "0.001"]
    code, out, err = run_cli(run_main, [*argv, "--format", "json"])
    assert code == 0, err
    (record,) = json.loads(out)
    s = record["search"]
    assert s["unevaluated"] > 0 and s["evaluated"] <= s["budget"]
    assert s["evaluated"] + s["pruned"] + s["unevaluated"] == s["space"]
    code, out, err = run_cli(run_main, argv)
    assert f"{s['unevaluated']} not evaluated within the budget (raise --search-s)" in out


@pytest.mark.parametrize(
    ("arch", "message"),
    [
        ("h200", "--arch h200 describes the H200, but"),
        ("fusemax", "'fusemax' is no GPU (one core, no fan-out of SMs), so it has no measured"),
    ],
)
def test_validate_refuses_an_architecture_of_another_device(capsys, arch, message):
    """The committed H100 measurements against the H200's architecture (or FuseMax's, which
    is no GPU): one line saying so before any prediction, not a silent run (or "the
    file's peak is wrong")."""
    from simulator.validate import main as validate_main

    assert validate_main(["--arch", arch]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and message in err, err
    assert "NVIDIA H100" in err


class _Terminal(io.StringIO):
    """A standard error that says it is a terminal (progress bars draw only on one)."""

    def isatty(self) -> bool:
        return True


def test_long_validate_and_rewrite_show_progress_on_a_terminal(tmp_path, monkeypatch, capsys):
    """validate (a minute from a cold cache on the wide grid) and rewrite --arch (seconds
    per candidate) draw a bar on a terminal's stderr -- and nothing when stderr is not one
    (the CSV, JSON and the tests' captured output stay as they were)."""
    from simulator.cascade_cli import main as cascade_main
    from simulator.support import progress
    from simulator.validate import main as validate_main
    from tests.test_silicon import _small_csv

    small = _small_csv(tmp_path)
    monkeypatch.setattr(progress, "SHOW_AFTER_S", 0.0)  # the loops here are short
    argv = ["rewrite", "softmax", "--arch", "fusemax", "--at", "M=1K,P=1K"]
    for main, args, bar in (
        (validate_main, ["--measured", str(small), "--format", "csv"], "predicting"),
        (cascade_main, argv, "ranking on fusemax"),
    ):
        terminal = _Terminal()
        monkeypatch.setattr(sys, "stderr", terminal)
        assert main(args) == 0
        monkeypatch.undo()
        monkeypatch.setattr(progress, "SHOW_AFTER_S", 0.0)
        assert bar in terminal.getvalue()
    assert validate_main(["--measured", str(small), "--format", "csv"]) == 0
    assert "predicting" not in capsys.readouterr().err  # stderr captured: no terminal


def test_experiments_bar_moves_while_a_chunk_runs(monkeypatch):
    """A chunk that takes a while in a worker: the bar is redrawn meanwhile (its clock
    moves), and says which experiment's files it writes once its rows are in."""
    import time

    from experiments import run as runner
    from experiments.experiment import Experiment, Selection

    def slow(_specs, point):
        time.sleep(1.0)
        return point

    toy = Experiment("toy", "toy", lambda sel: [1], slow, chunk=1)
    monkeypatch.setattr(runner, "by_name", lambda name: toy)
    monkeypatch.setattr(runner, "REFRESH_S", 0.1, raising=False)
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    written = []

    def finished(name, rows):
        written.append(terminal.getvalue())

    runner.compute_rows([toy], Selection(("bert",), (1024,)), 2, True, finished)
    monkeypatch.undo()
    before = written[0]  # what the terminal showed when the rows were in
    assert before.count("\r") >= 4  # drawn at the start, then redrawn while the chunk ran
    assert "writing toy" in before
