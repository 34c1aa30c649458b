"""Large sites stay bounded: the loader keeps no PyYAML node tree, its compact position
table (yamltree) places every key exactly where the node tree did, peak memory is a small
multiple of the YAML's size, and a site too large for the memory available is refused
with an inventory error (exit 3), never an internal error."""

from __future__ import annotations

import gc
import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provisioner.inventory import load
from provisioner.inventory.sourcemap import _child
from provisioner.inventory.yamlsafe import (
    MEMORY_PER_YAML_BYTE,
    Lines,
    Loader,
    construct,
    parse,
    parse_tree,
)
from tests.conftest import ROOT


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("inventory_scale",
                                                  ROOT / "bench" / "inventory_scale.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _node_paths(node: yaml.Node, prefix: tuple[Any, ...] = (), depth: int = 0
                ) -> list[tuple[Any, ...]]:
    """Every key path of a composed tree (keys as their text, items by index)."""
    out = [prefix]
    if depth > 12:
        return out
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode):
                out += _node_paths(v, (*prefix, k.value), depth + 1)
    elif isinstance(node, yaml.SequenceNode):
        for i, c in enumerate(node.value):
            out += _node_paths(c, (*prefix, i), depth + 1)
    return out


def _walk_nodes(root: yaml.Node, path: tuple[Any, ...], lines: Lines
                ) -> tuple[tuple[int, int], tuple[int, int]] | None:
    key = node = root
    for part in path:
        child = _child(node, part)
        if child is None:
            return None
        key, node = child
    return lines.position(key.start_mark), lines.position(node.start_mark)


def _walk_tree(tree: Any, path: tuple[Any, ...]
               ) -> tuple[tuple[int, int], tuple[int, int]] | None:
    key = node = 0
    for part in path:
        child = tree.child(node, part)
        if child is None:
            return None
        key, node = child
    return tree.position(key), tree.position(node)


def assert_alike(raw: bytes) -> None:
    """parse_tree builds PyYAML's data (or its error), and its table places every key
    path at the line and column of PyYAML's node tree, key and value."""
    def outcome(fn: Any) -> Any:
        try:
            return fn(raw, "f.yaml")
        except Exception as exc:  # compared, not hidden
            return (type(exc).__name__, str(exc))

    theirs, ours = outcome(parse), outcome(parse_tree)
    if isinstance(theirs, tuple) and len(theirs) == 2:
        assert ours == theirs
        return
    assert ours[0] == theirs[0] and ours[3] == theirs[3]
    node, tree, lines = theirs[1], ours[1], theirs[2]
    assert (node is None) == (tree is None)
    if node is None:
        return
    for path in _node_paths(node):
        assert _walk_tree(tree, path) == _walk_nodes(node, path, lines), path


def test_every_yaml_file_of_the_repository_is_placed_alike():
    files = subprocess.run(["git", "ls-files", "*.yaml", "*.yml"], cwd=ROOT, text=True,
                           capture_output=True, check=True).stdout.split()
    assert len(files) > 50
    for name in files:
        assert_alike((ROOT / name).read_bytes())


@pytest.mark.parametrize("text", [
    "a: 1\nb: [true, null, 1.5, 0x1f, 2024-01-02]\nc: {d: '012', e: !!str 12}\n",
    "base: &b {x: 1, y: [1, 2]}\nthis:\n  <<: *b\n  y: 3\nthat: {<<: [*b, {z: 4}]}\n",
    "a: &s shared\nb: *s\nc: &l [1, *s]\nd: [*l, *l]\n*s : aliased key\n",
    "? [a, b]\n: unhashable\n",
    "{1: one, true: yes, null: none, 2001-12-14: date, 1.5: f}\n",
    "= : value key\nx: y\n",
    "s: !!set {a, b}\no: !!omap [{a: 1}, {b: 2}]\nbin: !!binary aGVsbG8=\n",
    "x: !unknown tag\n", "x: !!int notanint\n", "a: *nope\n", "a: &x 1\nb: &x 2\n",
    "dup: 1\ndup: 2\n", "a: 1\n---\nb: 2\n", "", "# only a comment\n", "---\n",
    "[a, [b, [c, {d: [e]}]], !!str 5]\n", "just a scalar\n", "m: !!map {a: 1}\n",
    "a:\n  b: x\u2028y\n  c: [1,\u0085 2]\nd: z\n", "\ufeffa: {b: c}\r\nd: e\r\n",
    "a: {x: !!int nope, <<: 5}\n", "k: &k v\n? *k\n: w\n",
])
def test_yaml_features_are_placed_alike(text):
    assert_alike(text.encode())
    assert_alike(text.encode("utf-16"))


yamlish = st.lists(st.sampled_from([
    "site:", "racks:", "  - ", "&a ", "*a ", "&b ", "*b ", "[", "]", "{", "}", ":", ",",
    "name: r01", "u: 1", "<<: *a", "!!str ", "!!set ", "'", '"', "\n", "  ", "? ", "---\n",
    "~", "yes", "\u00e9", "#", "|\n", "\u2028", "\r\n", "x", "1", "- ",
]), max_size=40).map("".join)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=yamlish)
def test_yamlish_text_is_placed_alike(text):
    assert_alike(text.encode())


def test_construct_memo_does_not_outlive_the_build():
    """yamlsafe.construct's memo is in a closure cycle: with the GC paused (as the loader
    runs) it kept every mapping and list it built alive for good."""
    loader = Loader("a: {b: [1, 2]}\n")
    node = loader.get_single_node()
    gc.disable()
    try:
        data = construct(loader, node)
        inner = data["a"]
        before = sys.getrefcount(inner)
        del data
        assert sys.getrefcount(inner) == before - 1  # only our own name holds it now
    finally:
        gc.enable()
        loader.dispose()


def test_a_loaded_site_keeps_no_yaml_node_tree(tmp_path):
    """The node tree was kept for line numbers: ~45 bytes of memory per byte of YAML."""
    path = tmp_path / "site.yaml"
    path.write_text(_bench().generate(50))
    gc.collect()
    loaded = load(path)
    gc.unfreeze()  # the loader freezes what it built: bring it back in the GC's sight
    gc.collect()
    nodes = sum(1 for o in gc.get_objects() if isinstance(o, yaml.Node))
    assert nodes == 0, nodes
    loc = loaded.sources.locate(("placements", 3, "nodes", 0, "bmc", "address"))
    line = path.read_text().splitlines()[loc.line - 1]
    assert line[loc.column - 1:].startswith("10.16.0.")  # the address, where it is written


_PEAK = textwrap.dedent("""
    import json, sys
    from provisioner.inventory import load, shipped_catalog
    def peak_kb():  # VmHWM: ru_maxrss would carry pytest's own peak over the fork
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    shipped_catalog()
    before = peak_kb()
    load(sys.argv[1])
    print(json.dumps([before, peak_kb()]))
""")


def test_peak_memory_is_a_small_multiple_of_the_yaml(tmp_path):
    """Loading 5,000 generated nodes (~1 MB of YAML) in a child of its own: the peak RSS
    above the child's RSS before loading was ~65x the file (node tree, data and models all
    at once); now ~18x."""
    path = tmp_path / "site.yaml"
    path.write_text(_bench().generate(5000))
    out = subprocess.run([sys.executable, "-c", _PEAK, str(path)], capture_output=True,
                         text=True, check=True, cwd=ROOT).stdout
    before_kb, peak_kb = json.loads(out)
    assert peak_kb > before_kb  # the load itself was measured
    ratio = (peak_kb - before_kb) * 1024 / path.stat().st_size
    assert ratio <= 30, ratio


_LIMITED = textwrap.dedent("""
    import resource, sys
    from typer.testing import CliRunner
    from provisioner.cli import app
    runner = CliRunner()
    runner.invoke(app, ["validate", sys.argv[2]])  # warm: imports, the shipped catalog
    for line in open("/proc/self/status"):
        if line.startswith("VmSize:"):
            used = int(line.split()[1]) * 1024
    limit = used + int(sys.argv[3])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    result = runner.invoke(app, ["validate", sys.argv[1]])
    print(result.output)
    sys.exit(result.exit_code)
""")


def _validate_limited(site: Path, small: Path, headroom_bytes: int
                      ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _LIMITED, str(site), str(small),
                           str(headroom_bytes)], capture_output=True, text=True, cwd=ROOT)


def test_a_site_too_large_for_the_memory_is_refused_by_name(tmp_path):
    """2,000 nodes (~420 KB) with 4 MB of address space to spare: refused before parsing,
    naming the file, its size and what it would need (was: internal error: MemoryError)."""
    site, small = tmp_path / "big.yaml", tmp_path / "small.yaml"
    bench = _bench()
    site.write_text(bench.generate(2000))
    small.write_text(bench.generate(10))
    r = _validate_limited(site, small, 4 * 2**20)
    assert r.returncode == 3, (r.returncode, r.stdout[-1500:], r.stderr[-1500:])
    out = " ".join(r.stdout.split())
    assert "internal error" not in out
    assert "big.yaml" in out and "MB of YAML" in out and "needs about" in out, out
    assert "is available" in out and "ran out" not in out, out  # refused before parsing


def test_running_out_of_memory_while_loading_is_an_inventory_error(tmp_path):
    """Within the estimate but far costlier per byte (600,000 empty mappings, 3 bytes and
    ~90 bytes of memory each): the MemoryError while building becomes the same clean
    refusal (was: internal error: MemoryError)."""
    site, small = tmp_path / "dense.yaml", tmp_path / "small.yaml"
    site.write_text("site: {name: x}\nracks: [" + "{}," * 600_000 + "{}]\n")
    small.write_text(_bench().generate(10))
    # the estimate passes (24x, with room for what the CLI allocates before it); building
    # needs over 32x, and the MemoryError is Python's own (pydantic-core's would abort)
    headroom = site.stat().st_size * (MEMORY_PER_YAML_BYTE + 4)
    r = _validate_limited(site, small, headroom)
    out = " ".join(r.stdout.split())
    assert r.returncode == 3, (r.returncode, out[-1500:], r.stderr[-1500:])
    assert "internal error" not in out and "dense.yaml" in out, out
    assert "the memory ran out while loading it" in out, out


def test_the_bench_runs_in_smoke_mode():
    """Every bench runs in CI with --smoke: the generated site passes validate (it lacked
    software.doca) and the table, peak RSS included, is printed."""
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "inventory_scale.py"), "--smoke"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    header, row = r.stdout.splitlines()[1:3]
    assert "peak MB" in header and "RSS/yaml" in header
    assert row.split()[0] == "200"
