"""Load a site inventory (one YAML file or a directory of them) into a typed Site.

YAML is parsed with libyaml's safe loader only. The composed node tree is kept beside the
data so that a finding's key path can be turned into file:line:column *when it is needed*:
the happy path pays nothing for line numbers, which keeps a 10,000-node check close to the
cost of the bare parse (bench/inventory_scale.py).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError

from provisioner.errors import InventoryError
from provisioner.inventory import lab_overlay
from provisioner.inventory.findings import Finding, Location, Severity
from provisioner.inventory.models import BlockType, Site
from provisioner.inventory.yamlsafe import (
    MAX_EXPANDED_NODES,
    MAX_FILE_BYTES,
    Lines,
    Loader,
    fail,
    gc_paused,
    node_budget,
    parse,
)

PathPart = str | int
KeyPath = tuple[PathPart, ...]

LIST_KEYS = ("catalog", "networks", "racks", "placements")
DICT_KEYS = ("credentials",)
SINGLE_KEYS = ("site", "software")
TOP_LEVEL_KEYS = frozenset(LIST_KEYS + DICT_KEYS + SINGLE_KEYS)

# pydantic reports every bad item; past this many, the rest are summed up in one finding.
MAX_SCHEMA_FINDINGS = 200


@dataclass(frozen=True, slots=True)
class _Segment:
    """One file's contribution to a top-level key."""

    file: str
    key_node: yaml.Node
    value_node: yaml.Node
    offset: int  # index of this file's first item in the merged list


@dataclass
class SourceMap:
    """Resolve a key path in the merged document to a place in one file."""

    segments: dict[str, list[_Segment]] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    lines: dict[str, Lines] = field(default_factory=dict)

    def position(self, file: str, mark: Any) -> tuple[int, int]:
        """1-based line and column as an editor shows them (see yamlsafe.Lines)."""
        return self.lines.get(file, Lines()).position(mark)

    def locate(self, path: Sequence[PathPart], *, at_key: bool = False) -> Location:
        if not path or not isinstance(path[0], str) or path[0] not in self.segments:
            first = self.files[0] if self.files else "<inventory>"
            return Location(first, 1, 1, _dotted(path) or "(top level)")
        top, rest = path[0], list(path[1:])
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


@dataclass(frozen=True)
class LoadedSite:
    site: Site
    catalog: dict[str, BlockType]
    sources: SourceMap
    root: Path
    warnings: tuple[Finding, ...] = ()
    lab_hosts: frozenset[str] = frozenset()  # nodes whose BMC endpoint the lab overlay set
    # switches the lab stands in for (lab/switch.py) -> the CLI dialect the stand-in speaks
    lab_switches: Mapping[str, str] = field(default_factory=dict)

    @property
    def base_dir(self) -> Path:
        return self.root if self.root.is_dir() else self.root.parent


# ---------------------------------------------------------------- parsing


def _parse_file(path: Path, display: str, budget: int = MAX_EXPANDED_NODES
                ) -> tuple[Any, yaml.Node | None, Lines, int]:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise fail(display, 1, 1, f"file is {size} bytes; the limit is {MAX_FILE_BYTES}",
                       "split the inventory into several files in one directory")
        raw = path.read_bytes()
    except OSError as exc:
        raise InventoryError(f"{display}: cannot read: {exc.strerror}",
                             hint="check the path and its permissions") from None
    return parse(raw, display, budget)


def _inventory_files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise InventoryError(f"{root}: no such inventory file or directory",
                             hint="pass a site directory such as inventories/example")
    files = sorted(
        p for p in root.rglob("*")
        if p.suffix in (".yaml", ".yml") and p.is_file()
        and not any(part.startswith((".", "_")) for part in p.relative_to(root).parts)
        and p.relative_to(root).parts[0] != "bundles"  # release bundles: bundle_models.py
    )
    if not files:
        raise InventoryError(f"{root}: no *.yaml files in this directory",
                             hint="a site needs at least a site.yaml")
    return files


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _merge(root: Path) -> tuple[dict[str, Any], SourceMap]:
    merged: dict[str, Any] = {}
    smap = SourceMap()
    problems: list[Finding] = []
    files = _inventory_files(root)
    # shared by all files: many files are not a way around it
    budget = node_budget(files, MAX_EXPANDED_NODES)
    for path in files:
        display = _display(path)
        smap.files.append(display)
        data, node, smap.lines[display], used = _parse_file(path, display, budget)
        budget -= used
        if data is None:
            continue
        if not isinstance(data, dict) or not isinstance(node, yaml.MappingNode):
            problems.append(Finding("inventory-file", Severity.ERROR,
                                    "the top level must be a mapping of keys such as site, racks",
                                    "start the file with 'site:' or 'racks:'",
                                    Location(display, 1, 1, "(top level)")))
            continue
        for knode, vnode in node.value:
            key = knode.value if isinstance(knode, yaml.ScalarNode) else None
            if not isinstance(key, str) or key not in data:
                continue
            value = data[key]
            seg_list = smap.segments.setdefault(key, [])
            loc = Location(display, *smap.position(display, knode.start_mark), key)
            if key in LIST_KEYS and isinstance(value, list):
                prior = merged.setdefault(key, [])
                if isinstance(prior, list):
                    seg_list.append(_Segment(display, knode, vnode, len(prior)))
                    prior.extend(value)
                    continue
            elif key in DICT_KEYS and isinstance(value, dict):
                prior = merged.setdefault(key, {})
                if isinstance(prior, dict):
                    dup = sorted(set(prior) & set(value), key=str)
                    if dup:
                        problems.append(Finding(
                            "duplicate-key", Severity.ERROR,
                            f"{key}.{dup[0]} is defined in more than one file",
                            "define each entry once", loc))
                    seg_list.append(_Segment(display, knode, vnode, 0))
                    prior.update(value)
                    continue
            if key in merged:
                first = seg_list[0]
                problems.append(Finding(
                    "duplicate-key", Severity.ERROR,
                    f"'{key}' is already defined in "
                    f"{first.file}:{smap.position(first.file, first.key_node.start_mark)[0]}",
                    f"define '{key}' in one file only", loc))
                continue
            seg_list.append(_Segment(display, knode, vnode, 0))
            merged[key] = value
    if problems:
        raise InventoryError(problems[0].format(), findings=problems)
    return merged, smap


# ---------------------------------------------------------------- catalog


@cache
def shipped_catalog() -> dict[str, BlockType]:
    """The building blocks shipped with the tool (catalog.yaml beside this module)."""
    text = resources.files("provisioner.inventory").joinpath("catalog.yaml").read_bytes()
    data = yaml.load(text, Loader=Loader)  # noqa: S506 - CSafeLoader is the safe loader
    blocks = TypeAdapter(list[BlockType]).validate_python(data["blocks"])
    return {b.name: b for b in blocks}


# ---------------------------------------------------------------- schema errors


def _all_field_names(model: type[BaseModel], seen: set[str] | None = None) -> set[str]:
    seen = set() if seen is None else seen
    names: set[str] = set()
    if model.__name__ in seen:
        return names
    seen.add(model.__name__)
    for name, info in model.model_fields.items():
        names.add(name)
        for arg in _model_args(info.annotation):
            names |= _all_field_names(arg, seen)
    return names


def _model_args(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    out: list[type[BaseModel]] = []
    for arg in getattr(annotation, "__args__", ()) or ():
        out.extend(_model_args(arg))
    return out


@cache
def _known_keys() -> tuple[str, ...]:
    return tuple(sorted(_all_field_names(Site)))


def _relevant_errors(exc: ValidationError) -> list[tuple[KeyPath, str, str]]:
    """pydantic's errors minus the echoes of other errors.

    A list whose item failed also reports "too short"; a misspelt key also reports the
    real key as missing. Both say nothing the first error does not.
    """
    raw = [(tuple(p for p in e["loc"] if p != "[key]"), e["type"], e["msg"])
           for e in exc.errors(include_url=False, include_input=False)[:MAX_SCHEMA_FINDINGS * 10]]
    extras = {(loc[:-1], str(loc[-1])) for loc, kind, _ in raw if kind == "extra_forbidden" and loc}
    out = []
    for loc, kind, msg in raw:
        if kind == "too_short" and any(o[: len(loc)] == loc and len(o) > len(loc)
                                       for o, _, _ in raw):
            continue
        if kind == "missing" and loc and any(
                parent == loc[:-1] and difflib.get_close_matches(str(loc[-1]), [bad], n=1)
                for parent, bad in extras):
            continue
        out.append((loc, kind, msg))
    return out


def _schema_findings(exc: ValidationError, smap: SourceMap) -> list[Finding]:
    findings = []
    relevant = _relevant_errors(exc)
    for err_loc, kind, raw_msg in relevant[:MAX_SCHEMA_FINDINGS]:
        loc = err_loc
        msg = raw_msg.removeprefix("Value error, ")
        hint: str | None = None
        at_key = kind in ("extra_forbidden", "missing")
        if kind == "extra_forbidden":
            bad = str(loc[-1]) if loc else ""
            close = difflib.get_close_matches(bad, _known_keys(), n=1)
            msg = f"unknown key '{bad}'"
            hint = f"did you mean '{close[0]}'?" if close else "remove it or check the spelling"
        elif kind == "missing":
            msg = f"required key '{loc[-1]}' is missing"
            hint = f"add '{loc[-1]}:' here"
            loc = loc[:-1]
        elif "inline secret" in msg:
            hint = "put the password in an environment variable or a 0600 file and reference it"
        elif kind.startswith(("string_", "int_", "float_", "bool_", "literal_", "enum")):
            hint = "see the inventory reference in README.md for the allowed values"
        location = smap.locate(loc, at_key=at_key)
        code = "inline-secret" if "inline secret" in msg else f"schema-{kind}"
        findings.append(Finding(code, Severity.ERROR, msg, hint, location))
    if len(relevant) > MAX_SCHEMA_FINDINGS:
        more = max(exc.error_count(), len(relevant)) - MAX_SCHEMA_FINDINGS
        findings.append(Finding("schema-more", Severity.ERROR,
                                f"about {more} more schema error(s)",
                                "fix the errors above first", smap.locate(())))
    return findings


# ---------------------------------------------------------------- lab overlay


def _apply_lab_overlay(merged: dict[str, Any], base_dir: Path
                       ) -> tuple[frozenset[str], dict[str, str]]:
    """Replace BMC endpoints (and switch management endpoints) with the running lab's
    (see provisioner/lab). Returns the nodes whose BMC it set and the stood-in switches."""
    site = merged.get("site")
    rel = site.get("lab_overlay") if isinstance(site, dict) else None
    if not isinstance(rel, str) or rel.startswith("/"):
        return frozenset(), {}
    path = base_dir / rel
    if not path.is_file():
        return frozenset(), {}
    display = _display(path)
    data, _, _, _ = _parse_file(path, display)
    if not isinstance(data, dict) or not isinstance(data.get("bmc"), dict):
        raise fail(display, 1, 1, "the lab overlay is damaged",
                    "run `provision lab down` and `provision lab up` again")
    return lab_overlay.apply(merged, data)


# ---------------------------------------------------------------- entry point


def load(path: str | Path) -> LoadedSite:
    """Load and schema-check a site; raise InventoryError with findings on any error."""
    with gc_paused():
        return _load(Path(path))


def _load(root: Path) -> LoadedSite:
    merged, smap = _merge(root)
    lab_hosts, lab_switches = _apply_lab_overlay(merged, root if root.is_dir() else root.parent)
    try:
        site = Site.model_validate(merged)
    except ValidationError as exc:
        findings = _schema_findings(exc, smap)
        raise InventoryError(
            f"{len(findings)} error(s) in the inventory: {findings[0].format()}",
            findings=findings,
        ) from None
    catalog = dict(shipped_catalog())
    notes: list[Finding] = []
    for i, block in enumerate(site.catalog):
        if block.name in catalog:
            notes.append(Finding(
                "catalog-override", Severity.WARNING,
                f"site catalog replaces the shipped block type '{block.name}'",
                "give the site's block a new name unless replacing it is intended",
                smap.locate(("catalog", i, "name"))))
        catalog[block.name] = block
    return LoadedSite(site=site, catalog=catalog, sources=smap, root=root,
                      warnings=tuple(notes), lab_hosts=lab_hosts, lab_switches=lab_switches)
