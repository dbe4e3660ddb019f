"""Property test: any text given to the parser yields a cascade or one clean SpecError."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.cascade.ops import cascade_ops
from simulator.cascade.parse import loads_cascade
from simulator.cascade.passes import analyze_passes
from simulator.cascade.shapes import resolve_shapes
from simulator.support.errors import SpecError

from .conftest import CASCADES

SHIPPED = {p.name: p.read_text() for p in sorted(CASCADES.glob("*.yaml"))}
ALPHABET = "abcdefkmpAEFKMP01+-*/:=[](), \n#'\"!{}|><.&inf"
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _assert_clean(err: SpecError) -> None:
    message = str(err)
    assert message.startswith("fuzz.yaml"), message
    assert "\n" not in message


def _parse_or_clean_error(text: str) -> None:
    try:
        cascade = loads_cascade(text, "fuzz.yaml")
    except SpecError as err:
        _assert_clean(err)
        return
    # A cascade that parses must also analyse without crashing (the pass analysis may
    # refuse a recurrence whose passes grow with its steps, with one clean line).
    try:
        analyze_passes(cascade)
    except SpecError as err:
        _assert_clean(err)
    try:
        shapes = resolve_shapes(cascade)
    except SpecError:
        return
    cascade_ops(cascade, shapes)


@SETTINGS
@given(st.text(alphabet=ALPHABET, max_size=300))
def test_random_text(text):
    _parse_or_clean_error(text)


@st.composite
def mutated(draw):
    name = draw(st.sampled_from(sorted(SHIPPED)))
    text = SHIPPED[name]
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, max(0, len(text) - 1)))
        action = draw(st.sampled_from(["delete", "insert", "replace", "dupline", "dropline"]))
        if action == "delete":
            text = text[:pos] + text[pos + draw(st.integers(1, 8)) :]
        elif action == "insert":
            text = (
                text[:pos] + draw(st.text(alphabet=ALPHABET, min_size=1, max_size=6)) + text[pos:]
            )
        elif action == "replace":
            text = text[:pos] + draw(st.sampled_from(list(ALPHABET))) + text[pos + 1 :]
        else:
            lines = text.splitlines(keepends=True)
            i = draw(st.integers(0, len(lines) - 1))
            lines = lines[:i] + ([lines[i]] * 2 if action == "dupline" else []) + lines[i + 1 :]
            text = "".join(lines)
    return text


@SETTINGS
@given(mutated())
def test_mutated_shipped_cascades(text):
    _parse_or_clean_error(text)


def test_every_shipped_cascade_parses():
    for name, text in SHIPPED.items():
        assert loads_cascade(text, name).einsums, name


def test_paths_exist():
    assert Path(CASCADES).is_dir()
