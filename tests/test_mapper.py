"""The GEMM mapper (issue 6): optimal and complete within its space, consistent with the
Timeloop-semantics access model, deterministic, and clean when nothing fits."""

from __future__ import annotations

import dataclasses
import itertools
import math
import random

import numpy as np
import pytest

from simulator.cascade.parse import load_cascade
from simulator.drivers.configs import EvalOptions, Sizing, Specs, evaluate
from simulator.plan import gemm_mapper
from simulator.plan.accesses import DataSpace, LevelMapping, Loop, Problem, analyze
from simulator.plan.gemm_mapper import Gemm, gemm_of, map_gemm, prices_of
from simulator.run import main as run_main
from simulator.spec.arch_file import load_architecture
from simulator.spec.linear import LevelRule, MapperSettings, load_linear
from simulator.spec.workload import make_workload
from simulator.support.errors import SpecError
from simulator.support.paths import resolve_spec

from .conftest import ROOT

FREE = MapperSettings(buffer=LevelRule(keep=("left", "right")))


@pytest.fixture(scope="module")
def archs():
    specs = Specs()
    out = {}
    for name in ("flat", "fusemax"):
        arch = load_architecture(ROOT / "arch" / f"{name}.yaml")
        out[name] = (arch, specs.tables(arch, "corrected")[0])
    return out


def _dram_traffic(report) -> int:
    return sum(c.reads + c.fills + c.updates for lv, _ds, c in report.counts if lv == "DRAM")


@pytest.mark.parametrize("name", ["flat", "fusemax"])
def test_1k_cube_on_256x256_is_fully_utilised_with_compulsory_traffic(archs, name):
    arch, ert = archs[name]
    n = 1024
    # Independent bound: every one of A, B (inputs) and Z (output) crosses DRAM at least
    # once, and all three (3 x 2 MB) fit either design's buffer (16 or 32 MB), so the least
    # traffic any mapping can reach is exactly one crossing each.
    assert 3 * n * n <= arch.buffer_values
    compulsory = 3 * n * n * arch.value_bytes
    m = map_gemm(Gemm("G", ("M", "N", "K"), (n, n, n), ("A", "B", "Z")), arch, FREE, ert)
    assert m.utilization == 1.0
    assert m.cycles == n**3 // (256 * 256)
    assert m.traffic_bytes == compulsory
    assert _dram_traffic(m.report) * arch.value_bytes == compulsory


def test_no_valid_mapping_when_no_tile_fits(archs, run_cli):
    arch, ert = archs["fusemax"]
    g = Gemm("G", ("M", "N", "K"), (1024, 1024, 1024), ("A", "B", "Z"))
    tiny = arch.with_overrides(buffer_bytes=0)
    with pytest.raises(SpecError, match="no valid mapping for GEMM 'G'"):
        map_gemm(g, tiny, FREE, ert)
    # The artifact's rules keep a whole reduction on chip: 1 KB holds no such tile.
    artifact = load_linear(resolve_spec("mappings", "linear/artifact")).mapper
    with pytest.raises(SpecError, match="no valid mapping"):
        map_gemm(g, arch.with_overrides(buffer_bytes=1024), artifact, ert)
    # ... and at the command line: one line, exit code 2.
    code, out, err = run_cli(
        run_main,
        ["--scope", "layer", "--accel", "binding", "--seq", "1K"]
        + ["--buffer-bytes", "512", "--linear", "artifact"],
    )
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "no valid mapping" in err


def test_mapper_is_deterministic_and_fast_enough_to_call_often(archs):
    arch, ert = archs["fusemax"]
    g = Gemm("G", ("N", "S", "D"), (65536, 3072, 768), ("X", "W", "Y"))
    first = map_gemm(g, arch, FREE, ert)
    second = map_gemm(g, arch, FREE, ert)
    assert first == second
    assert first.utilization == 1.0


def _brute_force_min_traffic(ext, arch):
    """Least DRAM traffic of every full-utilisation mapping of the mapper's space, counted by
    `accesses.analyze` one mapping at a time with every loop permutation."""
    arr = next(a for a in arch.arrays if a.mesh_y > 1)
    ranks = ("M", "N", "K")
    rel = {"A": ("M", "K"), "B": ("N", "K"), "Z": ("M", "N")}
    problem = Problem(
        "G",
        tuple(zip(ranks, ext, strict=True)),
        tuple(DataSpace(t, rel[t], t == "Z") for t in ("A", "B", "Z")),
    )
    best = math.inf
    divs = [[d for d in range(1, e + 1) if e % d == 0] for e in ext]
    for dx, dy in itertools.product(range(3), repeat=2):
        spatial = [1, 1, 1]
        spatial[dx] *= arr.mesh_x
        spatial[dy] *= arr.mesh_y
        if any(e % s for e, s in zip(ext, spatial, strict=True)):
            continue
        rest = [e // s for e, s in zip(ext, spatial, strict=True)]
        splits = [
            [(r // (b * g), b, g) for g in divs[d] for b in divs[d] if r % (b * g) == 0]
            for d, r in enumerate(rest)
        ]
        for combo in itertools.product(*splits):
            reg = [c[2] for c in combo]
            if reg[0] * reg[2] + reg[1] * reg[2] + reg[0] * reg[1] > arr.register_words:
                continue
            tile = {
                t: math.prod(
                    combo[i][1] * spatial[i] * combo[i][2] for i in range(3) if ranks[i] in rel[t]
                )
                for t in rel
            }
            for keep_z in (True, False):
                kept = ("A", "B", "Z") if keep_z else ("A", "B")
                if sum(tile[t] for t in kept) > arch.buffer_values:
                    continue
                for p0, p1 in itertools.product(itertools.permutations(range(3)), repeat=2):
                    levels = (
                        LevelMapping(
                            "DRAM",
                            tuple(Loop(ranks[i], combo[i][0]) for i in p0),
                            (),
                            frozenset("ABZ"),
                        ),
                        LevelMapping(
                            "buffer",
                            tuple(Loop(ranks[i], combo[i][1]) for i in p1),
                            (Loop(ranks[dx], arr.mesh_x, "X"), Loop(ranks[dy], arr.mesh_y, "Y")),
                            frozenset(kept),
                        ),
                        LevelMapping(
                            "registers",
                            tuple(Loop(ranks[i], reg[i]) for i in range(3)),
                            (),
                            frozenset("ABZ"),
                        ),
                    )
                    best = min(best, _dram_traffic(analyze(problem, levels)))
    return best


@pytest.mark.parametrize("ext, buffer_values", [((8, 8, 4), 16), ((8, 8, 8), 32)])
def test_least_traffic_matches_an_exhaustive_search_under_a_small_buffer(archs, ext, buffer_values):
    # A GEMM on a 2x2 array whose buffer cannot hold all three tensors: the exhaustive
    # scalar search (every permutation at both levels) and the mapper must agree.
    arch, _ = archs["fusemax"]
    small = dataclasses.replace(
        arch.with_overrides(pe_dim=2),
        buffer=dataclasses.replace(arch.buffer, width_bits=16 * 8, depth=buffer_values // 8),
    )
    assert small.buffer_values == buffer_values
    settings = MapperSettings(objective=("latency", "traffic"), buffer=FREE.buffer)
    m = map_gemm(Gemm("G", ("M", "N", "K"), ext, ("A", "B", "Z")), small, settings)
    assert m.utilization == 1.0
    least = _brute_force_min_traffic(ext, small)
    assert _dram_traffic(m.report) == least
    m_, n_, k_ = ext
    assert least > m_ * k_ + n_ * k_ + m_ * n_  # the buffer does bind


def test_vectorised_counts_equal_the_access_model(archs):
    """The search's numpy form of the access rules against `accesses.analyze`, on random
    mappings: DRAM traffic and priced energy of every tensor, kept or bypassed."""
    arch, ert = archs["fusemax"]
    arr = arch.array("PE2D")
    prices = prices_of(arch, arr, ert)
    rng = random.Random(6)
    ranks = ("R", "C", "K")
    names = {"left": "L", "right": "Rt", "output": "O"}

    def divisor(n: int) -> int:
        return rng.choice([x for x in range(1, n + 1) if n % x == 0])

    for _ in range(300):
        ext = tuple(rng.choice([1, 2, 4, 6, 8, 12]) for _ in range(3))
        dx, dy = rng.randrange(3), rng.randrange(3)  # the same dim may take both axes
        sx = divisor(ext[dx])
        sy = divisor(ext[dy] // (sx if dy == dx else 1))
        spatial = (("X", dx, sx), ("Y", dy, sy))
        s = [1, 1, 1]
        for _a, d, fac in spatial:
            s[d] *= fac
        f = []  # per dim: DRAM, buffer, registers
        for d in range(3):
            rest = ext[d] // s[d]
            reg = divisor(rest)
            buf = divisor(rest // reg)
            f.append((rest // reg // buf, buf, reg))
        o0 = tuple(rng.sample(range(3), 3))
        o1 = tuple(rng.sample(range(3), 3))
        keep = tuple(t for t in ("left", "right", "output") if rng.random() < 0.6)
        f0, f1, f2 = (np.array([[f[d][i]] for d in range(3)], dtype=float) for i in range(3))
        sv = np.array(s, dtype=float)
        inner0, inner1 = gemm_mapper._innermost(f0, o0), gemm_mapper._innermost(f1, o1)
        traffic = energy = 0.0
        for t in ("left", "right", "output"):
            tr, en = gemm_mapper._terms(
                t,
                t in keep,
                *gemm_mapper._tile_visits(t, f0, f1, inner0, inner1),
                gemm_mapper._Split.of(ext, sv, f0, f1, f2),
                prices,
            )
            traffic += float(tr[0])
            energy += float(en[0])
        problem = Problem(
            "G",
            tuple(zip(ranks, ext, strict=True)),
            tuple(
                DataSpace(names[t], tuple(ranks[d] for d in gemm_mapper.INDEXED[t]), t == "output")
                for t in ("left", "right", "output")
            ),
        )
        every = frozenset(names.values())
        levels = (
            LevelMapping("DRAM", tuple(Loop(ranks[d], f[d][0]) for d in o0), (), every),
            LevelMapping(
                "buffer",
                tuple(Loop(ranks[d], f[d][1]) for d in o1),
                tuple(Loop(ranks[d], fac, a) for a, d, fac in spatial),
                frozenset(names[t] for t in keep),
            ),
            LevelMapping("registers", tuple(Loop(ranks[d], f[d][2]) for d in range(3)), (), every),
        )
        report = analyze(problem, levels, drain_reads=True)  # the mapper prices drains
        expected_energy = 0.0
        for lv, _ds, c in report.counts:
            read, write = {
                "DRAM": (prices.dram_read, prices.dram_write),
                "buffer": (prices.buffer_read, prices.buffer_write),
                "registers": (prices.reg_read, prices.reg_write),
            }[lv]
            expected_energy += c.reads * read + (c.fills + c.updates) * write
        assert traffic == _dram_traffic(report)
        assert energy == pytest.approx(expected_energy, rel=1e-12)


def test_chosen_mapping_costs_are_those_of_the_access_model(archs):
    arch, ert = archs["flat"]
    m = map_gemm(Gemm("G", ("N", "S", "D"), (4096, 3072, 768), ("X", "W", "Y")), arch, FREE, ert)
    assert m.objective[0] == m.latency_s
    prices = prices_of(arch, arch.array("PE2D"), ert)
    energy = 0.0
    for lv, _ds, c in m.report.counts:
        read, write = {
            "DRAM": (prices.dram_read, prices.dram_write),
            "buffer": (prices.buffer_read, prices.buffer_write),
            "registers": (prices.reg_read, prices.reg_write),
        }[lv]
        energy += c.reads * read + (c.fills + c.updates) * write
    assert m.objective[1] == pytest.approx(energy, rel=1e-12)


def test_constraints_are_obeyed_and_relaxing_them_never_hurts(archs):
    arch, ert = archs["fusemax"]
    artifact = load_linear(resolve_spec("mappings", "linear/artifact")).mapper
    g = Gemm("FFN1", ("N", "S", "D"), (65536, 8192, 2048), ("X", "W", "Y"))
    constrained = map_gemm(g, arch, artifact, ert)
    assert constrained.keep == ("left", "right")
    assert constrained.factors[2][0] == 1  # reduction not split in DRAM
    assert all(f[2] == 1 for f in constrained.factors)
    assert {(a, d) for a, d, f in constrained.spatial if f > 1} == {("X", "rows"), ("Y", "cols")}
    assert constrained.stationary == "output"
    free = map_gemm(g, arch, FREE, ert)
    assert free.objective <= constrained.objective
    assert free.traffic_bytes < constrained.traffic_bytes  # the artifact re-reads weights


def test_gemm_of_recognises_gemms_and_rejects_the_rest():
    linear = load_cascade(resolve_spec("cascades", "linear-layers"))
    shapes = {"N": 8, "D": 4, "EH": 4, "FH": 4, "S": 16}
    g = gemm_of(linear, "FFN2", shapes)
    assert g.ranks == ("N", "D", "S") and g.extents == (8, 4, 16)
    assert g.tensors == ("F1", "W2", "F2")
    attention = load_cascade(resolve_spec("cascades", "attention-3pass"))
    assert gemm_of(attention, "QK", {"M": 4, "P": 8, "E": 2}).ranks == ("P", "M", "E")
    with pytest.raises(SpecError, match="GEMM mapper maps Einsums shaped"):
        gemm_of(attention, "SN", {"M": 4, "P": 8, "E": 2})


def test_bad_mapper_settings_name_file_and_line(tmp_path, run_cli):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "linear:\n  cascade: linear-layers\n  shapes: {N: batch * seq_len}\n"
        "  mapper:\n    DRAM: {order: [rows, cols, banana]}\n"
    )
    with pytest.raises(SpecError, match="unknown GEMM dim 'banana'") as info:
        load_linear(bad)
    assert info.value.loc.line == 5
    code, _out, err = run_cli(run_main, ["--scope", "layer", "--linear", str(bad), "--seq", "1K"])
    assert code == 2 and f"{bad}:5" in err and err.count("\n") == 1
    code, _out, err = run_cli(run_main, ["--scope", "layer", "--linear", "nope", "--seq", "1K"])
    assert code == 2 and "no linear-layer spec 'nope'" in err
    twice = tmp_path / "twice.yaml"
    twice.write_text(
        "linear:\n  cascade: linear-layers\n  shapes: {N: batch * seq_len}\n"
        "  mapper:\n    buffer: {keep: [right, right]}\n"
    )
    with pytest.raises(SpecError, match="names a tensor twice"):
        load_linear(twice)  # counted twice, it would crowd the buffer for nothing


def test_unfused_qk_and_av_are_mapped_by_the_mapper():
    from simulator.drivers.configs import prepare
    from simulator.plan.extents import choose_extents
    from simulator.plan.facts import cascade_facts

    workload = make_workload("bert", "4K")
    cascade, mapping, arch = prepare(Specs(), "unfused", workload)
    _extents, _partitions, plans = choose_extents(
        cascade, mapping, cascade_facts(cascade), arch, workload
    )
    gemms = {p.phase.name: p.gemm for p in plans if p.gemm is not None}
    assert set(gemms) == {"QK", "AV"}
    qk, av = gemms["QK"], gemms["AV"]
    assert qk.gemm.ranks == ("P", "M", "E") and qk.gemm.copies == 64 * 12
    assert {(a, d, f) for a, d, f in qk.spatial} == {("X", "rows", 256), ("Y", "cols", 256)}
    assert {(a, d, f) for a, d, f in av.spatial} == {("X", "rows", 256), ("Y", "reduction", 256)}
    # QK's output (M x P per head) dominates: written once, never re-read
    out = qk.report.of("DRAM", "QK")
    assert out.updates == 4096 * 4096 * 64 * 12 and out.reads == 0


def test_a_mapper_phase_schedules_one_gemm(tmp_path):
    from simulator.drivers.configs import prepare

    text = (ROOT / "mappings" / "unfused.yaml").read_text()
    bad = text.replace(
        "      schedule: [GM, SN, SD, A]",
        "      mapper: {}\n      schedule: [GM, SN, SD, A]",
    )
    assert bad != text
    path = tmp_path / "unfused.yaml"
    path.write_text(bad)
    with pytest.raises(SpecError, match="exactly one \\(GEMM\\) Einsum") as info:
        prepare(Specs(), str(path), make_workload("bert", "1K"))
    assert info.value.loc.path == str(path) and info.value.loc.line > 0


def test_cycle_engine_streams_the_mapped_gemm_phases():
    # The cycle engine runs a mapper phase as a stream of its tiles: compute-bound (ample
    # bandwidth), the phase takes the mapping's cycles plus one fill and drain of the
    # wavefront (rows + columns - 2); memory-bound (shipped bandwidth), it waits on DRAM
    # and agrees with the closed form.
    specs = Specs()
    workload = make_workload("bert", "4K")
    fast = evaluate(specs, "unfused", workload, Sizing(bandwidth=1e18), EvalOptions(engine="cycle"))
    closed = evaluate(
        specs, "unfused", workload, Sizing(bandwidth=1e18), EvalOptions(engine="analytic")
    )
    skew = 256 + 256 - 2
    for name in ("QK", "AV"):
        (cyc,) = [p for p in fast.phases if p.name == name]
        (ana,) = [p for p in closed.phases if p.name == name]
        assert round(cyc.compute_s * 940e6) == round(ana.compute_s * 940e6) + skew
    shipped = evaluate(specs, "unfused", workload, options=EvalOptions(engine="cycle"))
    stalls = {(a, why): n for a, why, n in shipped.stalls}
    assert stalls[("PE2D", "memory")] > 0 and stalls[("PE2D", "fill/drain")] == 2 * skew
    analytic = evaluate(specs, "unfused", workload, options=EvalOptions(engine="analytic"))
    assert shipped.latency_s == pytest.approx(analytic.latency_s, rel=1e-4)
