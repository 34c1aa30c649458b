"""Build a document's data straight from libyaml's events, with a compact table of where
every node starts, instead of composing PyYAML's node tree.

A composed tree costs about 45 bytes of memory per byte of YAML (each node an object with
two Mark objects), and the loader kept it for the life of a site to turn findings into
file:line:column: a 200,000-node site did not fit in 4 GB. Here each node is one entry of
three arrays (line, column, and its kind with its extent): 12 bytes a node, about 1.2
bytes per byte of a real site. The data is what PyYAML's safe loader builds (the same
resolver and constructor decide every scalar that is not a plain string); a document that
uses merge keys, tagged collections or collection keys is composed and built by PyYAML as
before (`from_node`), then its tree is turned into the same table.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterator
from typing import Any

import yaml

_TAG = "tag:yaml.org,2002:"
_STR, _MAP, _SEQ = _TAG + "str", _TAG + "map", _TAG + "seq"
_SPECIAL_KEYS = (_TAG + "merge", _TAG + "value")  # `<<` and `=`: PyYAML's own rules

# Node kinds in the two high bits of `info`; the low 30 bits are, for a collection, the
# id after its last descendant, for an alias the node it names, for a scalar the index of
# its text in `texts` plus one (0: text not kept).
SCALAR, MAPPING, SEQUENCE, ALIAS = 0, 1 << 30, 2 << 30, 3 << 30
_KIND, _LOW = 3 << 30, (1 << 30) - 1
_INDEXED = 64  # children of a collection larger than this are indexed once, on first use


class Unsupported(Exception):
    """The document needs PyYAML's composer and constructor (see `from_node`)."""


class Tree:
    """Where each node of one document starts (1-based line and column as an editor shows
    them), and its structure; node 0 is the root."""

    __slots__ = ("_children", "_index", "col", "info", "line", "texts")

    def __init__(self) -> None:
        self.line = array("I")
        self.col = array("I")
        self.info = array("I")
        self.texts: list[str] = []  # mapping keys and anchored scalars, each text once
        self._index: dict[str, int] = {}
        self._children: dict[int, array[int]] = {}

    def add(self, pos: tuple[int, int], info: int) -> int:
        self.line.append(pos[0])
        self.col.append(pos[1])
        self.info.append(info)
        return len(self.info) - 1

    def keep_text(self, node: int, text: str) -> None:
        i = self._index.get(text)
        if i is None:
            i = self._index[text] = len(self.texts)
            self.texts.append(text)
        self.info[node] = SCALAR | (i + 1)

    def done(self) -> None:
        """Building is over: drop the interning table."""
        self._index = {}

    def position(self, node: int) -> tuple[int, int]:
        return self.line[node], self.col[node]

    def target(self, node: int) -> int:
        """The node itself, or the anchored node an alias names."""
        info = self.info[node]
        return info & _LOW if info & _KIND == ALIAS else node

    def kind(self, node: int) -> int:
        return self.info[self.target(node)] & _KIND

    def text(self, node: int) -> str | None:
        """A scalar key's text as written (None for other nodes)."""
        info = self.info[self.target(node)]
        return self.texts[(info & _LOW) - 1] if info & _KIND == SCALAR and info & _LOW else None

    def children(self, node: int) -> array[int] | Iterator[int]:
        node = self.target(node)
        if self.info[node] & _KIND not in (MAPPING, SEQUENCE):
            return iter(())
        cached = self._children.get(node)
        if cached is not None:
            return cached
        out = array("I", self._walk(node))
        if len(out) > _INDEXED:
            self._children[node] = out
        return out

    def _walk(self, node: int) -> Iterator[int]:
        end, child = self.info[node] & _LOW, node + 1
        while child < end:
            yield child
            info = self.info[child]
            child = info & _LOW if info & _KIND in (MAPPING, SEQUENCE) else child + 1

    def pairs(self, node: int) -> list[tuple[int, int]]:
        """A mapping's (key, value) nodes in document order."""
        kids = list(self.children(node)) if self.kind(node) == MAPPING else []
        return list(zip(kids[::2], kids[1::2], strict=True))

    def child(self, node: int, part: str | int) -> tuple[int, int] | None:
        """(key node, value node) of `part` under `node`; a sequence item is its own key.
        The last duplicate key wins, as in the data."""
        kind = self.kind(node)
        if kind == SEQUENCE and isinstance(part, int):
            kids = self.children(node)
            if isinstance(kids, array) and 0 <= part < len(kids):
                item = self.target(kids[part])
                return item, item
            return None
        if kind == MAPPING:
            want = str(part)
            for k, v in reversed(self.pairs(node)):
                if self.text(k) == want:
                    return self.target(k), self.target(v)
        return None

    def __len__(self) -> int:
        return len(self.info)


def _position(mark: Any, starts: tuple[int, ...] | None) -> tuple[int, int]:
    if starts is None:
        return mark.line + 1, mark.column + 1
    line = bisect.bisect_right(starts, mark.index) - 1
    return line + 1, mark.index - starts[line] + 1


def build(loader: Any, starts: tuple[int, ...] | None) -> tuple[Any, Tree | None]:
    """(data, tree) of the loader's single document, or (None, None) for an empty stream.
    Raises Unsupported for what only PyYAML's own path builds, and PyYAML's errors (with
    its marks) for what PyYAML refuses. `starts`: see yamlsafe.Lines."""
    tree = Tree()
    next_event = loader.get_event
    resolve, construct_object = loader.resolve, loader.construct_object
    resolvers = loader.yaml_implicit_resolvers
    anchors: dict[str, tuple[Any, int, Any]] = {}  # name -> (data, node, start mark)
    # one open collection: [container, node, its pending key or no_key]
    stack: list[list[Any]] = []
    no_key = object()
    scalar_ev, alias_ev = yaml.ScalarEvent, yaml.AliasEvent
    map_ev, seq_ev = yaml.MappingStartEvent, yaml.SequenceStartEvent
    ends = (yaml.MappingEndEvent, yaml.SequenceEndEvent)
    root: Any = None
    root_mark: Any = None
    next_event()  # StreamStart
    ev = next_event()
    if isinstance(ev, yaml.StreamEndEvent):
        return None, None
    # DocumentStart, then the root node's events, then DocumentEnd
    while True:
        ev = next_event()
        kind = type(ev)
        at_key = bool(stack) and stack[-1][0].__class__ is dict and stack[-1][2] is no_key
        if kind in ends:
            value, node, _ = stack.pop()
            tree.info[node] = tree.info[node] | len(tree)
        elif kind is alias_ev:
            if ev.anchor not in anchors:
                raise yaml.composer.ComposerError(None, None, "found undefined alias",
                                                  ev.start_mark)
            value, target, _ = anchors[ev.anchor]
            if at_key and not isinstance(value, (str, int, float, bool, bytes)) \
                    and value is not None:
                raise Unsupported  # a collection as a key: PyYAML's error, PyYAML's way
            tree.add(tree.position(target), ALIAS | target)
        else:
            if ev.anchor is not None and ev.anchor in anchors:
                raise yaml.composer.ComposerError(
                    "found duplicate anchor; first occurrence", anchors[ev.anchor][2],
                    "second occurrence", ev.start_mark)
            pos = _position(ev.start_mark, starts)
            if kind is scalar_ev:
                tag, text = ev.tag, ev.value
                if tag is None or tag == "!":
                    plain = ev.implicit[0]
                    if not plain or (text[:1] not in resolvers):
                        tag = _STR
                    else:
                        tag = resolve(yaml.ScalarNode, text, ev.implicit)
                node = tree.add(pos, SCALAR)
                if tag == _STR:
                    value = text
                elif at_key and tag in _SPECIAL_KEYS:
                    raise Unsupported
                else:
                    snode = yaml.ScalarNode(tag, text, ev.start_mark, ev.end_mark, ev.style)
                    try:
                        value = construct_object(snode, deep=True)
                    except MemoryError:
                        raise
                    except Exception:  # PyYAML's own path reports it, in its order
                        raise Unsupported from None
                    loader.constructed_objects.pop(snode, None)
                if at_key or ev.anchor is not None:
                    tree.keep_text(node, text)
                    if at_key and tag == _STR:
                        value = tree.texts[(tree.info[node] & _LOW) - 1]  # one str per key
                if ev.anchor is not None:
                    anchors[ev.anchor] = (value, node, ev.start_mark)
            elif kind is map_ev or kind is seq_ev:
                if at_key:
                    raise Unsupported
                default = _MAP if kind is map_ev else _SEQ
                if ev.tag not in (None, "!", default):
                    raise Unsupported
                node = tree.add(pos, MAPPING if kind is map_ev else SEQUENCE)
                opened: Any = {} if kind is map_ev else []
                if ev.anchor is not None:
                    anchors[ev.anchor] = (opened, node, ev.start_mark)
                stack.append([opened, node, no_key])
                if root_mark is None:
                    root_mark = ev.start_mark
                continue
            else:  # pragma: no cover - the parser gives nothing else inside a document
                raise Unsupported
        if root_mark is None:
            root_mark = ev.start_mark
        if not stack:
            root = value
            break
        top = stack[-1]
        if top[0].__class__ is list:
            top[0].append(value)
        elif top[2] is no_key:
            top[2] = value
        else:
            top[0][top[2]] = value
            top[2] = no_key
    next_event()  # DocumentEnd
    ev = next_event()
    if not isinstance(ev, yaml.StreamEndEvent):
        raise yaml.composer.ComposerError("expected a single document in the stream",
                                          root_mark, "but found another document",
                                          ev.start_mark)
    tree.done()
    return root, tree


def from_node(root: yaml.Node, starts: tuple[int, ...] | None) -> Tree:
    """The table of a composed (and constructed: merge keys flattened) node tree; a node
    met again through an alias becomes an alias entry."""
    tree = Tree()
    seen: dict[int, int] = {}

    def walk(n: yaml.Node) -> None:
        if id(n) in seen:
            tree.add(tree.position(seen[id(n)]), ALIAS | seen[id(n)])
            return
        pos = _position(n.start_mark, starts)
        if isinstance(n, yaml.ScalarNode):
            seen[id(n)] = node = tree.add(pos, SCALAR)
            tree.keep_text(node, n.value)  # any scalar may be a key through an alias
            return
        kind = MAPPING if isinstance(n, yaml.MappingNode) else SEQUENCE
        seen[id(n)] = node = tree.add(pos, kind)
        if kind == MAPPING:
            for k, v in n.value:
                walk(k)
                walk(v)
        else:
            for c in n.value:
                walk(c)
        tree.info[node] = kind | len(tree)

    walk(root)
    tree.done()
    return tree
