"""Safe YAML loading that remembers where every value came from.

Specs are untrusted input: only YAML's safe types are built, plus the Timeloop v0.4 tags
the project understands (`!Container`, `!Component`, `!Parallel`, `!Hierarchical`). Any
other tag is an error naming it. Mappings and strings carry their source position so the
readers can report `file:line:col` for a problem found long after parsing. Duplicate keys,
which PyYAML silently accepts, are rejected. So is nesting deeper than MAX_DEPTH levels:
PyYAML builds a document recursively (a RecursionError past a few hundred levels, and
libyaml's composer overflows the C stack -- a segfault -- past some tens of thousands), so
the depth is counted first on the parser's flat stream of events, which never recurses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from simulator.support.errors import Loc, SpecError

TIMELOOP_TAGS = ("Container", "Component", "Parallel", "Hierarchical")
# Collections nested in one another, at most (the shipped specs nest 12 deep).
MAX_DEPTH = 64


class LocStr(str):
    """A string with its source position (`loc`) and YAML quoting style."""

    loc: Loc
    style: str | None
    prefix: int

    def __new__(cls, value: str, loc: Loc, style: str | None = None, prefix: int = 0) -> LocStr:
        obj = super().__new__(cls, value)
        obj.loc = loc
        obj.style = style
        obj.prefix = prefix  # leading characters added by the reader, absent from the file
        return obj

    def __getnewargs__(self) -> tuple[str, Loc, str | None, int]:
        """Pickled with its position (a result crossing to another process keeps it)."""
        return (str(self), self.loc, self.style, self.prefix)

    def text_loc(self, offset: int) -> Loc:
        """Position of character `offset` of the text (best effort when quoted or multi-line)."""
        offset = max(0, offset - self.prefix)
        if self.style in ("|", ">"):
            before = str(self)[self.prefix : self.prefix + offset]
            dline = before.count("\n") + 1
            col = len(before) - (before.rfind("\n") + 1) + self.loc.col + 2
            return self.loc.shifted(dline, col)
        quote = 1 if self.style in ("'", '"') else 0
        before = str(self)[self.prefix : self.prefix + offset]
        if "\n" in before:
            return self.loc.shifted(before.count("\n"), 0)
        return Loc(self.loc.path, self.loc.line, self.loc.col + quote + offset)


class LocDict(dict):
    """A mapping with its own position and the position of each key and value."""

    loc: Loc
    tag: str | None
    key_locs: dict[Any, Loc]
    value_locs: dict[Any, Loc]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.loc, self.tag = Loc("<unknown>"), None
        self.key_locs, self.value_locs = {}, {}

    def loc_of(self, key: Any) -> Loc:
        return self.value_locs.get(key, self.key_locs.get(key, self.loc))


class LocList(list):
    """A sequence with its own position and the position of each item."""

    loc: Loc
    item_locs: list[Loc]

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.loc, self.item_locs = Loc("<unknown>"), []

    def loc_of(self, index: int) -> Loc:
        return self.item_locs[index] if 0 <= index < len(self.item_locs) else self.loc


def _loc(loader: _Loader, node: yaml.Node) -> Loc:
    mark = node.start_mark
    return Loc(loader.source, mark.line + 1, mark.column + 1)


# libyaml's parser when PyYAML has it (the same safe constructors, several times faster).
_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_Base):  # type: ignore[misc, valid-type]
    source: str = "<string>"


def _construct_mapping(loader: _Loader, node: yaml.MappingNode, tag: str | None = None) -> LocDict:
    loader.flatten_mapping(node)
    result = LocDict()
    result.loc = _loc(loader, node)
    result.tag = tag
    result.key_locs = {}
    result.value_locs = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise SpecError("a mapping key must be a plain value", _loc(loader, key_node)) from None
        if key in result:
            raise SpecError(f"duplicate key '{key}'", _loc(loader, key_node))
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_locs[key] = _loc(loader, key_node)
        result.value_locs[key] = _loc(loader, value_node)
    return result


def _construct_sequence(loader: _Loader, node: yaml.SequenceNode) -> LocList:
    result = LocList(loader.construct_object(child, deep=True) for child in node.value)
    result.loc = _loc(loader, node)
    result.item_locs = [_loc(loader, child) for child in node.value]
    return result


def _construct_str(loader: _Loader, node: yaml.ScalarNode) -> LocStr:
    return LocStr(loader.construct_scalar(node), _loc(loader, node), node.style)


def _timeloop_tag(tag: str):
    def construct(loader: _Loader, node: yaml.Node) -> LocDict:
        if isinstance(node, yaml.MappingNode):
            return _construct_mapping(loader, node, tag)
        if isinstance(node, yaml.SequenceNode):
            result = LocDict(nodes=_construct_sequence(loader, node))
        else:
            result = LocDict()
        result.loc, result.tag = _loc(loader, node), tag
        result.key_locs, result.value_locs = {}, {}
        return result

    return construct


def _unknown_tag(loader: _Loader, tag_suffix: str, node: yaml.Node) -> Any:
    known = ", ".join(f"!{t}" for t in TIMELOOP_TAGS)
    raise SpecError(f"unsupported YAML tag '{node.tag}' (known: {known})", _loc(loader, node))


_Loader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)
_Loader.add_constructor("tag:yaml.org,2002:seq", _construct_sequence)
_Loader.add_constructor("tag:yaml.org,2002:str", _construct_str)
for _tag in TIMELOOP_TAGS:
    _Loader.add_constructor(f"!{_tag}", _timeloop_tag(_tag))
_Loader.add_multi_constructor("!", _unknown_tag)
_Loader.add_multi_constructor("tag:", _unknown_tag)


def loads(text: str, source: str = "<string>") -> Any:
    """Parse YAML text safely; positions refer to `source`."""
    loader = _Loader(text)
    loader.source = source
    try:
        _check_depth(text, source)
        return loader.get_single_data()
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        loc = Loc(source, mark.line + 1, mark.column + 1) if mark else Loc(source)
        problem = err.problem or err.context or "invalid YAML"
        raise SpecError(f"YAML syntax error: {problem}", loc) from None
    except yaml.YAMLError as err:
        raise SpecError(f"YAML error: {err}", Loc(source)) from None
    finally:
        loader.dispose()


def _check_depth(text: str, source: str) -> None:
    """A SpecError at the first collection nested deeper than MAX_DEPTH levels, found on the
    parser's events (flat: no recursion, however deep the text)."""
    depth = 0
    for event in yaml.parse(text, Loader=_Base):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                mark = event.start_mark
                raise SpecError(
                    f"nested deeper than {MAX_DEPTH} levels",
                    Loc(source, mark.line + 1, mark.column + 1),
                )
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def located(value: Any, source: str) -> Any:
    """Plain data (dicts, lists, strings, numbers) as :func:`loads` builds it from the data's
    YAML text, every position the source itself: a generated spec read without writing and
    re-parsing its text (the mapper makes one per template of every search). Equal strings
    share one located string (each is immutable, and its position is the same)."""
    loc = Loc(source)
    strings: dict[str, LocStr] = {}

    def text(raw: str) -> LocStr:
        found = strings.get(raw)
        if found is None:
            found = strings[raw] = LocStr(raw, loc)
        return found

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            return text(item)
        if isinstance(item, dict):
            mapping = LocDict({text(str(k)): walk(v) for k, v in item.items()})
            mapping.loc = loc
            mapping.key_locs = dict.fromkeys(mapping, loc)
            mapping.value_locs = dict.fromkeys(mapping, loc)
            return mapping
        if isinstance(item, list | tuple):
            sequence = LocList([walk(v) for v in item])
            sequence.loc = loc
            sequence.item_locs = [loc] * len(sequence)
            return sequence
        return item

    return walk(value)


def read(path: str | Path) -> str:
    """A YAML file's text; a missing or unreadable file is a SpecError."""
    source = str(path)
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError("no such file", Loc(source)) from None
    except IsADirectoryError:
        raise SpecError("is a directory, not a YAML file", Loc(source)) from None
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(f"cannot read: {err}", Loc(source)) from None


def load(path: str | Path) -> Any:
    """Read and parse a YAML file; a missing or unreadable file is a SpecError."""
    return loads(read(path), str(path))
