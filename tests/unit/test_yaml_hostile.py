"""Hostile YAML: whatever the bytes, the loader ends with a clean error (exit 3, file and
line) in bounded time and memory. Guards work on what the parser produces (events: depth,
expanded node count, aliases), not on how the text looks."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provisioner.errors import InventoryError
from provisioner.inventory import load
from tests.conftest import FIXTURES, ROOT

VALID = (FIXTURES / "valid_small.yaml").read_text()
# Every line break libyaml accepts, and the ones it does not.
BREAKS = ["\n", "\r\n", "\r", "\x85", "\u2028", "\u2029"]


def _code(path: Path) -> str:
    with pytest.raises(InventoryError) as exc:
        load(path)
    assert exc.value.findings and exc.value.findings[0].location is not None
    return exc.value.findings[0].code


def test_alias_bomb_in_utf16_evades_no_guard(tmp_path):
    """The old guard searched the bytes for '&' after a space: UTF-16 text has a NUL there."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    p = tmp_path / "site.yaml"
    p.write_bytes("\n".join(lines).encode("utf-16"))
    assert _code(p) == "yaml-alias-bomb"


def test_alias_bomb_on_unicode_line_breaks_is_located_on_the_editor_line(tmp_path):
    """Entries separated by U+2028 (a line break to libyaml, not to an editor)."""
    parts = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    parts += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    p = tmp_path / "site.yaml"
    p.write_text("# bomb\n" + "\u2028".join(parts), encoding="utf-8")
    with pytest.raises(InventoryError) as exc:
        load(p)
    f = exc.value.findings[0]
    assert f.code == "yaml-alias-bomb" and f.location.line == 2


def test_recursive_alias_is_refused(write_site):
    assert _code(write_site("site: &a {name: x, more: [*a]}\nracks: []\n")) == "yaml-alias"


@pytest.mark.parametrize("opener", ["[", "{a: ", "- "])
def test_very_deep_nesting_does_not_crash_the_process(tmp_path, opener):
    """50,000 levels crashed libyaml's composer with SIGSEGV: the CLI must exit 3."""
    n = 50_000
    if opener == "- ":
        body = "".join(" " * i + "-\n" for i in range(2000))  # block style, deep indentation
    else:
        closer = "]" if opener == "[" else "}"
        body = opener * n + ("1" if opener != "[" else "") + closer * n
    p = tmp_path / "site.yaml"
    p.write_text("site: {name: x}\nracks: " + ("\n" if opener == "- " else "") + body + "\n")
    r = subprocess.run([sys.executable, "-m", "provisioner", "validate", str(p)],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 3, (r.returncode, r.stderr[-500:])
    assert "nested too deeply" in r.stderr and "site.yaml:" in r.stderr


def _after_site(text: str, line: str) -> str:
    """text with `line` added after its one-line `site: {...}` mapping."""
    lines = text.split("\n")
    at = next(i for i, ln in enumerate(lines) if ln.startswith("site: {name: fixture,"))
    return "\n".join([*lines[:at + 1], line, *lines[at + 1:]])


@pytest.mark.parametrize("brk", ["\x85", "\u2028", "\u2029"])
def test_line_numbers_count_only_real_line_ends(write_site, brk):
    """libyaml counts NEL/LS/PS as line breaks; editors and grep do not: report the line
    an editor shows."""
    text = _after_site(VALID.replace(
        "site: {name: fixture,", f'site: {{name: fixture, description: "a{brk}b{brk}c",'),
        "bogus: 1")
    with pytest.raises(InventoryError) as exc:
        load(write_site(text))
    f = exc.value.findings[0]
    want = text.split("\n").index("bogus: 1") + 1
    assert (f.location.line, f.location.column) == (want, 1), f.format()


@pytest.mark.parametrize("brk", ["\r\n", "\r"])
def test_line_numbers_with_crlf_and_cr(write_site, brk):
    text = _after_site(VALID, "bogus: 1")
    with pytest.raises(InventoryError) as exc:
        load(write_site(text.replace("\n", brk)))
    f = exc.value.findings[0]
    want = text.split("\n").index("bogus: 1") + 1
    assert "bogus" in f.message and f.location.line == want, f.format()


_MEM_SCRIPT = textwrap.dedent("""
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[2]), int(sys.argv[2])))
    from provisioner.errors import InventoryError
    from provisioner.inventory import load
    try:
        load(sys.argv[1])
    except InventoryError as exc:
        print(exc.findings[0].code)
        sys.exit(3)
    sys.exit(0)
""")
MEM_LIMIT = 2 * 1024 * 1024 * 1024  # 2 GiB of address space


def _load_limited(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _MEM_SCRIPT, str(path), str(MEM_LIMIT)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


@pytest.mark.parametrize("doc", [
    # billion laughs, nested through mappings and merge keys
    "a: &a {x: 1, y: 2, z: 3, w: 4, v: 5, u: 6, t: 7, s: 8, r: 9, q: 10}\n"
    + "".join(f"b{i}: &b{i} {{"
              + ", ".join(f"k{j}: *" + ("a" if i == 0 else f"b{i - 1}") for j in range(10))
              + "}\n" for i in range(9)),
    # aliases of aliases in flow sequences, inside the racks key (reaches pydantic)
    "site: {name: x}\nl0: &l0 [1, 1, 1, 1, 1, 1, 1, 1]\n"
    + "".join(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 8) + "]\n" for i in range(1, 9))
    + "racks: *l8\n",
    # a list of a million short scalars: no alias at all, just more nodes than allowed
    "site: {name: x}\nracks: [" + "1," * 1_000_000 + "1]\n",
])
def test_bounded_memory(tmp_path, doc):
    p = tmp_path / "site.yaml"
    p.write_text(doc)
    r = _load_limited(p)
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr[-800:])


def test_node_budget_is_shared_by_the_files_of_a_site(tmp_path, monkeypatch):
    """Splitting a large document over many files is no way around the node limit."""
    from provisioner.inventory import loader

    monkeypatch.setattr(loader, "MAX_EXPANDED_NODES", 1000)
    for i in range(4):
        (tmp_path / f"part{i}.yaml").write_text(
            f"x{i}: [" + ", ".join(["1"] * 300) + "]\n")
    with pytest.raises(InventoryError) as exc:
        load(tmp_path)
    f = exc.value.findings[0]
    assert f.code == "yaml-alias-bomb" and f.location.file.endswith("part3.yaml")
    (tmp_path / "part3.yaml").unlink()
    assert _code(tmp_path) != "yaml-alias-bomb"  # 3 x 300 fit: other errors only


HOSTILE_ATOMS = ["site:", "racks:", "placements:", "- ", "&a ", "*a ", "&b ", "*b ", "[", "]",
                 "{", "}", ": ", ", ", "<<: *a", "? ", "---", "...", "'", '"', "x", "  ",
                 "\t", "!!str ", "!!map ", "%TAG ! tag:x,2000:\n", "#c", "|", ">", *BREAKS,
                 "&a [*b, *b, *b, *b, *b, *b, *b, *b]", "&b [*a, *a, *a, *a, *a, *a, *a, *a]",
                 "&b {k: *a, l: *a, m: *a, n: *a}"]


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(atoms=st.lists(st.sampled_from(HOSTILE_ATOMS), max_size=80),
       depth=st.integers(0, 400), encoding=st.sampled_from(["utf-8", "utf-16", "utf-8-sig"]))
def test_generated_documents_with_every_line_break(tmp_path, atoms, depth, encoding):
    text = "".join(atoms) + "[" * depth + "]" * depth
    p = tmp_path / "site.yaml"
    p.write_bytes(text.encode(encoding, errors="surrogatepass"))
    try:
        load(p)
    except InventoryError as exc:
        assert exc.findings
        for f in exc.findings:
            assert f.location is not None and f.location.line >= 1
            # +2: at the end of a text without a final line break libyaml adds one
            assert f.location.line <= text.count("\n") + text.count("\r") + 2


def test_generated_documents_under_a_memory_limit(tmp_path):
    """The same generated documents, in a process that may not use more than MEM_LIMIT."""
    script = textwrap.dedent("""
        import pathlib, resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[2]), int(sys.argv[2])))
        from tests.unit.test_yaml_hostile import test_generated_documents_with_every_line_break
        test_generated_documents_with_every_line_break(tmp_path=pathlib.Path(sys.argv[1]))
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", script, str(tmp_path), str(MEM_LIMIT)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stderr[-1500:])
