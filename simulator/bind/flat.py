"""The FLAT strategy (placeholder while it is written)."""

from __future__ import annotations

from typing import Any

from simulator.errors import SpecError


def flat_mapping(*args: Any, **kwargs: Any) -> dict[str, Any]:
    raise SpecError("the flat strategy is not written yet")
