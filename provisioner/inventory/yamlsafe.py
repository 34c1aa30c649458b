"""Parse untrusted YAML bytes into a node tree and plain data, in bounded time and memory.

The guards look at what libyaml's parser produces, never at how the text looks: one pass
over the event stream (iterative in libyaml, so no recursion) measures nesting depth, the
size of the document once every alias is expanded, and refuses aliases of an anchor that is
still open (a recursive structure). Only a document that passes is composed (libyaml's
composer and PyYAML's constructor recurse: 50,000 levels crash the process) and handed on.

Line numbers: libyaml also ends a line at NEL (U+0085), LS (U+2028) and PS (U+2029);
editors, grep and sed do not. `Lines` turns libyaml's marks into the line and column an
editor shows (a line ends at LF, CRLF or a lone CR).
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import resource
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from provisioner.errors import InventoryError
from provisioner.inventory import yamltree
from provisioner.inventory.findings import Finding, Location, Severity
from provisioner.inventory.yamltree import Tree

try:  # libyaml is in every PyYAML wheel for Linux; fall back rather than fail.
    Loader: type[yaml.CSafeLoader | yaml.SafeLoader] = yaml.CSafeLoader
except AttributeError:  # pragma: no cover
    Loader = yaml.SafeLoader

# A real inventory nests about 8 levels; PyYAML's constructor recurses once per level.
MAX_DEPTH = 64
# A document may expand (through aliases) to at most this many nodes: stops "billion laughs".
# A 10,000-node site (bench/inventory_scale.py) is about 300,000 nodes and loads in ~170 MB;
# a flat list at the limit peaks at ~1.7 GB (each node carries two marks, then pydantic).
MAX_EXPANDED_NODES = 1_000_000
MAX_FILE_BYTES = 256 * 1024 * 1024
_UNICODE_BREAKS = ("\x85", "\u2028", "\u2029")
_UTF8_BREAKS = tuple(b.encode() for b in _UNICODE_BREAKS)
_T = TypeVar("_T")


def fail(file: str, line: int, col: int, message: str, hint: str, *,
         code: str = "inventory-file") -> InventoryError:
    finding = Finding(code, Severity.ERROR, message, hint, Location(file, line, col, "(file)"))
    return InventoryError(finding.format(), findings=[finding])


@dataclass(frozen=True, slots=True)
class Lines:
    """Character offsets where lines start, kept only for texts where libyaml and an editor
    disagree (those with NEL, LS or PS); otherwise libyaml's own line numbers are right."""

    starts: tuple[int, ...] | None = None

    @classmethod
    def of(cls, raw: bytes) -> Lines:
        if not raw.startswith((b"\xff\xfe", b"\xfe\xff")) and \
                not any(b in raw for b in _UTF8_BREAKS):
            return cls()  # UTF-8 without NEL, LS or PS: no need to decode a copy
        text = _decode(raw)
        if text is None or not any(b in text for b in _UNICODE_BREAKS):
            return cls()
        starts = [0]
        for i, ch in enumerate(text):
            if ch == "\n" or (ch == "\r" and text[i + 1: i + 2] != "\n"):
                starts.append(i + 1)
        return cls(tuple(starts))

    def position(self, mark: Any) -> tuple[int, int]:
        """1-based (line, column) of a yaml Mark."""
        if self.starts is None or mark is None:
            return (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        line = bisect.bisect_right(self.starts, mark.index) - 1
        return line + 1, mark.index - self.starts[line] + 1


def _too_deep(display: str, line: int, col: int) -> InventoryError:
    """One finding for nesting past MAX_DEPTH, whether our guard or libyaml's scanner (which
    stops at 1,000 levels from PyYAML 6.0.4, before the parser hands out an event) sees it."""
    return fail(display, line, col, f"the document is nested too deeply (more than "
                f"{MAX_DEPTH} levels)", "flatten the structure", code="yaml-too-deep")


def _decode(raw: bytes) -> str | None:
    try:
        if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
            return raw.decode("utf-16")
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None


def _guard(raw: bytes, display: str, lines: Lines, budget: int) -> int:
    """One pass over the parser's events: depth, expanded size and alias sanity. Returns
    the document's size with aliases expanded; refuses more than `budget` nodes.

    One running count of the nodes so far, aliases expanded: a collection's size is the
    count at its end minus the count at its start (what an alias of it adds), so each
    event costs a few operations (this pass is about a quarter of a parse)."""
    parser = Loader(raw)
    opened: list[tuple[int, Any]] = []  # (count at start, anchor or None) per open collection
    anchors: dict[str, int] = {}
    open_anchors: set[str] = set()
    done = 0
    scalar, alias = yaml.ScalarEvent, yaml.AliasEvent
    starts = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
    ends = (yaml.SequenceEndEvent, yaml.MappingEndEvent)
    next_event: Any = parser.get_event
    try:
        while (ev := next_event()) is not None:
            kind = type(ev)
            if kind is scalar:
                done += 1
                if ev.anchor:
                    anchors[ev.anchor] = 1
            elif kind is alias:
                if ev.anchor in open_anchors:
                    line, col = lines.position(ev.start_mark)
                    raise fail(display, line, col,
                               f"alias *{ev.anchor} refers to the collection it is inside",
                               "a recursive structure cannot be an inventory; write it out",
                               code="yaml-alias")
                done += anchors.get(ev.anchor, 1)
            elif kind in starts:
                if len(opened) >= MAX_DEPTH:
                    raise _too_deep(display, *lines.position(ev.start_mark))
                opened.append((done, ev.anchor))
                if ev.anchor:
                    open_anchors.add(ev.anchor)
                continue
            elif kind in ends:
                done += 1  # the collection itself
                first, anchor = opened.pop()
                if anchor:
                    open_anchors.discard(anchor)
                    anchors[anchor] = done - first
            elif kind is yaml.DocumentStartEvent:
                anchors.clear()
                continue
            else:
                continue
            if done > budget:
                line, col = lines.position(ev.start_mark)
                raise fail(display, line, col,
                           "the inventory has too many nodes once aliases are expanded "
                           f"(the limit: {MAX_EXPANDED_NODES:,}, or a quarter of the site's "
                           "bytes if larger)", "write the data out instead of nesting "
                           "anchors, or split the site", code="yaml-alias-bomb")
    finally:
        parser.dispose()
    return done


def parse(raw: bytes, display: str, budget: int = MAX_EXPANDED_NODES
          ) -> tuple[Any, yaml.Node | None, Lines, int]:
    """(data, node tree, line table, expanded node count) of one YAML document, which may
    have at most `budget` nodes (a site's files share one budget); InventoryError on
    anything else. The node tree costs ~45x the text: for small files (bundles)."""
    def composed(loader: Any, lines: Lines) -> tuple[Any, yaml.Node | None]:
        node = loader.get_single_node()
        return (construct(loader, node) if node is not None else None), node

    return _parse(raw, display, budget, composed)


def parse_tree(raw: bytes, display: str, budget: int = MAX_EXPANDED_NODES
               ) -> tuple[Any, Tree | None, Lines, int]:
    """As `parse`, with yamltree's compact table of positions in place of the node tree:
    what a site is loaded with (about 1 byte of memory per byte of text, not 45)."""
    def compact(loader: Any, lines: Lines) -> tuple[Any, Tree | None]:
        try:
            return yamltree.build(loader, lines.starts)
        except yamltree.Unsupported:  # merge keys, tagged collections: PyYAML's own path
            loader.dispose()
            loader = Loader(raw)
            try:
                node = loader.get_single_node()
                data = construct(loader, node) if node is not None else None
                return data, (yamltree.from_node(node, lines.starts) if node else None)
            finally:
                loader.dispose()

    return _parse(raw, display, budget, compact)


def _parse(raw: bytes, display: str, budget: int,
           build: Callable[[Any, Lines], tuple[Any, _T]]) -> tuple[Any, _T, Lines, int]:
    if len(raw) > MAX_FILE_BYTES:
        raise fail(display, 1, 1, f"file is {len(raw)} bytes; the limit is {MAX_FILE_BYTES}",
                   "split the inventory into several files in one directory")
    lines = Lines.of(raw)
    loader = None
    try:
        used = _guard(raw, display, lines, budget)
        loader = Loader(raw)
        data, tree = build(loader, lines)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = lines.position(mark)
        problem = exc.problem or exc.context or "invalid YAML"
        if "maximum nesting depth" in problem:  # libyaml 0.2.6's own limit (PyYAML 6.0.4)
            raise _too_deep(display, line, col) from None
        raise fail(display, line, col, f"YAML syntax error: {problem}",
                   "fix the YAML at this position (indentation, quoting, ':' after keys)",
                   code="yaml-syntax") from None
    except yaml.YAMLError as exc:  # reader errors: bad bytes, bad encoding
        text = " ".join(str(exc).split())[:200]
        raise fail(display, 1, 1, f"not a YAML text file: {text}",
                   "save the inventory as UTF-8 YAML", code="yaml-syntax") from None
    except RecursionError:  # pragma: no cover - MAX_DEPTH keeps the constructor shallow
        raise _too_deep(display, 1, 1) from None
    finally:
        if loader is not None:
            loader.dispose()
    return data, tree, lines, used


_TAG = "tag:yaml.org,2002:"
_STR, _MAP, _SEQ = _TAG + "str", _TAG + "map", _TAG + "seq"
_SPECIAL_KEYS = (_TAG + "merge", _TAG + "value")  # `<<` and `=`: PyYAML's own rules


def construct(loader: Any, root: yaml.Node) -> Any:
    """The data of a composed document, equal to `loader.construct_document(root)`.

    An inventory is mappings, sequences and plain strings: those are built here directly
    (a node shared through an alias is built once, as PyYAML does). Every other node
    (ints, booleans, timestamps, merge keys, collection keys, unknown tags) goes to
    PyYAML's own constructor, with its results and its errors. PyYAML's generic path (a
    generator per mapping, recursion bookkeeping per node) cost half a parse: 4.2 of
    8.7 s at 100,000 nodes, 0.7 s here (bench/inventory_scale.py). The guard has bounded
    the depth, so the recursion is shallow."""
    memo: dict[int, Any] = {}
    scalar, mapping, sequence = yaml.ScalarNode, yaml.MappingNode, yaml.SequenceNode

    def pyyaml(n: yaml.Node) -> Any:
        out = memo[id(n)] = loader.construct_object(n, deep=True)
        return out

    def build(n: yaml.Node) -> Any:
        tag, kind = n.tag, type(n)
        if tag == _STR and kind is scalar:
            return n.value
        if id(n) in memo:
            return memo[id(n)]
        if tag == _MAP and kind is mapping:
            d: dict[Any, Any] = {}
            memo[id(n)] = d
            for k, v in n.value:
                if k.tag == _STR and type(k) is scalar:
                    d[k.value] = build(v)
                elif k.tag in _SPECIAL_KEYS or type(k) is not scalar:
                    return pyyaml(n)
                else:  # an int, bool, null or timestamp key: hashable
                    d[build(k)] = build(v)
            return d
        if tag == _SEQ and kind is sequence:
            items: list[Any] = []
            memo[id(n)] = items
            items.extend([build(c) for c in n.value])
            return items
        return pyyaml(n)

    try:
        return build(root)
    finally:
        memo.clear()  # build's closure is a cycle: with the GC paused it would keep the data


# Peak memory of loading a site, per byte of its YAML, above the interpreter's own: ~19
# for the generated sites of bench/inventory_scale.py at 100,000 nodes (~210 bytes a
# node; most of it the pydantic models), with a margin. A site that would not fit is
# refused before parsing: pydantic-core aborts the process when an allocation fails, so
# the estimate is the guard for that phase (a MemoryError of Python's own is caught).
MEMORY_PER_YAML_BYTE = 24


def available_memory_bytes() -> int | None:
    """What this process may still allocate: the system's MemAvailable, or less where an
    address-space limit (RLIMIT_AS) is set; None where neither can be read."""
    avail: list[int] = []
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail.append(int(line.split()[1]) * 1024)
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    if soft != resource.RLIM_INFINITY:
        used = 0
        with contextlib.suppress(OSError, ValueError):
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("VmSize:"):
                    used = int(line.split()[1]) * 1024
        avail.append(max(0, soft - used))
    return min(avail) if avail else None


def memory_error(display: str, size_bytes: int, available: int | None, *,
                 ran_out: bool = False) -> InventoryError:
    """The clean refusal of a site too large for the memory this process has."""
    need_mb = size_bytes * MEMORY_PER_YAML_BYTE // 2**20
    have = "unknown" if available is None else f"{available // 2**20:,} MB"
    why = f"the memory ran out while loading it (available now: {have})" if ran_out \
        else f"only {have} is available"
    return fail(display, 1, 1, f"the inventory is {size_bytes / 2**20:,.1f} MB of YAML and "
                f"needs about {need_mb:,} MB of memory to load; {why}",
                "run on a machine with more free memory, raise the process's memory "
                "limit (ulimit -v), or split the site", code="inventory-too-large")


def check_memory(display: str, size_bytes: int, available: int | None) -> None:
    """Refuse, before parsing, a site whose load would exhaust the memory available."""
    if available is not None and size_bytes * MEMORY_PER_YAML_BYTE > available:
        raise memory_error(display, size_bytes, available)


def read_file(path: Path, display: str) -> bytes:
    """The bytes of one inventory file, refused by name when unreadable or too large."""
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise fail(display, 1, 1, f"file is {size} bytes; the limit is {MAX_FILE_BYTES}",
                       "split the inventory into several files in one directory")
        return path.read_bytes()
    except OSError as exc:
        raise InventoryError(f"{display}: cannot read: {exc.strerror}",
                             hint="check the path and its permissions") from None


def node_budget(files: list[Path], floor: int = MAX_EXPANDED_NODES) -> int:
    """YAML nodes a site may expand to: `floor` (1,000,000), or a quarter of its bytes when
    larger. A written-out node takes at least ~4 bytes (a 10,000-server site: ~7), so a large
    site still loads (100,000 servers are ~3M nodes), while aliases can never make a site
    bigger than text of its own size could be: no amplification, memory grows with bytes."""
    total_bytes = 0
    for p in files:
        with contextlib.suppress(OSError):  # unreadable: _parse_file says so, by name
            total_bytes += p.stat().st_size
    return max(floor, total_bytes // 4)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic GC off while a site is built, and what was built then moved out of
    its sight (gc.freeze): a site is millions of objects that form no cycles and live as
    long as the command, and every full collection would walk all of them again - a
    20,000-node site loaded ~3x slower, and any later allocation paid seconds
    (bench/inventory_scale.py). Frozen objects are still freed by reference counting."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_on:
            gc.enable()
