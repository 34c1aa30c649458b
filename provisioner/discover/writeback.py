"""Write a new placement into the site's YAML as a minimal, reviewable change.

The change goes into the file that holds the target rack's placements, right after that
rack's last placement, so no existing node's rule-made switch port (the rules count nodes
in placement order) moves. Where that placement ends, and the file's style (flow or block
maps, the indentation of `nodes:`), come from the node tree the site was loaded with; the
new entry is rendered by ruamel.yaml (round-trip types: flow maps, quoted MACs) and its
lines are spliced into the text. Every existing line, comment, blank line and quote stays
byte for byte; the whole document is never re-dumped (a round-trip dump moves a comment
that trails the last item, and a round-trip parse of a 1,000-node file takes seconds).
The result is checked to be a pure addition before anything is written; the caller
re-loads and checks the grown site. Nothing here prints.
"""

from __future__ import annotations

import difflib
import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.scalarstring import DoubleQuotedScalarString

from provisioner.discover.place import Proposal
from provisioner.errors import InventoryError
from provisioner.inventory.loader import LoadedSite


@dataclass(frozen=True)
class Change:
    path: Path  # the file changed
    display: str  # its name relative to the site (what the diff says)
    before: str
    after: str

    @property
    def diff(self) -> str:
        return "".join(difflib.unified_diff(
            self.before.splitlines(keepends=True), self.after.splitlines(keepends=True),
            fromfile=f"a/{self.display}", tofile=f"b/{self.display}"))


def _segment(loaded: LoadedSite, rack: str) -> Any:  # loader's _Segment
    """The placements of the file that holds the rack's last chassis (else the last file
    with placements)."""
    segs = loaded.sources.segments.get("placements")
    if not segs:
        raise InventoryError("the site has no placements to add to",
                             hint="add the node by hand with the values printed")
    chosen = segs[-1]
    for seg in segs:
        n = len(_items(seg))
        if any(p.rack == rack for p in loaded.site.placements[seg.offset:seg.offset + n]):
            chosen = seg
    return chosen


def _items(seg: Any) -> list[yaml.Node]:
    value = seg.value_node.value if isinstance(seg.value_node, yaml.SequenceNode) else []
    return list(value)


def _get(node: yaml.Node | None, key: str) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.value == key:
                found: yaml.Node = v
                return found
    return None


def _style(loaded: LoadedSite, block: str) -> tuple[dict[str, bool], int, int]:
    """The site's own styling, read from the loader's node tree: flow or block per node
    key (a node of the same block first), and the nested sequence indent and dash offset
    under `nodes:`."""
    flow: dict[str, bool] = {}
    seq, offset = 4, 2
    found_same = False
    for seg in loaded.sources.segments.get("placements", []):
        for i, item in enumerate(_items(seg)):
            same = loaded.site.placements[seg.offset + i].block == block
            if found_same and not same:
                continue
            nodes = _get(item, "nodes")
            first = nodes.value[0] if isinstance(nodes, yaml.SequenceNode) and nodes.value \
                else None
            if not isinstance(first, yaml.MappingNode) or nodes is None:
                continue
            key = next(k for k, v in item.value if v is nodes)
            offset = max(0, first.start_mark.column - 2 - key.start_mark.column)
            seq = offset + 2
            for k, v in first.value:
                if isinstance(v, yaml.MappingNode) and (same or k.value not in flow):
                    flow[k.value] = bool(v.flow_style)
            found_same = found_same or same
    return flow, seq, offset


def file_credentials(loaded: LoadedSite, block: str) -> str | None:
    """The credentials name the site's files give a BMC (a node of the same block first),
    as written: while the lab runs, the loaded site carries the lab's login instead."""
    found = None
    for seg in loaded.sources.segments.get("placements", []):
        for i, item in enumerate(_items(seg)):
            nodes = _get(item, "nodes")
            for node in nodes.value if isinstance(nodes, yaml.SequenceNode) else []:
                name = _get(_get(node, "bmc"), "credentials")
                if isinstance(name, yaml.ScalarNode):
                    if loaded.site.placements[seg.offset + i].block == block:
                        return str(name.value)
                    found = found or str(name.value)
    return found


def _render(entry: CommentedMap, dash_column: int, seq: int, offset: int) -> list[str]:
    """The entry as list-item lines whose dash is at `dash_column`."""
    out = YAML(typ="rt")
    out.width = 4096
    out.indent(mapping=2, sequence=seq, offset=offset)
    buf = io.StringIO()
    out.dump(CommentedSeq([entry]), buf)
    lines = buf.getvalue().splitlines(keepends=True)
    shift = dash_column - (len(lines[0]) - len(lines[0].lstrip(" ")))
    return [(" " * shift + ln) if shift >= 0 else ln[-shift:] for ln in lines]


def _flowed(value: dict[str, Any], flow: bool) -> CommentedMap:
    out = CommentedMap(value)
    if flow:
        out.fa.set_flow_style()
    return out


def _entry(p: Proposal, flow: dict[str, bool]) -> CommentedMap:
    """The new placement, styled like the file's nodes (flow maps stay flow)."""
    default = flow.get("addresses", flow.get("bmc", True))
    bmc: dict[str, Any] = {"protocol": p.bmc.protocol.value, "address": p.bmc.address}
    if p.bmc.port is not None:
        bmc["port"] = p.bmc.port
    if p.bmc.scheme != "https":
        bmc["scheme"] = p.bmc.scheme
    if p.bmc.system_id:
        bmc["system_id"] = p.bmc.system_id
    bmc["credentials"] = p.bmc.credentials
    node = CommentedMap()
    node["hostname"] = p.hostname
    node["bmc"] = _flowed(bmc, flow.get("bmc", default))
    node["addresses"] = _flowed(p.addresses, flow.get("addresses", default))
    if p.macs:
        # Quoted: a MAC of digits only would read as a base-60 number under YAML 1.1.
        node["macs"] = _flowed({k: DoubleQuotedScalarString(v) for k, v in p.macs.items()},
                               flow.get("macs", default))
    entry = CommentedMap()
    entry["rack"] = p.rack
    entry["u"] = p.u
    entry["block"] = p.block
    entry["nodes"] = CommentedSeq([node])
    return entry


def _boundary(lines: list[str], item_line: int, next_line: int | None) -> int:
    """Index of the line after the item's last content line: up to the next item (or the
    next top-level key, or the end), less the comments and blank lines before it, which
    belong to what follows."""
    stop = next_line if next_line is not None else next(
        (i for i in range(item_line + 1, len(lines))
         if lines[i][:1] not in ("", " ", "\t", "#", "-")), len(lines))
    while stop > item_line + 1 and lines[stop - 1].strip()[:1] in ("", "#"):
        stop -= 1
    return stop


def plan_change(loaded: LoadedSite, proposal: Proposal) -> Change:
    """The file text before and after adding the proposal's placement (nothing written).

    Where the rack's last placement ends comes from the node tree the site was loaded with
    (no second parse: a round-trip parse of a 1,000-node file takes seconds); the new entry
    is rendered by ruamel.yaml in the file's indentation and flow style, and its lines are
    spliced in, so every existing line, comment and blank line stays byte for byte.
    """
    seg = _segment(loaded, proposal.rack)
    path = Path(seg.file)
    before = path.read_text()
    items = _items(seg)
    if not items:
        raise InventoryError(f"{path}: placements is an empty list",
                             hint="add the node by hand with the values printed")
    racks = [p.rack for p in loaded.site.placements[seg.offset:seg.offset + len(items)]]
    last = max((i for i, r in enumerate(racks) if r == proposal.rack),
               default=len(items) - 1)

    def line_of(node: yaml.Node) -> int:  # 0-based, as an editor counts lines
        return loaded.sources.position(seg.file, node.start_mark)[0] - 1

    lines = before.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    start = line_of(items[last])
    dash = lines[start].index("-") if "-" in lines[start] else 0
    flow, seq, offset = _style(loaded, proposal.block)
    next_line = line_of(items[last + 1]) if last + 1 < len(items) else None
    at = _boundary([ln.rstrip("\n") for ln in lines], start, next_line)
    entry = _render(_entry(proposal, flow), dash, seq, offset)
    after = "".join(lines[:at] + entry + lines[at:])
    change = Change(path, _display(loaded, path), before, after)
    removed = [line for line in change.diff.splitlines()[2:]
               if line.startswith("-")]
    if removed:  # a guard: the splice above only adds lines
        raise InventoryError(
            f"{path}: adding the node would also change {len(removed)} existing line(s) "
            f"(first: {removed[0][1:].strip()!r}); nothing was written",
            hint="add it by hand with the values `provision add` printed")
    return change


def _display(loaded: LoadedSite, path: Path) -> str:
    try:
        return str(path.resolve().relative_to(loaded.base_dir.resolve()))
    except ValueError:
        return path.name


def apply(change: Change) -> None:
    """Replace the file atomically (same directory, same mode), if it did not change
    since it was read."""
    if change.path.read_text() != change.before:
        raise InventoryError(f"{change.path} changed while `provision add` ran; nothing was "
                             "written", hint="run it again")
    tmp = change.path.with_name(f".{change.path.name}.add.tmp")
    tmp.write_text(change.after)
    os.chmod(tmp, change.path.stat().st_mode & 0o7777)
    os.replace(tmp, change.path)


def write_patch(change: Change, dest: Path) -> None:
    """The change as a unified diff (`git apply` / `patch -p1` in the site directory)."""
    dest.write_text(change.diff)
