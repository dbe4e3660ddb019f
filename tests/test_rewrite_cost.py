"""Rewriting by cost (issue 35): `rewrite --arch` maps and times every equivalent candidate
and writes the best; the input is always a candidate, so the written cascade is never
slower on the target than what it was given.

Expected values are comparisons between two evaluations of the same tool (the input and
the written file), never numbers copied from its output.
"""

from __future__ import annotations

import pytest

from simulator.cascade.parse import load_cascade
from simulator.cascade.passes import analyze_passes
from simulator.cascade_cli import main as cascade_main
from simulator.drivers.configs import EvalOptions, Specs, evaluate
from simulator.spec.workload import make_workload, parse_shape

from .conftest import ROOT

CASCADES = ROOT / "cascades"


def _latency(path, arch: str, at: str, batch: int) -> float:
    """As `run --cascade PATH --mapping auto` times it (its default search budget)."""
    w = make_workload("bert", "4K", {"batch": batch}, shape=parse_shape([at]))
    specs = Specs(cascade_override=str(path), arch_override=arch)
    return evaluate(specs, "auto", w, options=EvalOptions(engine="analytic")).latency_s


@pytest.mark.parametrize(
    ("name", "arch", "at"),
    [
        ("softmax", "fusemax", "M=64K,P=16K"),  # the online softmax is slower here
        ("softmax", "flat", "M=4K,P=4K"),
        ("rmsnorm-matmul", "fusemax", "E=4096,F=4096,P=16K"),
        ("layernorm", "flat", "E=1024,P=16K"),
    ],
)
def test_the_written_cascade_is_never_slower_than_the_input(tmp_path, capsys, name, arch, at):
    out = tmp_path / f"{name}-best.yaml"
    code = cascade_main(
        ["rewrite", name, "--arch", arch, "--at", at, "--batch", "8", "-o", str(out)]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "equivalent candidates on" in text and "wins by latency" in text
    source = CASCADES / f"{name}.yaml"
    written = _latency(out, arch, at, 8)
    given = _latency(source, arch, at, 8)
    assert written <= given * (1 + 1e-9)


def test_a_rewrite_that_is_slower_on_the_chip_is_not_taken(tmp_path, capsys):
    """A row softmax over 64K columns on FuseMax's chip: the online softmax (2 passes) adds
    exponentials; the input (3 passes) is faster, so it is what is written."""
    out = tmp_path / "softmax-best.yaml"
    assert (
        cascade_main(
            ["rewrite", "softmax", "--arch", "fusemax", "--at", "M=64K,P=16K", "-o", str(out)]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "the input is the best on fusemax" in text
    assert analyze_passes(load_cascade(out)).max_passes == 3
    # ... while by passes it would be the 2-pass one
    out2 = tmp_path / "softmax-passes.yaml"
    assert cascade_main(
        ["rewrite", "softmax", "--arch", "fusemax", "--at", "M=64K,P=16K",
         "--objective", "passes", "-o", str(out2)]
    ) == 0  # fmt: skip
    assert analyze_passes(load_cascade(out2)).max_passes == 2


def test_without_an_architecture_it_ranks_by_passes(capsys):
    assert cascade_main(["rewrite", "layernorm"]) == 0
    assert capsys.readouterr().out.startswith("ranked by passes")


@pytest.mark.parametrize(
    "flag",
    [["--seq", "4K"], ["--objective", "energy"], ["--at", "E=64"], ["--heads", "32"],
     ["--kv-heads", "8"], ["--jobs", "2"]],
)  # fmt: skip
def test_workload_flags_need_an_architecture(capsys, flag):
    assert cascade_main(["rewrite", "layernorm", *flag]) == 2
    err = capsys.readouterr().err.strip()
    assert "add --arch" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--arch", "banana"], "banana: no such file"),
        (["--arch", "fusemax", "--at", "Z=5"], "has no rank Z"),
        (["--arch", "fusemax", "--at", "E=foo"], "is not a count"),
        (["--arch", "fusemax", "--jobs", "0"], "--jobs must be 1 or more"),
    ],
)
def test_a_bad_chip_or_workload_is_one_line_before_the_search(capsys, argv, message):
    assert cascade_main(["rewrite", "layernorm", *argv]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and len(captured.err.strip().splitlines()) == 1
    assert "candidates" not in captured.out  # nothing was searched or ranked


def test_rewrite_takes_runs_heads_and_its_search_budget(capsys, monkeypatch):
    """--heads and --kv-heads size the workload as run's flags do, and each candidate is
    mapped with run's default search budget (a candidate's time is the one `run --cascade
    FILE --mapping auto` gives)."""
    import simulator.cascade_cli as cli
    from simulator.mapper.search import DEFAULT_SEARCH_S

    seen = []
    real_rank, real_init = cli.rank, Specs.__init__

    def rank(result, arch, workload, *args, **kwargs):
        seen.append(workload)
        return real_rank(result, arch, workload, *args, **kwargs)

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        if self.cascade_override:  # a candidate's specs
            seen.append(self.search_s)

    monkeypatch.setattr(cli, "rank", rank)
    monkeypatch.setattr(Specs, "__init__", init)
    argv = ["rewrite", "softmax", "--arch", "fusemax", "--heads", "24", "--kv-heads", "6"]
    assert cascade_main([*argv, "--jobs", "1"]) == 0  # (in this process: its Specs seen)
    workload, *budgets = seen
    assert (workload.name, workload.heads, workload.kv_heads) == ("bert", 24, 6)
    assert budgets and all(b == DEFAULT_SEARCH_S for b in budgets)
    assert "equivalent candidates on fusemax" in capsys.readouterr().out


def test_the_ranking_is_the_same_on_any_number_of_processes(tmp_path, capsys):
    """The candidates ranked on two worker processes and in this one: the same table and
    the same file, byte for byte (each candidate's search is its own)."""
    outputs = []
    for jobs in ("2", "1"):
        (tmp_path / jobs).mkdir()
        out = tmp_path / jobs / "best.yaml"  # (the file's name names the cascade)
        argv = ["rewrite", "softmax", "--arch", "flat", "--at", "M=4K,P=4K", "-o", str(out)]
        assert cascade_main([*argv, "--jobs", jobs]) == 0
        table = capsys.readouterr().out
        assert "equivalent candidates on flat" in table
        outputs.append((table.replace(str(out), "OUT"), out.read_text()))
    assert outputs[0] == outputs[1]
