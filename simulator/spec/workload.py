"""Workloads: a transformer's attention shapes at one sequence length.

The models are data (`cascades/workloads/*.yaml`: the paper's encoders and LLMs); the
command line can override any field (`--heads 32 --embed 128 --kv-heads 8`) or describe a
custom model. A workload turns into the rank extents of an attention cascade through the
names a mapping's `shapes:` may use (`queries`, `keys`, `embed`, `group`, `window`, ...) and
the number of independent (batch, head) instances.

Prefill (the default phase) attends `seq_len` queries to `seq_len` keys; decode
(`phase: decode`) attends one new query per request to `context` cached keys.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from simulator.spec import yamlio
from simulator.spec.yamlio import LocDict, LocList
from simulator.support.errors import Loc, SpecError
from simulator.support.paths import data_dir
from simulator.support.units import format_count, parse_count

FIELDS = ("batch", "heads", "embed", "value_embed", "dmodel", "ffn")
# Optional model fields (LLMs): K/V heads (grouped-query attention; default: heads) and the
# sliding-window width (0: full attention).
OPTIONAL = ("kv_heads", "window")
# Optional yes/no model fields: a causal (decoder) mask; a sliding window is causal too.
FLAGS = ("causal",)
# Text fields: the display name; the cascade of the model's linear layers (`--scope layer`).
TEXTS = ("label", "layer")
PHASES = ("prefill", "decode")
MASKS = ("none", "causal", "window")


@dataclass(frozen=True)
class Workload:
    name: str  # key, e.g. "bert"
    label: str  # display name, e.g. "BERT"
    batch: int
    heads: int
    embed: int  # E
    value_embed: int  # F
    dmodel: int  # D
    ffn: int  # S
    seq_len: int  # M = P in prefill; the cached context in decode unless `context` says
    # Extents that replace the mapping's rank shapes (e.g. M != P for a plain GEMM cascade).
    rank_overrides: tuple[tuple[str, int], ...] = ()
    kv_heads: int = 0  # K/V heads (0: one per query head, multi-head attention)
    window: int = 0  # sliding-window width in keys (0: full attention)
    phase: str = "prefill"  # or decode: one new query per request
    context: int = 0  # decode: cached keys (0: seq_len)
    causal: bool = False  # a causal mask: each query sees the keys up to its own position
    # The cascade of the model's linear layers (`--scope layer`; "": the linear-layer
    # spec's, an encoder layer's six GEMMs): a decoder with a gated FFN names its own.
    layer: str = ""

    @property
    def mask(self) -> str:
        """The model's attention mask: `window` (the last W keys up to the query), `causal`
        or `none`."""
        return "window" if self.window else "causal" if self.causal else "none"

    @property
    def grouped(self) -> bool:
        """Fewer K/V heads than query heads (grouped-query or multi-query attention)."""
        return self.kv < self.heads

    def attention(self) -> str:
        """The model's attention in words: `multi-head`, `grouped-query, causal`, ..."""
        words = ["grouped-query" if self.grouped else "multi-head"]
        if self.mask == "window":
            words.append(f"sliding window of {format_count(self.window)}")
        elif self.mask == "causal":
            words.append("causal")
        return ", ".join(words)

    @property
    def instances(self) -> int:
        """Independent attention problems of a multi-head cascade: batch x heads."""
        return self.batch * self.heads

    @property
    def kv(self) -> int:
        """K/V heads (= heads for multi-head attention)."""
        return self.kv_heads or self.heads

    @property
    def group(self) -> int:
        """Query heads sharing one K/V head (1: multi-head, heads: multi-query)."""
        return self.heads // self.kv

    @property
    def queries(self) -> int:
        """Query positions per (batch, head): the sequence, or 1 in decode."""
        return 1 if self.phase == "decode" else self.seq_len

    @property
    def keys(self) -> int:
        """Key/value positions per (batch, head): the sequence, or the cached context."""
        if self.phase == "decode":
            return self.context or self.seq_len
        return self.seq_len

    @property
    def attended_keys(self) -> int:
        """Keys some query attends: under a sliding window of W the last W + P - 1 (the
        queries are the last P positions; a decode step's last W), else every key."""
        if self.window:
            return min(self.keys, self.window + self.queries - 1)
        return self.keys

    @property
    def seq_label(self) -> str:
        return format_count(self.seq_len)

    def describe(self) -> str:
        """The workload in one line; a rank `--shape` sets shows the user's value (E, F in
        place of the model's; others added)."""
        shape = dict(self.rank_overrides)
        heads = f"H={self.heads}" + (f", KV={self.kv}" if self.kv != self.heads else "")
        extra = "".join(f", {r}={v}" for r, v in sorted(shape.items()) if r not in ("E", "F"))
        text = (
            f"{self.label} (B={self.batch}, {heads}, E={shape.get('E', self.embed)}, "
            f"F={shape.get('F', self.value_embed)}, D={self.dmodel}, S={self.ffn}"
            + (f", W={self.window}" if self.window else "")
            + (", causal" if self.causal and not self.window else "")
            + extra
            + ")"
        )
        if self.phase == "decode":
            return f"{text} decoding 1 token against {format_count(self.keys)} cached tokens"
        return f"{text} at {self.seq_label} tokens"

    def fields(self) -> dict[str, object]:
        """The names a mapping's `shapes:` and `instances:` may use, with their values."""
        return {
            "label": self.label,
            "name": self.name,
            "model": self.name,
            "seq": self.seq_len,
            "seq_len": self.seq_len,
            "batch": self.batch,
            "heads": self.heads,
            "kv_heads": self.kv,
            "group": self.group,
            "embed": self.embed,
            "value_embed": self.value_embed,
            "dmodel": self.dmodel,
            "ffn": self.ffn,
            "window": self.window or self.keys,
            "queries": self.queries,
            "keys": self.keys,
            "attended_keys": self.attended_keys,
            "context": self.keys,
        }


def workloads_file() -> Path:
    """The paper's workloads (and the default sequence lengths)."""
    return data_dir("cascades") / "workloads" / "transformers.yaml"


def workload_files() -> list[Path]:
    """Every shipped workloads file: the paper's first, then the others by name."""
    folder = data_dir("cascades") / "workloads"
    first = workloads_file()
    return [first] + sorted(p for p in folder.glob("*.yaml") if p != first)


# Every shipped workloads file's models, by the files' (path, size, modification time):
# a sweep or a validation makes thousands of workloads from the same files.
_SHIPPED: dict[tuple, dict[str, Workload]] = {}


def load_models(path: str | Path | None = None) -> dict[str, Workload]:
    """The models of a workloads file, or of every shipped one (sequence length 0 until one
    is chosen)."""
    if path is not None:
        return _load_models_file(Path(path))
    files = workload_files()
    key = tuple((str(f), *_stamp(f)) for f in files)
    if key not in _SHIPPED:
        _SHIPPED.clear()
        _SHIPPED[key] = _load_shipped(files)
    return dict(_SHIPPED[key])


def _stamp(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
    except OSError:
        return (-1, -1)
    return (st.st_size, st.st_mtime_ns)


def _load_shipped(files: list[Path]) -> dict[str, Workload]:
    out: dict[str, Workload] = {}
    for file in files:
        models = yamlio.load(file).get("workloads")
        for key, model in _load_models_file(file).items():
            if key in out:
                raise SpecError(
                    f"workload '{key}' is defined twice (also in an earlier workloads file)",
                    models.loc_of(key) if isinstance(models, LocDict) else Loc(str(file)),
                )
            out[key] = model
    return out


def _load_models_file(path: Path) -> dict[str, Workload]:
    data = yamlio.load(path)
    if not isinstance(data, LocDict) or not isinstance(data.get("workloads"), LocDict):
        raise SpecError("a workloads file needs a 'workloads:' mapping", Loc(str(path), 1, 1))
    out = {}
    models = data["workloads"]
    for key, entry in models.items():
        loc = models.loc_of(key)
        if not isinstance(entry, LocDict):
            raise SpecError(f"workload '{key}' must be a mapping of its fields", loc)
        for field in entry:
            if field not in (*FIELDS, *OPTIONAL, *FLAGS, *TEXTS, "description", "source"):
                raise SpecError(
                    f"unknown field '{field}' of workload '{key}' (allowed: "
                    f"{', '.join((*FIELDS, *OPTIONAL, *FLAGS, *TEXTS))}, description, source)",
                    entry.key_locs[field],
                )
        layer = entry.get("layer", "")
        if not isinstance(layer, str):
            raise SpecError(
                f"'layer' of workload '{key}' names the cascade of its linear layers",
                entry.loc_of("layer"),
            )
        flags = {}
        for field in FLAGS:
            if field in entry:
                if not isinstance(entry[field], bool):
                    raise SpecError(
                        f"'{field}' of workload '{key}' must be true or false",
                        entry.loc_of(field),
                    )
                flags[field] = entry[field]
        values = {}
        for field in (*FIELDS, *OPTIONAL):
            if field in ("value_embed", *OPTIONAL) and field not in entry:
                continue
            if field not in entry:
                raise SpecError(f"workload '{key}' needs '{field}'", entry.loc)
            value = entry[field]
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise SpecError(
                    f"'{field}' of workload '{key}' must be a positive integer", entry.loc_of(field)
                )
            values[field] = value
        values.setdefault("value_embed", values["embed"])
        if values["heads"] % values.get("kv_heads", values["heads"]):
            raise SpecError(
                f"kv_heads of workload '{key}' must divide its heads", entry.loc_of("kv_heads")
            )
        if values.get("window") and flags.get("causal") is False:
            raise SpecError(
                f"workload '{key}': a sliding window is causal (the last W keys up to each "
                "query); drop 'causal: false'",
                entry.loc_of("causal"),
            )
        out[str(key).lower()] = Workload(
            str(key).lower(),
            str(entry.get("label", key)),
            seq_len=0,
            causal=bool(flags.get("causal", False) or values.get("window")),
            layer=str(layer),
            **values,
        )
    return out


def default_sequence_lengths(path: str | Path | None = None) -> list[int]:
    path = Path(path) if path is not None else workloads_file()
    data = yamlio.load(path)
    raw = data.get("sequence_lengths") if isinstance(data, LocDict) else None
    if not isinstance(raw, LocList):
        return []
    return [parse_count(v, "sequence_lengths") for v in raw]


def make_workload(
    model: str | None,
    seq: str | int,
    overrides: dict[str, int | bool | None] | None = None,
    models: dict[str, Workload] | None = None,
    phase: str = "prefill",
    context: str | int | None = None,
    shape: dict[str, int] | None = None,
) -> Workload:
    """A workload from a model name (or `custom`), a sequence length and field overrides
    (`kv_heads`, `window` -- 0: none --, `causal` too); `phase="decode"` decodes one token
    per request against `context` cached tokens (default: the sequence length); `shape`:
    extents of cascade ranks no workload field sizes (`--shape E=4096`). The label names
    the overrides that change the model."""
    models = models if models is not None else load_models()
    seq_len = parse_count(seq, what="--seq")
    if phase not in PHASES:
        raise SpecError(f"--phase must be one of {', '.join(PHASES)}, got '{phase}'")
    cached = 0 if context is None else parse_count(context, what="--context")
    if cached and phase != "decode":
        raise SpecError("--context is the cache of a decode step: add --phase decode")
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    for key, value in given.items():
        if key in FLAGS:
            if not isinstance(value, bool):
                raise SpecError(f"workload field '{key}' is yes or no, got {value!r}")
            continue
        if key not in (*FIELDS, *OPTIONAL):
            raise SpecError(f"unknown workload field '{key}'")
        if isinstance(value, bool) or value < 0 or (value == 0 and key != "window"):
            raise SpecError(f"--{key.replace('_', '-')} must be positive, got {value}")
    if model is not None and not model.strip():
        raise SpecError("--model is empty: name a model (bert, llama3-8b, ...) or custom")
    name = (model or "custom").lower()
    if name == "custom":
        missing = [f for f in ("heads", "embed") if f not in given]
        if missing:
            raise SpecError(f"a custom model needs {' and '.join('--' + m for m in missing)}")
        base = Workload(
            "custom",
            "custom",
            batch=given.get("batch", 64),
            heads=given["heads"],
            embed=given["embed"],
            value_embed=given.get("value_embed", given["embed"]),
            dmodel=given.get("dmodel", given["heads"] * given["embed"]),
            ffn=given.get("ffn", 4 * given.get("dmodel", given["heads"] * given["embed"])),
            seq_len=seq_len,
            kv_heads=given.get("kv_heads", 0),
            window=given.get("window", 0),
            causal=bool(given.get("causal", False) or given.get("window", 0)),
        )
        if given.get("window") and given.get("causal") is False:
            raise SpecError(_WINDOW_IS_CAUSAL)
    else:
        if name not in models:
            raise SpecError(f"unknown model '{model}' (known: {', '.join(sorted(models))}, custom)")
        base = dataclasses.replace(models[name], seq_len=seq_len)
        if "embed" in given and "value_embed" not in given:
            given["value_embed"] = given["embed"]
        changed = {k: v for k, v in given.items() if getattr(base, k) != v}
        if changed.get("window") and given.get("causal") is False:
            raise SpecError(_WINDOW_IS_CAUSAL)
        if base.window and given.get("causal") is False and "window" not in given:
            raise SpecError(
                f"{base.label} attends through a sliding window of {base.window}, which is "
                "causal: add --window 0 for full attention without a mask"
            )
        if changed.get("window"):
            changed["causal"] = True  # a sliding window is causal
        if changed:
            label = (
                base.label
                + "("
                + ",".join(f"{k}={_text(v)}" for k, v in sorted(changed.items()))
                + ")"
            )
            base = dataclasses.replace(base, label=label, **changed)
    if base.heads % base.kv:
        raise SpecError(f"--kv-heads {base.kv} must divide the {base.heads} heads")
    if base.kv_heads == base.heads:
        base = dataclasses.replace(base, kv_heads=0)
    if phase == "decode":
        base = dataclasses.replace(base, phase=phase, context=cached)
    if shape:
        base = dataclasses.replace(base, rank_overrides=tuple(sorted(shape.items())))
    return base


# The workload quantities a cascade rank may be sized by (the binder's facts name which) that
# the workload's own flags state: a `--shape` of such a rank must agree with them. A width
# (`embed`, `value_embed`) is the cascade's to set: `--shape E=4096` sizes an RMSNorm's E.
STATED_BY = {
    "keys": "--seq (--context in decode)",
    "queries": "--seq (one query in decode)",
    "group": "--heads / --kv-heads",
    "window": "--window",
}


def settle_shape(workload: Workload, sized: dict[str, str]) -> Workload:
    """The workload with its `--shape` settled against the ranks the workload sizes
    (`sized`: rank -> workload quantity): a rank whose extent is the workload's own is
    dropped (one workload, however it is stated: `--seq 4K --shape M=4096` is `--seq 4K`);
    one that contradicts the sequence or head structure is one line naming the flag that
    states it; a width the cascade sets (E, F) stays."""
    fields = workload.fields()
    kept = []
    for rank, value in workload.rank_overrides:
        quantity = sized.get(rank)
        if quantity is None:
            kept.append((rank, value))
            continue
        own = fields[quantity]
        if value == own:
            continue
        if quantity in STATED_BY:
            raise SpecError(
                f"--shape {rank}={value}: the workload sizes {rank} by its {quantity} "
                f"({own}); state it with {STATED_BY[quantity]}, not --shape"
            )
        kept.append((rank, value))
    return dataclasses.replace(workload, rank_overrides=tuple(kept))


def parse_shape(texts: list[str] | None, what: str = "--shape") -> dict[str, int]:
    """`--shape E=4096,F=14K` (repeatable): rank name -> extent; one line when malformed."""
    out: dict[str, int] = {}
    for text in texts or []:
        for item in str(text).split(","):
            item = item.strip()
            if not item:
                continue
            name, eq, value = item.partition("=")
            name = name.strip()
            if not eq or not name.isidentifier() or not name[0].isupper():
                raise SpecError(
                    f"{what}: '{item}' is not RANK=N (a rank name in capitals, e.g. E=4096)"
                )
            if name in out:
                raise SpecError(f"{what}: rank {name} is given twice")
            out[name] = parse_count(value.strip(), what=f"{what} {name}")
    return out


_WINDOW_IS_CAUSAL = (
    "a sliding window is causal (the last W keys up to each query): drop --no-causal, or "
    "give --window 0 for no window"
)


def _text(value: int | bool) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
