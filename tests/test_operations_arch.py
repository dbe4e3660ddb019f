"""Operations with costs (issue 26): what the shipped PEs declare, how a composite
operation's cost is derived from its steps, and the derivations the architecture files cite.

Costs are checked by arithmetic on the primitive operations; the numerical claims of the
derivations (seed and Newton errors, Abramowitz & Stegun's erf, the identities the step
sequences compute) are checked here against Python's `math`, independently of the code."""

from __future__ import annotations

import math
import shutil
from collections import Counter

import numpy as np
import pytest

from simulator.cascade.ir import FUNCTIONS
from simulator.spec.arch import missing_operations
from simulator.spec.arch_file import load_architecture
from simulator.spec.tables import load_energy_table
from simulator.support.errors import SpecError

from .conftest import ROOT

ARCHS = {name: load_architecture(ROOT / "arch" / f"{name}.yaml") for name in ("fusemax", "flat")}


def array(design: str, name: str):
    return ARCHS[design].array(name)


# ---- what each array declares ----------------------------------------------------------

NOT_DECLARED = {"log", "softplus"}  # no unit gives a value's exponent as a number


@pytest.mark.parametrize(
    ("design", "name", "declares"),
    [
        ("fusemax", "PE2D", set(FUNCTIONS) - NOT_DECLARED),
        ("fusemax", "PE1D", set(FUNCTIONS) - NOT_DECLARED),
        ("flat", "PE2D", set()),  # a MAC array: mac, mul, add only
        ("flat", "PE1D", set(FUNCTIONS) - NOT_DECLARED),
    ],
)
def test_the_functions_each_array_declares(design, name, declares):
    a = array(design, name)
    assert {f for f in FUNCTIONS if a.op(f) is not None} == declares


def test_composites_leave_the_primitive_table_as_it_was():
    """What reads a PE's units (precision scaling, dedicated units) sees the same table."""
    primitive = {
        ("fusemax", "PE2D"): ("mac", "mul", "add", "max", "exp"),
        ("fusemax", "PE1D"): ("mac", "mul", "add", "max", "exp", "divide"),
        ("flat", "PE2D"): ("mac", "mul", "add"),
        ("flat", "PE1D"): ("mac", "mul", "add", "max", "exp", "divide"),
    }
    for (design, name), ops in primitive.items():
        assert tuple(o.name for o in array(design, name).operations) == ops


@pytest.mark.parametrize("design", ["fusemax", "flat"])
@pytest.mark.parametrize("published", [False, True])
def test_every_composite_is_priced_by_existing_table_entries(design, published):
    arch = ARCHS[design]
    table = load_energy_table(arch.published_energy_table if published else arch.energy_table)
    for a in arch.arrays:
        for c in a.composites:
            for unit, _n in a.op(c.name).actions:
                assert f"{a.name}.{unit}" in table.components(), (design, c.name, unit)
    # no component to price beyond the primitive operations' units
    units = {f"{a.name}.{u}" for a in arch.arrays for o in a.operations for u, _ in o.actions}
    assert {c for c in arch.priced_components() if "." in c} == units


# ---- a composite's cost, from its steps ------------------------------------------------


def test_fusemax_1d_tanh_is_the_sum_of_its_steps():
    a = array("fusemax", "PE1D")
    add, exp, divide = a.op("add"), a.op("exp"), a.op("divide")
    tanh = a.op("tanh")
    assert tanh.cycles == 3 * add.cycles + exp.cycles + divide.cycles == 10
    assert dict(tanh.actions) == {"add": 3, "mac": 6, "divide": 1}
    assert dict(tanh.unit_cycles()) == {"add": 3, "mac": 6, "divide": 1}
    assert tanh.unit == "mac"  # the unit its steps occupy longest


def test_flat_sigmoid_uses_each_dedicated_unit_once():
    s = array("flat", "PE1D").op("sigmoid")
    assert s.cycles == 3
    assert dict(s.actions) == {"exponential": 1, "add": 1, "divide": 1}


def test_fusemax_2d_reciprocal_needs_no_divider():
    """1/d and x/d on the 2D PEs are built from the adder and the MAC: no divider unit is
    used (nor priced), and a division costs a reciprocal and one multiply."""
    a = array("fusemax", "PE2D")
    recip = a.op("reciprocal")
    assert (recip.cycles, dict(recip.actions)) == (5, {"add": 1, "mac": 4})
    divide = a.op("divide")
    assert (divide.cycles, dict(divide.actions)) == (6, {"add": 1, "mac": 5})
    assert "divide" not in dict(divide.unit_cycles())
    # tanh = x + x, exp, 1 + e, 1/d, 1 - 2r: 2 adds + 6 MACs + (1 add + 4 MACs) + 1 MAC
    tanh = a.op("tanh")
    assert (tanh.cycles, dict(tanh.actions)) == (14, {"add": 3, "mac": 11})


def test_composites_follow_a_precision_change():
    """At fp32 the multiplier-built steps take 4 cycles, the adds keep 1."""
    wide = ARCHS["fusemax"].with_precision("fp32")
    assert wide.array("PE1D").op("tanh").cycles == 3 * 1 + 6 * 4 + 1 * 4
    assert wide.array("PE2D").op("rsqrt").cycles == 1 + 7 * 4
    flat = ARCHS["flat"].with_precision("fp32")
    assert flat.array("PE1D").op("sigmoid").cycles == 4 + 1 + 4


# ---- the derivations the arch files cite -----------------------------------------------

# Each composite's steps, as the derivation lists them (arch/README.md); the files must
# declare exactly these counts.
WITH_DIVIDER = {
    "min": ["max"],
    "abs": ["max"],
    "rsqrt": ["add"] + ["mul"] + ["mac"] * 6,  # seed; h = x/2; 2 x (y*y, 1.5 - h*y2, y*t)
    "sqrt": ["rsqrt", "mul"],
    "sigmoid": ["exp", "add", "divide"],  # 1 / (1 + exp(-x))
    "silu": ["exp", "add", "divide"],  # x / (1 + exp(-x))
    "tanh": ["add", "exp", "add", "divide", "add"],  # x + x, exp, 1 + e, 2 / d, 1 - q
    "gelu_tanh": ["mul", "mac", "mul", "exp", "add", "divide"],  # x2, a + b x2, x t, ...
    "erf": ["abs", "mac", "divide"] + ["mac"] * 4 + ["mul"] + ["mul", "exp", "mac"],
    "gelu": ["mul", "erf", "mul", "mac"],  # x / sqrt 2, erf, h = x / 2, h + h erf
}
WITHOUT_DIVIDER = {
    **{k: v for k, v in WITH_DIVIDER.items() if "divide" not in v},
    "reciprocal": ["add"] + ["mac"] * 4,  # seed; 2 x (t = 2 - d r, r t)
    "divide": ["reciprocal", "mul"],  # x / d = x (1/d)
    "sigmoid": ["exp", "add", "reciprocal"],
    "silu": ["exp", "add", "reciprocal", "mul"],
    "tanh": ["add", "exp", "add", "reciprocal", "mac"],  # 1 - 2 r as one MAC
    "gelu_tanh": ["mul", "mac", "mul", "exp", "add", "reciprocal", "mul"],
    "erf": ["abs", "mac", "reciprocal"] + ["mac"] * 4 + ["mul"] + ["mul", "exp", "mac"],
}


@pytest.mark.parametrize(
    ("design", "name", "steps"),
    [
        ("fusemax", "PE2D", WITHOUT_DIVIDER),
        ("fusemax", "PE1D", WITH_DIVIDER),
        ("flat", "PE1D", WITH_DIVIDER),
    ],
)
def test_the_files_declare_the_derivations_steps(design, name, steps):
    declared = {c.name: dict(c.parts) for c in array(design, name).composites}
    assert declared == {k: dict(Counter(v)) for k, v in steps.items()}


def test_the_step_sequences_compute_the_functions():
    """The identities behind the composites, against the language's own definitions."""
    x = np.linspace(-6, 6, 2001)
    f = {name: FUNCTIONS[name].numpy for name in FUNCTIONS}
    a = 2 * math.sqrt(2 / math.pi)
    b = 0.044715 * a
    assert np.allclose(f["sigmoid"](x), 1 / (1 + np.exp(-x)), rtol=1e-14)
    assert np.allclose(f["silu"](x), x / (1 + np.exp(-x)), rtol=1e-14)
    assert np.allclose(f["tanh"](x), 1 - 2 / (1 + np.exp(x + x)), atol=1e-15)
    assert np.allclose(f["gelu_tanh"](x), x / (1 + np.exp(-x * (a + b * x * x))), rtol=1e-13)
    h = x / 2
    assert np.allclose(f["gelu"](x), h + h * f["erf"](x / math.sqrt(2)), rtol=1e-14)
    assert np.allclose(f["abs"](x), np.maximum(x, -x))


def test_abramowitz_stegun_erf_is_within_its_bound():
    p, coef = 0.3275911, (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
    x = np.linspace(-6, 6, 100001)
    t = 1 / (1 + p * np.abs(x))
    poly = 0.0
    for c in reversed(coef):  # Horner: ((a5 t + a4) t + ...) t
        poly = (poly + c) * t
    approx = np.sign(x) * (1 - poly * np.exp(-x * x))
    exact = np.array([math.erf(v) for v in x])
    error = np.max(np.abs(approx - exact))
    assert 1e-8 < error <= 1.5e-7  # the published bound, and not exact


def _fp32_bits(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32).view(np.int32)


def _from_bits(bits: np.ndarray) -> np.ndarray:
    return bits.astype(np.int32).view(np.float32).astype(np.float64)


HALF_ULP_16 = 2.0**-11  # a 16-bit float's relative rounding


def test_reciprocal_seed_and_two_newton_steps_reach_16_bit_precision():
    d = np.geomspace(1.0, 2.0**20, 200001)  # 1 + exp(2x) >= 1
    r = _from_bits(np.int32(0x7EF311C3) - _fp32_bits(d))
    errors = [np.max(np.abs(r * d - 1))]
    for _ in range(2):
        r = r * (2 - d * r)
        errors.append(np.max(np.abs(r * d - 1)))
    assert errors[0] == pytest.approx(0.0505, abs=5e-4)
    assert errors[1] > HALF_ULP_16 > errors[2]  # two steps needed, and enough


def test_rsqrt_lomont_seed_and_two_newton_steps_reach_16_bit_precision():
    x = np.geomspace(2.0**-20, 2.0**20, 200001)
    y = _from_bits(np.int32(0x5F375A86) - (_fp32_bits(x) >> 1))
    errors = [np.max(np.abs(y * np.sqrt(x) - 1))]
    for _ in range(2):
        y = y * (1.5 - (x / 2) * y * y)
        errors.append(np.max(np.abs(y * np.sqrt(x) - 1)))
    assert errors[0] == pytest.approx(0.0342, abs=5e-4)  # Lomont 2003
    assert errors[1] == pytest.approx(1.75e-3, rel=0.01)
    assert errors[1] > HALF_ULP_16 > errors[2]


# ---- errors ----------------------------------------------------------------------------

FUSEMAX_1D_TANH = "            tanh: {via: {add: 3, exp: 1, divide: 1}}"


def _arch_with(tmp_path, old: str, new: str):
    shutil.copytree(ROOT / "arch" / "tables", tmp_path / "tables")
    text = (ROOT / "arch" / "fusemax.yaml").read_text()
    assert text.count(old) == 1, old
    path = tmp_path / "fusemax.yaml"
    path.write_text(text.replace(old, new))
    line = text[: text.index(old)].count("\n") + 1
    return path, line


@pytest.mark.parametrize(
    ("new", "fragment"),
    [
        (
            "            tanh: {via: {add: 3, exp: 1, sqr: 1}}",
            "'tanh' of 'pe_1d' is built via 'sqr', which 'pe_1d' does not declare",
        ),
        (
            "            tanh: {via: {add: 3, exp: 1, divide: 1}, cycles: 4}",
            "is built 'via' other operations, which give its cycles, unit and actions: "
            "remove 'cycles'",
        ),
        (
            "            tanh: {via: {add: 3, exp: 1, tanh: 1}}",
            "operation 'tanh' of 'pe_1d' is built from itself (tanh -> tanh)",
        ),
        (
            "            tanh: {via: {add: 0, exp: 1, divide: 1}}",
            "needs a positive count of 'add'",
        ),
        ("            tanh: {via: 3}", "'via' of operation 'tanh' must map operations"),
    ],
)
def test_a_bad_composite_is_one_line_at_its_place(tmp_path, new, fragment):
    path, line = _arch_with(tmp_path, FUSEMAX_1D_TANH, new)
    with pytest.raises(SpecError) as err:
        load_architecture(path)
    message = str(err.value)
    assert message.startswith(f"{path}:{line}:"), message
    assert fragment in message and "\n" not in message


def test_a_cycle_through_two_composites_is_named(tmp_path):
    path, _ = _arch_with(tmp_path, FUSEMAX_1D_TANH, "            tanh: {via: {sigmoid: 1}}")
    sigmoid = "            sigmoid: {via: {exp: 1, add: 1, divide: 1}}"
    text = path.read_text()
    assert text.count(sigmoid) == 1
    path.write_text(text.replace(sigmoid, "            sigmoid: {via: {tanh: 1, add: 1}}"))
    with pytest.raises(SpecError, match=r"built from itself \((sigmoid -> tanh -> sigmoid)\)"):
        load_architecture(path)


def test_an_operation_no_array_declares_is_named_with_its_spec_key():
    arrays = ARCHS["flat"].arrays
    assert missing_operations(["mac", "tanh", "exp"], arrays) is None
    message = missing_operations(["mul", "log"], arrays)
    assert message.startswith("it needs log, which no PE array declares")
    assert "`log: {cycles: C, unit: U, actions: {U: N}}`" in message
    assert "operations:" in message and "\n" not in message
