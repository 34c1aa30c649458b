"""Load a site inventory (one YAML file or a directory of them) into a typed Site.

YAML is parsed with libyaml's safe loader only, from its events (yamltree.py): the data,
and beside it a compact table of where each node starts, so that a finding's key path
becomes file:line:column when it is needed (sourcemap.py). Memory stays a small multiple
of the YAML's size, and a site too large for the memory available is refused by name
before it is parsed (bench/inventory_scale.py measures both).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError

from provisioner import outdir, resources
from provisioner.errors import InventoryError
from provisioner.inventory.findings import Finding, Location, Severity
from provisioner.inventory.models import BlockType, Placement, Site
from provisioner.inventory.sourcemap import PathPart, SourceMap, _Part
from provisioner.inventory.yamlsafe import (
    MAX_EXPANDED_NODES,
    Lines,
    Loader,
    available_memory_bytes,
    check_memory,
    gc_paused,
    memory_error,
    node_budget,
    parse,
    parse_tree,
    read_file,
)
from provisioner.inventory.yamltree import MAPPING

KeyPath = tuple[PathPart, ...]

LIST_KEYS = ("catalog", "networks", "circuits", "racks", "placements")
DICT_KEYS = ("credentials",)
SINGLE_KEYS = ("site", "software")
TOP_LEVEL_KEYS = frozenset(LIST_KEYS + DICT_KEYS + SINGLE_KEYS)
# the header of every file provisioner renders (a switch config from `fabric render --out`)
GENERATED = b"Rendered by provisioner"

# pydantic reports every bad item; past this many, the rest are summed up in one finding.
MAX_SCHEMA_FINDINGS = 200


@dataclass(frozen=True)
class LoadedSite:
    site: Site
    catalog: dict[str, BlockType]
    sources: SourceMap
    root: Path
    warnings: tuple[Finding, ...] = ()

    @property
    def base_dir(self) -> Path:
        return self.root if self.root.is_dir() else self.root.parent


# ---------------------------------------------------------------- parsing


def _parse_file(path: Path, display: str, budget: int = MAX_EXPANDED_NODES
                ) -> tuple[Any, yaml.Node | None, Lines, int]:
    return parse(read_file(path, display), display, budget)


def _inventory_files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise InventoryError(f"{root}: no such inventory file or directory",
                             hint="pass a site directory such as inventories/example")
    # What is never inventory: hidden and _ names (.provision/, where every command writes by
    # default), release bundles (bundle_models.py), and a directory a render generated (its
    # marker: an Ansible project or boot files written there with --out).
    outputs = {p.parent for p in root.rglob(outdir.MARKER) if p.is_file()}
    files = sorted(
        p for p in root.rglob("*")
        if p.suffix in (".yaml", ".yml") and p.is_file()
        and not any(part.startswith((".", "_")) for part in p.relative_to(root).parts)
        and p.relative_to(root).parts[0] != "bundles"
        and not any(d in outputs for d in p.parents)
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


def _merge(root: Path, files: list[Path]) -> tuple[dict[str, Any], SourceMap]:
    merged: dict[str, Any] = {}
    smap = SourceMap()
    problems: list[Finding] = []
    # shared by all files: many files are not a way around it
    budget = node_budget(files, MAX_EXPANDED_NODES)
    for path in files:
        display = _display(path)
        smap.files.append(display)
        text = read_file(path, display)
        data, tree, smap.lines[display], used = parse_tree(text, display, budget)
        budget -= used
        if data is None or tree is None:
            continue
        if not isinstance(data, dict) or tree.kind(0) != MAPPING:
            hint = ("this file is provisioner's output, not inventory: move it out of the "
                    "site directory (commands write into .provision/ by default, which is "
                    "skipped)" if GENERATED in text[:400]
                    else "start the file with 'site:' or 'racks:'")
            problems.append(Finding("inventory-file", Severity.ERROR,
                                    "the top level must be a mapping of keys such as site, racks",
                                    hint, Location(display, 1, 1, "(top level)")))
            continue
        for pair, (knode, vnode) in enumerate(tree.pairs(0)):
            key = tree.text(knode)
            if not isinstance(key, str) or key not in data:
                continue
            value = data[key]
            seg_list = smap.parts.setdefault(key, [])
            loc = Location(display, *tree.position(knode), key)
            count = len(value) if isinstance(value, list) else 0
            if key in LIST_KEYS and isinstance(value, list):
                prior = merged.setdefault(key, [])
                if isinstance(prior, list):
                    seg_list.append(_Part(display, path, tree, knode, vnode, len(prior),
                                          count, pair))
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
                    seg_list.append(_Part(display, path, tree, knode, vnode, 0, count, pair))
                    prior.update(value)
                    continue
            if key in merged:
                first = seg_list[0]
                problems.append(Finding(
                    "duplicate-key", Severity.ERROR,
                    f"'{key}' is already defined in "
                    f"{first.file}:{first.tree.position(first.key)[0]}",
                    f"define '{key}' in one file only", loc))
                continue
            seg_list.append(_Part(display, path, tree, knode, vnode, 0, count, pair))
            merged[key] = value
        data = value = None  # the file's own lists would keep every item alive
    if problems:
        raise InventoryError(problems[0].format(), findings=problems)
    return merged, smap


# ---------------------------------------------------------------- catalog


@cache
def shipped_catalog() -> dict[str, BlockType]:
    """The building blocks shipped with the tool (catalog.yaml beside this module)."""
    text = resources.package_bytes("provisioner.inventory", "catalog.yaml")
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
            hint = "see the inventory reference in docs/inventory.md for the allowed values"
        location = smap.locate(loc, at_key=at_key)
        code = "inline-secret" if "inline secret" in msg else f"schema-{kind}"
        findings.append(Finding(code, Severity.ERROR, msg, hint, location))
    if len(relevant) > MAX_SCHEMA_FINDINGS:
        more = max(exc.error_count(), len(relevant)) - MAX_SCHEMA_FINDINGS
        findings.append(Finding("schema-more", Severity.ERROR,
                                f"about {more} more schema error(s)",
                                "fix the errors above first", smap.locate(())))
    return findings


# ---------------------------------------------------------------- entry point


# What a caller changes in the merged data before the schema check (the lab's endpoints:
# lab/overlay.py); the site's own files are never changed.
Amend = Callable[[dict[str, Any]], None]


def load(path: str | Path, amend: Amend | None = None) -> LoadedSite:
    """Load and schema-check a site; raise InventoryError with findings on any error,
    including a site too large for the memory this process has (refused before parsing
    when its size says so, else when the memory runs out). `amend` changes the merged data
    first; the schema then checks what it made."""
    root = Path(path)
    files = _inventory_files(root)
    size_bytes = sum(_size(p) for p in files)
    check_memory(_display(root), size_bytes, available_memory_bytes())
    try:
        with gc_paused():
            return _load(root, files, amend)
    except MemoryError:
        pass  # out of the handler first: its traceback holds what was being built
    raise memory_error(_display(root), size_bytes, available_memory_bytes(), ran_out=True)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:  # unreadable: _read says so, by name
        return 0


def _validate_placements(merged: dict[str, Any]) -> None:
    """Turn each valid placement into its model in place, so its plain data is freed as
    the next one is built: the site's data and its models are never both whole in memory.
    An invalid placement stays data and Site.model_validate reports it where it would have
    (a model instance passes Site's validation as it is: revalidate_instances 'never')."""
    items = merged.get("placements")
    if not isinstance(items, list):
        return
    for i, item in enumerate(items):
        if isinstance(item, dict):
            try:
                items[i] = Placement.model_validate(item)
            except ValidationError:
                continue


def _load(root: Path, files: list[Path], amend: Amend | None) -> LoadedSite:
    merged, smap = _merge(root, files)
    if amend is not None:
        amend(merged)
    _validate_placements(merged)
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
                      warnings=tuple(notes))
