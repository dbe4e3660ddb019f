"""The same computation, the same answer: a cascade in any notation maps alike (issue 42).

Each notation of `tests/notations.py` (tensors and ranks renamed, sums and their scalings
apart, literal extents, the Einsums in another order, the operands of every sum and product
swapped, all at once) computes what the shipped cascade computes; `--mapping auto` must give
it the same latency, DRAM traffic and energy (0.1%) on FuseMax's and FLAT's chips. A
notation that keeps the rank names is sized by the workload (`--seq`, its heads); a renamed
one by `--shape` with every rank's extent, and so is the shipped form it is compared with.
CI runs the cascades below at 4K; CASCADE_NOTATIONS_ALL=1 (`make notations`) runs every
shipped cascade at 4K and 64K.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from simulator.cascade.parse import load_cascade
from simulator.cascade.write import to_yaml
from simulator.drivers.configs import EvalOptions, Specs, evaluate
from simulator.spec.workload import make_workload
from simulator.strategies.binder_facts import load_facts
from simulator.strategies.context import workload_extents
from simulator.support.errors import SpecError

from .conftest import CASCADES
from .notations import notations

# CI: a 3-pass softmax on both chips and a LayerNorm (scaled sums) on FuseMax's (cascades
# whose notation once changed the answer)
QUICK = {
    "attention-3pass": ("fusemax", "flat"),
    "layernorm": ("fusemax",),
}
ALL = tuple(sorted(p.stem for p in CASCADES.glob("*.yaml")))
EVERY = bool(os.environ.get("CASCADE_NOTATIONS_ALL"))
NAMES = ALL if EVERY else tuple(QUICK)
LENGTHS = ("4K", "64K") if EVERY else ("4K",)
ARCHS = ("fusemax", "flat")


def _numbers(path: Path, arch: str, workload) -> tuple[float, float, float] | str:
    specs = Specs(cascade_override=str(path), arch_override=arch)
    try:
        r = evaluate(specs, "auto", workload, options=EvalOptions(engine="analytic"))
    except SpecError as err:
        return f"not bound: {err.message}"
    return (r.latency_s, r.traffic_bytes, r.energy_pj or 0.0)


def _same(a, b) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str)
    return all(abs(x - y) <= 1e-3 * max(abs(x), abs(y)) for x, y in zip(a, b, strict=True))


def _renamed_shape(shape: dict[str, int]) -> dict[str, int]:
    return {f"Q{rank}": n for rank, n in shape.items()}  # notations.renamed: M -> QM


@pytest.mark.parametrize("name", NAMES)
def test_every_notation_maps_alike(name, tmp_path):
    shipped = load_cascade(CASCADES / f"{name}.yaml")
    files = {"shipped": tmp_path / "shipped.yaml"}
    files["shipped"].write_text(to_yaml(shipped))
    for notation, variant in notations(shipped):
        files[notation] = tmp_path / f"{notation}.yaml"
        files[notation].write_text(to_yaml(variant))
    for seq in LENGTHS:
        by_seq = make_workload("bert", seq)
        _shapes, extents = workload_extents(shipped, by_seq, load_facts())
        shape = {r: n for r, n in extents.items() if r in shipped.shape_names()}
        # Renamed ranks are no rank the binder's facts know: the cascade attends nothing
        # it can tell and repeats once per request -- as the shipped one does for one head.
        by_shape = make_workload("bert", seq, {"heads": 1}, shape=shape)
        by_renamed = make_workload("bert", seq, {"heads": 1}, shape=_renamed_shape(shape))
        for arch in ARCHS if EVERY else QUICK[name]:
            seq_base = _numbers(files["shipped"], arch, by_seq)
            shape_base = _numbers(files["shipped"], arch, by_shape)
            for notation, path in files.items():
                renamed = notation in ("renamed", "everything")
                if renamed:
                    got, want = _numbers(path, arch, by_renamed), shape_base
                else:
                    got, want = _numbers(path, arch, by_seq), seq_base
                assert _same(got, want), (name, notation, seq, arch, got, want)
