"""The import floors of docs/architecture.md: a module imports only its own floor and the
ones below; nothing outside cli/ imports the lab. Read from the source (ast), every import
counted, those under TYPE_CHECKING and inside functions too."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "provisioner"

# Lowest first. A package or top-level module of provisioner/ -> its floor; a module of a
# package that sits below the package itself is named with its package ("state.dir").
FLOORS: dict[int, tuple[str, ...]] = {
    0: ("errors", "fanout", "install", "lazy", "lifecycle", "pids", "resources", "outdir"),
    1: ("inventory", "power", "roce", "hostnet", "payload", "sources", "state.dir", "profile",
        "credentials", "secrets"),
    2: ("state",),
    3: ("bmc", "switches", "kube", "ssh", "execution", "runner", "render", "fabric", "boot",
        "leftovers"),
    4: ("workflows", "upgrade", "discover", "report"),
    5: ("results", "console"),
    6: ("cli", "lab"),  # the lab sits beside the CLI: only cli/ may import it
}
FLOOR = {name: floor for floor, names in FLOORS.items() for name in names}
# Crossings that are known and wait for the restructuring (issue 37 §1): the lab's and the
# plan/status JSON shapes move out of lab/ and workflows/ into results/. Listed so that none
# is added; the test fails when one of them is gone, so this list only shrinks.
KNOWN = {
    ("provisioner.console", "provisioner.lab"),  # LabState, for `lab status`
    ("provisioner.results.workflow", "provisioner.lab"),  # LabState's JSON
    ("provisioner.results.discover", "provisioner.lab.unknown"),  # `lab add-unknown`'s JSON
    ("provisioner.workflows.report", "provisioner.results"),  # PlanReport, StatusReport
}


def _part(module: str) -> str:
    parts = module.split(".")
    if ".".join(parts[1:3]) in FLOOR:  # a module with a floor of its own (state.dir)
        return ".".join(parts[1:3])
    return parts[1] if len(parts) > 1 else ""


def _imports() -> set[tuple[str, str]]:
    """(importer, imported) for every import of a provisioner module in provisioner/."""
    found = set()
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            else:
                continue
            found.update((module, n) for n in names if n.startswith("provisioner."))
    return found


def _crossings() -> set[tuple[str, str]]:
    out = set()
    for importer, imported in _imports():
        mine, theirs = _part(importer), _part(imported)
        if mine in ("", "__main__") or mine == theirs or theirs == "":
            continue
        climbs = FLOOR[theirs] > FLOOR[mine]
        if climbs or (theirs == "lab" and mine != "cli"):
            out.add((importer, imported))
    return out


def test_every_module_has_a_floor():
    names = {p.stem if p.is_file() else p.name for p in ROOT.iterdir()
             if (p.suffix == ".py" and p.stem not in ("__init__", "__main__"))
             or (p.is_dir() and (p / "__init__.py").exists())}
    assert names - FLOOR.keys() == set(), "give the new module a floor in this test " \
        "and in docs/architecture.md"


def test_no_import_climbs_a_floor():
    assert _crossings() - KNOWN == set()


def test_the_known_crossings_still_exist():
    """When one is removed, take it off KNOWN, so the list cannot hide a new one."""
    assert KNOWN - _crossings() == set()


def test_the_edges_and_the_lab_never_import_a_workflow():
    edges = ("bmc", "lab", "switches", "execution")
    assert not [(a, b) for a, b in _imports()
                if _part(a) in edges and b.startswith("provisioner.workflows")]
