"""Where a key path of the merged site is written: file, line and column.

A loaded site keeps one yamltree.Tree per file (12 bytes a node), not PyYAML's node tree
(~45 bytes of memory per byte of YAML); `SourceMap.segments` composes the node tree of
the site's top-level keys again, from the files, for the few callers that need nodes
(discover's writeback) and for maps built from nodes (release bundles).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from provisioner.inventory.findings import Location
from provisioner.inventory.yamlsafe import Lines, parse, read_file
from provisioner.inventory.yamltree import Tree

PathPart = str | int


@dataclass(frozen=True, slots=True)
class _Segment:
    """One file's contribution to a top-level key, as PyYAML nodes (bundles; and the
    composed view `SourceMap.segments` gives discover's writeback)."""

    file: str
    key_node: yaml.Node
    value_node: yaml.Node
    offset: int  # index of this file's first item in the merged list


@dataclass(frozen=True, slots=True)
class _Part:
    """One file's contribution to a top-level key, in that file's compact tree."""

    file: str
    path: Path
    tree: Tree
    key: int  # node ids in the tree
    value: int
    offset: int  # index of this file's first item in the merged list
    count: int  # items of a list (0 otherwise)
    pair: int  # index of the key among the file's top-level keys


class SourceMap:
    """Resolve a key path in the merged document to a place in one file.

    A loaded site keeps one yamltree.Tree per file (12 bytes a node); `segments`, PyYAML's
    node tree of the same keys, is composed again from the files only when asked for."""

    def __init__(self, files: list[str] | None = None, lines: dict[str, Lines] | None = None
                 ) -> None:
        self.files: list[str] = files if files is not None else []
        self.lines: dict[str, Lines] = lines if lines is not None else {}
        self.parts: dict[str, list[_Part]] = {}
        self._segments: dict[str, list[_Segment]] | None = None

    @property
    def segments(self) -> dict[str, list[_Segment]]:
        if self._segments is None:
            self._segments = self._compose()
        return self._segments

    def _compose(self) -> dict[str, list[_Segment]]:
        nodes: dict[Path, yaml.Node | None] = {}
        out: dict[str, list[_Segment]] = {}
        for key, parts in self.parts.items():
            for p in parts:
                if p.path not in nodes:
                    nodes[p.path] = parse(read_file(p.path, p.file), p.file)[1]
                top = nodes[p.path]
                if isinstance(top, yaml.MappingNode) and p.pair < len(top.value):
                    k, v = top.value[p.pair]
                    out.setdefault(key, []).append(_Segment(p.file, k, v, p.offset))
        return out

    def position(self, file: str, mark: Any) -> tuple[int, int]:
        """1-based line and column as an editor shows them (see yamlsafe.Lines)."""
        return self.lines.get(file, Lines()).position(mark)

    def locate(self, path: Sequence[PathPart], *, at_key: bool = False) -> Location:
        top = path[0] if path and isinstance(path[0], str) else None
        if top is not None and top in self.parts:
            return self._locate_tree(top, list(path[1:]), at_key)
        if top is not None and self._segments and top in self._segments:
            return self._locate_nodes(top, list(path[1:]), at_key)
        first = self.files[0] if self.files else "<inventory>"
        return Location(first, 1, 1, _dotted(path) or "(top level)")

    def _locate_tree(self, top: str, rest: list[PathPart], at_key: bool) -> Location:
        parts = self.parts[top]
        part = parts[0]
        if rest and isinstance(rest[0], int):
            for p in parts:
                if p.offset <= rest[0] < p.offset + p.count:
                    part = p
                    rest[0] -= p.offset
                    break
        elif rest and isinstance(rest[0], str):
            for p in parts:
                if p.tree.child(p.value, rest[0]) is not None:
                    part = p
                    break
        tree, node, key = part.tree, part.value, part.key
        shown: list[PathPart] = [top]
        for step in rest:
            child = tree.child(node, step)
            if child is None:
                break
            key, node = child
            shown.append(step)
        line, col = tree.position(key if at_key else node)
        return Location(part.file, line, col, _dotted(shown))

    def _locate_nodes(self, top: str, rest: list[PathPart], at_key: bool) -> Location:
        segs = self.segments[top]
        seg = segs[0]
        if rest and isinstance(rest[0], int):
            for s in segs:
                n = len(s.value_node.value) if isinstance(s.value_node, yaml.SequenceNode) else 0
                if s.offset <= rest[0] < s.offset + n:
                    seg = s
                    rest[0] -= s.offset
                    break
        elif rest and isinstance(rest[0], str):
            for s in segs:
                if _child(s.value_node, rest[0]) is not None:
                    seg = s
                    break
        node, key_node = seg.value_node, seg.key_node
        shown_parts: list[PathPart] = [top]
        for part in rest:
            child = _child(node, part)
            if child is None:
                break
            key_node, node = child
            shown_parts.append(part)
        line, col = self.position(seg.file, key_node.start_mark if at_key else node.start_mark)
        return Location(seg.file, line, col, _dotted(shown_parts))


def _child(node: yaml.Node | None, part: PathPart) -> tuple[yaml.Node, yaml.Node] | None:
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int):
        if 0 <= part < len(node.value):
            item: yaml.Node = node.value[part]
            return item, item
        return None
    if isinstance(node, yaml.MappingNode):
        for k, v in reversed(node.value):  # the last duplicate key wins, as in the data
            if isinstance(k, yaml.ScalarNode) and k.value == str(part):
                return k, v
    return None


def _dotted(path: Iterable[PathPart]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
