"""Property-based: malformed inventories never produce a traceback, only a clean error.

Thousands of documents: mutated valid sites (wrong types, missing keys, huge numbers,
unicode), random YAML-ish text with anchors and aliases, and raw bytes.
"""

from __future__ import annotations

import copy
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from provisioner.cli import app
from provisioner.errors import InventoryError
from provisioner.inventory import check, load
from tests.conftest import FIXTURES

BASE = yaml.safe_load((FIXTURES / "valid_small.yaml").read_text())
SETTINGS = settings(max_examples=500, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40),
    st.text(alphabet=st.characters(min_codepoint=0x80, max_codepoint=0x2FFFF), max_size=20),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)),
    max_leaves=12)


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, (*prefix, i))


ALL_PATHS = [p for p in _paths(BASE) if p]


@st.composite
def mutated_sites(draw):
    doc = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(ALL_PATHS))
        parent = doc
        try:
            for part in path[:-1]:
                parent = parent[part]
            action = draw(st.sampled_from(["delete", "replace", "rename"]))
            if action == "delete":
                del parent[path[-1]]
            elif action == "replace":
                parent[path[-1]] = draw(values)
            elif isinstance(parent, dict):
                parent[draw(st.text(min_size=1, max_size=12))] = parent.pop(path[-1])
        except (KeyError, IndexError, TypeError):
            continue
    return yaml.safe_dump(doc, allow_unicode=True)


def assert_clean(path: Path) -> None:
    """load+check either succeeds or raises InventoryError with located findings, and the
    CLI exits with a documented code and no traceback."""
    try:
        check(load(path))
    except InventoryError as exc:
        assert exc.findings, "an inventory error must carry findings"
        for f in exc.findings:
            assert f.location is not None and f.location.line >= 1
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code in (0, 3, 4), (result.exit_code, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output


@SETTINGS
@given(text=mutated_sites())
def test_mutated_sites(tmp_path, text):
    p = tmp_path / "site.yaml"
    p.write_text(text)
    assert_clean(p)


yamlish = st.lists(st.sampled_from([
    "site:", "racks:", "placements:", "  - ", "&a ", "*a ", "[", "]", "{", "}", ":", ",",
    "name: r01", "u: 1", "<<: *a", "!!str ", "!!binary ", "!!python/name:os.system ",
    "'", '"', "\n", "  ", "\t", "? ", "---\n", "...\n", "%YAML 1.1\n", "1e999", "0x1F",
    "~", "null", "yes", "\u00e9\u4e2d", "#", "|\n", ">\n", "&b [*a, *a, *a]",
]), max_size=60).map("".join)


@SETTINGS
@given(text=yamlish)
def test_yamlish_text_with_anchors(tmp_path, text):
    p = tmp_path / "site.yaml"
    p.write_text(text)
    assert_clean(p)


@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=400))
def test_raw_bytes(tmp_path, data):
    p = tmp_path / "site.yaml"
    p.write_bytes(data)
    assert_clean(p)
