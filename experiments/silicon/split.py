"""Split a measured grid into a design half and a held-out half, at random, before any error
is looked at.

    python experiments/silicon/split.py experiments/data/h100-attention-wide.csv \
        --seed 34 --out experiments/data/h100-attention-wide-split.csv

Each measured shape -- its full and causal runs together, prefill and decode apart so that
both halves hold both -- goes to
`design` or `held-out` by a seeded shuffle of the shapes in a fixed order; the written file
holds the seed on every row. `python -m simulator.validate --split FILE` reports each half;
a model is changed only while looking at the design half.
"""

from __future__ import annotations

import argparse
import csv
import random
import sys
from pathlib import Path

from simulator.validate import SPLIT_COLUMNS

# a shape's full and causal runs (the same inputs) go to the same half: the columns
# `simulator.validate --split` reads, less the half
KEY = SPLIT_COLUMNS[:-1]


def shapes(path: Path) -> dict[str, list[tuple[str, ...]]]:
    """The measured attention shapes (rows that passed), per kind, in a fixed order."""
    found: dict[str, set[tuple[str, ...]]] = {}
    with path.open(encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            if row["kind"] == "ceiling" or row["impl"] != "fused" or row["ok"] != "1":
                continue
            found.setdefault(row["kind"], set()).add(tuple(row[k] for k in KEY))
    return {kind: sorted(keys, key=lambda k: tuple(map(_num, k))) for kind, keys in found.items()}


def _num(text: str) -> tuple[int, str]:
    return (int(text), "") if text.isdigit() else (0, text)


def split(groups: dict[str, list[tuple[str, ...]]], seed: int) -> list[tuple[tuple[str, ...], str]]:
    rng = random.Random(seed)
    out = []
    for kind in sorted(groups):
        keys = list(groups[kind])
        rng.shuffle(keys)
        half = (len(keys) + 1) // 2
        out += [(k, "design" if i < half else "held-out") for i, k in enumerate(keys)]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("measured")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    rows = split(shapes(Path(args.measured)), args.seed)
    with Path(args.out).open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow([*KEY, "half", "seed"])
        for key, half in rows:
            writer.writerow([*key, half, args.seed])
    counts = {h: sum(1 for _, x in rows if x == h) for h in ("design", "held-out")}
    print(f"wrote {args.out}: {counts['design']} design, {counts['held-out']} held-out shapes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
