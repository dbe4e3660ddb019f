"""Mutations of the shipped spec files and of command-line values, for the spec fuzzers
(tests/test_spec_fuzz.py; `make fuzz` runs them at length).

A case is a base file (an architecture, a mapping, a sweep, an energy or area table) and a
list of mutations, drawn by Hypothesis: structural ones on the YAML tree (a value replaced
by a hostile scalar, a key deleted or renamed, a list item duplicated; Timeloop's `!Tags`
kept) and textual ones (a line dropped, duplicated or re-indented, a character replaced,
the file cut short). The case runs the real command line in-process under a wall-clock
alarm and must end in a result or in one line on stderr with exit code 2: no traceback, no
hang, no output file half-written.
"""

from __future__ import annotations

import contextlib
import io
import math
import shutil
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent

# Values a mutation writes: the edges of every type a spec holds.
HOSTILE: tuple[Any, ...] = (
    0,
    -1,
    1,
    3,
    7,
    2**31,
    2**64,
    10**30,
    1.5,
    -0.5,
    1e-300,
    1e308,
    math.nan,
    math.inf,
    "",
    "banana",
    "2^999",
    "1/0",
    "0/0",
    "datawidth * 3",
    "datawidth ** 99",
    "9" * 400,
    "__import__('os')",
    "P0 * M0",
    "min()",
    "1K",
    "16MB",
    None,
    True,
    [],
    {},
    [1, 2],
    {"a": 1},
)
CHARS = ":-[]{}!#&*|>'\"% \t0\n"


class Tagged(dict):
    """A mapping with its YAML tag (`!Component`), kept through a load/dump round trip."""

    tag = ""


class TaggedList(list):
    tag = ""


class _Loader(yaml.SafeLoader):
    pass


class _Dumper(yaml.SafeDumper):
    pass


def _construct(loader: _Loader, suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.MappingNode):
        out: Any = Tagged(loader.construct_mapping(node, deep=True))
    elif isinstance(node, yaml.SequenceNode):
        out = TaggedList(loader.construct_sequence(node, deep=True))
    else:
        return loader.construct_scalar(node)
    out.tag = "!" + suffix
    return out


_Loader.add_multi_constructor("!", _construct)
_Dumper.add_representer(Tagged, lambda d, data: d.represent_mapping(data.tag, dict(data)))
_Dumper.add_representer(TaggedList, lambda d, data: d.represent_sequence(data.tag, list(data)))


def load(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # noqa: S506 -- a safe loader with known tags


def dump(tree: Any) -> str:
    return yaml.dump(tree, Dumper=_Dumper, sort_keys=False, allow_unicode=True)


def _slots(tree: Any) -> list[tuple[Any, Any]]:
    """Every (container, key or index) in the tree, in document order."""
    out: list[tuple[Any, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key in list(node):
                out.append((node, key))
                walk(node[key])
        elif isinstance(node, list):
            for i, item in enumerate(node):
                out.append((node, i))
                walk(item)

    walk(tree)
    return out


# A mutation: (kind, a, b), integers drawn by Hypothesis and taken modulo what they index.
Mutation = tuple[str, int, int]
TREE = ("set", "set", "set", "delete", "rename", "duplicate")
TEXT = ("dropline", "dupline", "indent", "char", "truncate")


def mutate(text: str, mutations: list[Mutation]) -> str:
    """`text` with the mutations applied in order (tree ones while it still parses)."""
    for kind, a, b in mutations:
        if kind in TREE:
            try:
                tree = load(text)
            except yaml.YAMLError:
                continue
            slots = _slots(tree)
            if not slots:
                continue
            container, key = slots[a % len(slots)]
            if kind == "set":
                container[key] = HOSTILE[b % len(HOSTILE)]
            elif kind == "delete":
                del container[key]
            elif kind == "rename" and isinstance(container, dict):
                container[f"{key}_{b % 3}" if b % 2 else "bogus"] = container.pop(key)
            elif kind == "duplicate" and isinstance(container, list):
                container.append(container[key])
            text = dump(tree)
        else:
            lines = text.split("\n")
            i = a % max(1, len(lines))
            if kind == "dropline":
                del lines[i]
            elif kind == "dupline":
                lines.insert(i, lines[i])
            elif kind == "indent":
                lines[i] = " " * (b % 5) + lines[i].lstrip(" ")
            elif kind == "char" and lines[i]:
                j = b % len(lines[i])
                lines[i] = lines[i][:j] + CHARS[b % len(CHARS)] + lines[i][j + 1 :]
            elif kind == "truncate":
                lines = lines[: i + 1]
            text = "\n".join(lines)
    return text


class Hang(Exception):
    """A case ran past its wall-clock limit."""


@contextlib.contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    def alarm(_signum, _frame):
        raise Hang(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str


def run_case(main: Callable[[list[str]], int], argv: list[str], seconds: int) -> Outcome:
    """Run a CLI in-process under the alarm; check the contract every case must keep."""
    out, err = io.StringIO(), io.StringIO()
    with time_limit(seconds), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    outcome = Outcome(code, out.getvalue(), err.getvalue())
    assert code in (0, 2), outcome
    if code == 2:
        assert outcome.err.startswith("error: "), outcome
        assert outcome.err.count("\n") == 1, outcome  # one line, never a traceback
        assert outcome.out == "", outcome
    return outcome


def no_partial_files(folder: Path) -> None:
    """Nothing half-written: no atomic-write temporaries left in `folder`."""
    left = [p.name for p in folder.rglob("*") if ".partial-" in p.name]
    assert not left, left


def arch_copy(folder: Path, name: str) -> Path:
    """A shipped architecture with its tables, copied so that mutations stay local."""
    shutil.copytree(ROOT / "arch" / "tables", folder / "tables", dirs_exist_ok=True)
    target = folder / f"{name}.yaml"
    shutil.copy(ROOT / "arch" / f"{name}.yaml", target)
    return target
