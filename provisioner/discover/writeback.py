"""Write a new placement into the site's YAML as a minimal, reviewable change.

ruamel.yaml's round-trip mode loads the one file that holds the target rack's placements
and keeps its comments, key order, quoting and flow style; the new entry is inserted right
after that rack's last placement (so no existing node's rule-made switch port, which
counts nodes in placement order, moves) and styled like its neighbour. The result is
checked to be a pure addition (no existing line changed) before anything is written, and
re-loaded with the site's own loader by the caller. Nothing here prints.
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


def _flowed(value: dict[str, Any], like: Any) -> CommentedMap:
    out = CommentedMap(value)
    if isinstance(like, CommentedMap) and like.fa.flow_style():
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
        node["macs"] = _flowed({k: DoubleQuotedScalarString(v) for k, v in p.macs.items()},
                               like("macs"))
    entry = CommentedMap()
    entry["rack"] = p.rack
    entry["u"] = p.u
    entry["block"] = p.block
    entry["nodes"] = CommentedSeq([node])
    return entry


def plan_change(loaded: LoadedSite, proposal: Proposal) -> Change:
    """The file text before and after adding the proposal's placement (nothing written)."""
    path = target_file(loaded, proposal.rack)
    before = path.read_text()
    _, indent, block_seq_indent = load_yaml_guess_indent(before)
    yaml = _yaml(indent, block_seq_indent)
    doc = yaml.load(before)
    if not isinstance(doc, CommentedMap):
        raise InventoryError(f"{path}: the top level is not a mapping")
    items = doc.get("placements")
    if items is None:
        items = doc["placements"] = CommentedSeq()
    if not isinstance(items, CommentedSeq):
        raise InventoryError(f"{path}: placements is not a list")
    last = max((i for i, p in enumerate(items)
                if isinstance(p, CommentedMap) and p.get("rack") == proposal.rack),
               default=len(items) - 1)
    items.insert(last + 1, _entry(proposal, items))
    buf = io.StringIO()
    yaml.dump(doc, buf)
    after = buf.getvalue()
    change = Change(path, _display(loaded, path), before, after)
    removed = [line for line in change.diff.splitlines()[2:]
               if line.startswith("-")]
    if removed:
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
