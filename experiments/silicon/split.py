"""Split a measured grid into a design half and a held-out half, at random, before any error
is looked at.

    python experiments/silicon/split.py experiments/data/h100-attention-wide.csv \
        --seed 34 --out experiments/data/h100-attention-wide-split.csv

Each measured shape -- its full and causal runs together, prefill and decode apart so that
both halves hold both -- goes to
`design` or `held-out` by a seeded shuffle of the shapes in a fixed order; the written file
holds the seed on every row. A file of measured cascades (`kind` = `cascade`, written by
experiments/silicon/measure_cascades.py) is split alike, each cascade's shapes apart (its
fused and unfused runs together): the split file then names `cascade`, `shape`, `batch`.

    python experiments/silicon/split.py experiments/data/h100-cascades.csv \
        --seed 44 --out experiments/data/h100-cascades-split.csv

`python -m simulator.validate --split FILE` reports each half; a model is changed only
while looking at the design half.
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
# a measured cascade's fused and unfused runs alike (simulator.validate's
# CASCADE_SPLIT_COLUMNS, less the half; tests/test_silicon_cascades.py checks they agree)
CASCADE_KEY = ("cascade", "shape", "batch")


def shapes(path: Path) -> tuple[tuple[str, ...], dict[str, list[tuple[str, ...]]]]:
    """The measured shapes (rows that passed), in a fixed order, per group -- attention: per
    kind (prefill, decode); cascades: per cascade -- and the columns that name a shape."""
    found: dict[str, set[tuple[str, ...]]] = {}
    keys: set[tuple[str, ...]] = set()
    with path.open(encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            if row["kind"] == "ceiling" or row["impl"] != "fused" or row["ok"] != "1":
                continue
            key, group = (
                (CASCADE_KEY, row["cascade"]) if row["kind"] == "cascade" else (KEY, row["kind"])
            )
            keys.add(key)
            found.setdefault(group, set()).add(tuple(row[k] for k in key))
    if len(keys) > 1:
        raise SystemExit(f"{path}: attention and cascade rows: split them in separate files")
    ordered = {g: sorted(ks, key=lambda k: tuple(map(_num, k))) for g, ks in found.items()}
    return (keys.pop() if keys else KEY), ordered


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
    key, groups = shapes(Path(args.measured))
    rows = split(groups, args.seed)
    with Path(args.out).open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow([*key, "half", "seed"])
        for key, half in rows:
            writer.writerow([*key, half, args.seed])
    counts = {h: sum(1 for _, x in rows if x == h) for h in ("design", "held-out")}
    print(f"wrote {args.out}: {counts['design']} design, {counts['held-out']} held-out shapes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
