"""Where the shipped spec folders (`cascades/`, `arch/`, `mappings/`) are.

In a source checkout or an editable install they are the top-level folders of the
repository; a built wheel carries a copy in `simulator/_data/` (see pyproject.toml).
Resolving both ways keeps `pip install .` and a run from any directory working.
"""

from __future__ import annotations

from pathlib import Path

from simulator.support.errors import Loc, SpecError

_PACKAGE = Path(__file__).resolve().parents[1]  # simulator/ (this module is in support/)
KINDS = ("cascades", "arch", "mappings")


def is_file(path: str | Path) -> bool:
    """Whether `path` names a file; False for a name no file system could hold (too long,
    a NUL byte), so that a shipped spec's name and a user's hostile text are both safe."""
    try:
        return Path(path).is_file()
    except (OSError, ValueError):
        return False


def _not_a_file(path: Path) -> str:
    """What `path` is when it exists but is no regular file ('' when it does not exist)."""
    try:
        if path.is_dir():
            return "a folder"
        if path.exists():
            return "a device or pipe" if not path.is_file() else ""
    except (OSError, ValueError):
        return ""
    return ""


def data_dir(kind: str) -> Path:
    """The folder holding the shipped specs of `kind` (one of KINDS)."""
    if kind not in KINDS:
        raise ValueError(f"unknown spec kind {kind!r}")
    for candidate in (_PACKAGE / "_data" / kind, _PACKAGE.parent / kind):
        if candidate.is_dir():
            return candidate
    raise SpecError(f"cannot find the shipped '{kind}/' folder (looked in {_PACKAGE})")


def resolve_spec(kind: str, name_or_path: str) -> Path:
    """A user's file path, or the name of a shipped spec (`attention-1pass`, `.yaml` optional)."""
    direct = Path(name_or_path)
    if is_file(direct):
        return direct
    base = data_dir(kind)
    for candidate in (base / name_or_path, base / f"{name_or_path}.yaml"):
        if is_file(candidate):
            return candidate
    what = _not_a_file(direct)
    if what:
        raise SpecError(f"{what}, not a spec file", Loc(name_or_path))
    shipped = ", ".join(sorted(p.stem for p in base.glob("*.yaml")))
    raise SpecError(f"no such file (shipped {kind}: {shipped})", Loc(name_or_path))


def resolve_sweep(name_or_path: str) -> Path:
    """A sweep file: a user's path, or a shipped sweep in `arch/sweeps/` (`pareto`)."""
    direct = Path(name_or_path)
    if is_file(direct):
        return direct
    base = data_dir("arch") / "sweeps"
    for candidate in (base / name_or_path, base / f"{name_or_path}.yaml"):
        if is_file(candidate):
            return candidate
    shipped = ", ".join(sorted(p.stem for p in base.glob("*.yaml")))
    raise SpecError(f"no such sweep file (shipped sweeps: {shipped})", Loc(name_or_path))
