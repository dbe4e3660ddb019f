"""The cascade parser's kept tables (simulator/cascade/transform.py, lark's `cache`): a
parser read back from them parses every shipped cascade to the IR a parser built afresh
gives; none is kept with caching off; a damaged file is rebuilt, silently."""

from __future__ import annotations

import pytest

from simulator.cascade import transform
from simulator.cascade.parse import load_cascade

from .conftest import CASCADES, DATA

BUILD = transform._parser.__wrapped__  # the parser's construction, without its per-process cache
FILES = sorted(CASCADES.glob("*.yaml")) + sorted((DATA / "paper_cascades_heldout").glob("*.yaml"))


def _parser(monkeypatch, cache: str):
    """A parser built (or read back) with the cache folder `cache`."""
    monkeypatch.setenv("FUSEMAX_SIM_CACHE", cache)
    return BUILD()


def _parsed(monkeypatch, parser, files=FILES) -> list:
    monkeypatch.setattr(transform, "_parser", lambda: parser)
    transform._parse_kept.cache_clear()
    try:
        return [load_cascade(f) for f in files]
    finally:
        transform._parse_kept.cache_clear()


def test_a_parser_read_from_its_kept_tables_parses_as_one_built_afresh(monkeypatch, tmp_path):
    afresh = _parser(monkeypatch, "off")
    assert not (tmp_path / "parser").exists()
    built = _parser(monkeypatch, str(tmp_path))  # builds, keeps its tables
    (kept,) = (tmp_path / "parser").iterdir()
    stamp = kept.stat().st_mtime_ns
    read = _parser(monkeypatch, str(tmp_path))  # reads them back
    assert kept.stat().st_mtime_ns == stamp  # read, not written again
    want = _parsed(monkeypatch, afresh)
    assert len(want) > 40
    assert _parsed(monkeypatch, read) == want
    assert _parsed(monkeypatch, built, FILES[:5]) == want[:5]


def test_caching_off_keeps_no_tables(monkeypatch, tmp_path):
    monkeypatch.setenv("FUSEMAX_SIM_CACHE", "off")
    assert transform._tables_file("grammar") is False
    monkeypatch.setenv("FUSEMAX_SIM_CACHE", str(tmp_path))
    one, two = transform._tables_file("grammar"), transform._tables_file("grammar 2")
    assert one != two and str(tmp_path) in one  # one file per grammar text


@pytest.mark.parametrize("damage", [b"", b"not a digest\n", b"\x80\x04garbage"])
def test_a_damaged_tables_file_is_rebuilt_without_a_word(monkeypatch, tmp_path, capfd, damage):
    _parser(monkeypatch, str(tmp_path))
    (kept,) = (tmp_path / "parser").iterdir()
    kept.write_bytes(damage)
    parser = _parser(monkeypatch, str(tmp_path))
    afresh = _parser(monkeypatch, "off")
    assert _parsed(monkeypatch, parser, FILES[:3]) == _parsed(monkeypatch, afresh, FILES[:3])
    assert capfd.readouterr().err == ""
    assert kept.stat().st_size > 1000  # written again, whole
