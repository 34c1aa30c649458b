"""Write a new placement into the site's YAML as a minimal, reviewable change.

The one file that holds the target rack's placements is parsed with ruamel.yaml's
round-trip loader (line numbers, indentation, flow style); the new entry is rendered by
ruamel.yaml in the file's style (flow maps stay flow, MACs quoted) and its lines are
spliced in right after that rack's last placement, so no existing node's rule-made switch
port (the rules count nodes in placement order) moves and every existing line, comment and
blank line stays byte for byte. The whole document is not re-dumped: a round-trip dump
still moves a comment that trails the last item (ruamel attaches it to that item) to
before the new one. The result is checked to be a pure addition before anything is
written; the caller re-loads and checks the grown site. Nothing here prints.
"""

from __future__ import annotations

import difflib
import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.scalarstring import DoubleQuotedScalarString
from ruamel.yaml.util import load_yaml_guess_indent

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


def target_file(loaded: LoadedSite, rack: str) -> Path:
    """The file whose placements hold the rack's last chassis (else the last file with
    placements, else the one with racks)."""
    segs = loaded.sources.segments.get("placements") or loaded.sources.segments.get("racks")
    if not segs:
        raise InventoryError("the site has neither placements nor racks to add to")
    chosen = segs[-1]
    for seg in segs:
        items = getattr(seg.value_node, "value", [])
        n = len(items) if isinstance(items, list) else 0
        if any(p.rack == rack for p in loaded.site.placements[seg.offset:seg.offset + n]):
            chosen = seg
    return Path(chosen.file)


def _yaml(indent: int | None, block_seq_indent: int | None) -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096  # never re-wrap an existing long line
    offset = block_seq_indent or 0
    yaml.indent(mapping=2, sequence=max(indent or 2, offset + 2), offset=offset)
    return yaml


def _flowed(value: dict[str, Any], like: Any, default_flow: bool = False) -> CommentedMap:
    out = CommentedMap(value)
    if (like.fa.flow_style() if isinstance(like, CommentedMap) else default_flow):
        out.fa.set_flow_style()
    return out


def _like(items: CommentedSeq, block: str, key: str) -> Any:
    """The file's own styling for `key` of a node: a node of the same block first."""
    found = None
    for p in items:
        nodes = p.get("nodes") if isinstance(p, CommentedMap) else None
        for n in nodes if isinstance(nodes, CommentedSeq) else []:
            if isinstance(n, CommentedMap) and key in n:
                if p.get("block") == block:
                    return n[key]
                found = found if found is not None else n[key]
    return found


def _entry(p: Proposal, items: CommentedSeq) -> CommentedMap:
    """The new placement, styled like the file's nodes (flow maps stay flow)."""

    def like(key: str) -> Any:
        return _like(items, p.block, key)

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
    node["bmc"] = _flowed(bmc, like("bmc"))
    node["addresses"] = _flowed(p.addresses, like("addresses"))
    if p.macs:
        # Quoted: a MAC of digits only would read as a base-60 number under YAML 1.1.
        flow = isinstance(node["addresses"], CommentedMap) and node["addresses"].fa.flow_style()
        node["macs"] = _flowed({k: DoubleQuotedScalarString(v) for k, v in p.macs.items()},
                               like("macs"), default_flow=flow)
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

    The file is parsed round-trip to find where the rack's last placement ends and to
    render the new entry in the file's indentation and flow style; the entry's lines are
    then spliced in, so every existing line, comment and blank line stays byte for byte.
    """
    path = target_file(loaded, proposal.rack)
    before = path.read_text()
    _, indent, block_seq_indent = load_yaml_guess_indent(before)
    yaml = _yaml(indent, block_seq_indent)
    doc = yaml.load(before)
    if not isinstance(doc, CommentedMap):
        raise InventoryError(f"{path}: the top level is not a mapping")
    items = doc.get("placements")
    if not isinstance(items, CommentedSeq) or not items:
        raise InventoryError(f"{path}: placements is not a non-empty list",
                             hint="add the node by hand with the values printed")
    last = max((i for i, p in enumerate(items)
                if isinstance(p, CommentedMap) and p.get("rack") == proposal.rack),
               default=len(items) - 1)
    buf = io.StringIO()
    yaml.dump({"placements": CommentedSeq([_entry(proposal, items)])}, buf)
    entry_lines = buf.getvalue().splitlines(keepends=True)[1:]
    lines = before.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    next_line = items.lc.item(last + 1)[0] if last + 1 < len(items) else None
    at = _boundary([ln.rstrip("\n") for ln in lines], items.lc.item(last)[0], next_line)
    after = "".join(lines[:at] + entry_lines + lines[at:])
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
