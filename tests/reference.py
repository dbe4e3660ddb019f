"""Loading the published results (tests/data/reference, copied from the FuseMax artifact)."""

from __future__ import annotations

import csv
from pathlib import Path

REFERENCE = Path(__file__).resolve().parent / "data" / "reference"
CONFIGS = ("unfused", "flat", "cascade", "arch", "binding")
MODELS = ("BERT", "TrXL", "T5", "XLM")
SEQS = ("1K", "4K", "16K", "64K", "256K", "1M")


def rows(name: str) -> list[dict[str, str]]:
    with open(REFERENCE / f"{name}.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def attention(config: str) -> dict[tuple[str, str], dict[str, str]]:
    return {(r["model"], r["seq_len"]): r for r in rows(f"attn-{config}")}
