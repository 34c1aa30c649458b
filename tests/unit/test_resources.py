"""Every path to the tool's shipped data goes through provisioner/resources.py.

A module that builds such a path from its own location (`Path(__file__).parents[2] /
"templates"`) names the source tree: it works in a checkout and fails in an installed
wheel, where the data is package data under provisioner/_data/. These tests read the
source (ast), so the class stays fixed without building a wheel; the wheel itself is run
by tests/integration/test_wheel.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from provisioner import resources
from provisioner.errors import ConfigError
from tests.conftest import ROOT

PACKAGE = ROOT / "provisioner"
RESOLVER = PACKAGE / "resources.py"
# Ways to reach files shipped with a package other than through the resolver.
LOADER_MODULES = {"importlib.resources", "importlib_resources", "pkgutil", "pkg_resources"}


def _modules() -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text(), filename=str(p)))
            for p in sorted(PACKAGE.rglob("*.py")) if p != RESOLVER]


def _where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"


def test_no_module_but_the_resolver_uses_its_own_location():
    found = [_where(p, n) for p, tree in _modules() for n in ast.walk(tree)
             if (isinstance(n, ast.Name) and n.id == "__file__")
             or (isinstance(n, ast.Attribute) and n.attr in ("__file__", "__path__"))]
    assert found == [], f"build paths to shipped data with provisioner.resources: {found}"


def test_no_module_but_the_resolver_reads_package_data():
    found = []
    for path, tree in _modules():
        for n in ast.walk(tree):
            if isinstance(n, ast.Import):
                names = {a.name for a in n.names}
            elif isinstance(n, ast.ImportFrom) and n.module:
                names = {n.module, *(f"{n.module}.{a.name}" for a in n.names)}
            elif isinstance(n, ast.Attribute) and n.attr == "PackageLoader":
                names = {"jinja2.PackageLoader"}
            else:
                continue
            if names & (LOADER_MODULES | {"jinja2.PackageLoader"}):
                found.append(_where(path, n))
    assert found == [], f"read shipped files with provisioner.resources: {found}"


def _is_resolver_call(node: ast.expr) -> bool:
    """`resources.<function>(...)`, or str() of one."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "str" and node.args):
        node = node.args[0]
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "resources")


def test_every_template_loader_reads_the_resolvers_directory():
    loaders = [(p, n) for p, tree in _modules() for n in ast.walk(tree)
               if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
               and n.func.attr == "FileSystemLoader"]
    assert loaders, "the renderers load their templates with jinja2.FileSystemLoader"
    wrong = [_where(p, n) for p, n in loaders
             if not n.args or not _is_resolver_call(n.args[0])]
    assert wrong == [], f"pass resources.templates_dir(...) to FileSystemLoader: {wrong}"


def test_templates_dir_names_the_directories_the_renderers_read():
    for parts in (("report",), ("pxe",), ("switch", "cumulus")):
        assert resources.templates_dir(*parts).is_dir(), parts
    assert (resources.templates_dir() / "ansible.cfg.j2").is_file()


def test_package_bytes_reads_shipped_files_and_names_a_missing_one():
    assert b"blocks:" in resources.package_bytes("provisioner.inventory", "catalog.yaml")
    with pytest.raises(ConfigError, match=r"provisioner\.inventory/nope\.yaml"):
        resources.package_bytes("provisioner.inventory", "nope.yaml")
    with pytest.raises(ValueError, match="not a provisioner package"):
        resources.package_bytes("jinja2", "__init__.py")


def test_generated_files_of_a_site_inside_the_package_go_to_the_current_directory(
        tmp_path, monkeypatch):
    inside = PACKAGE / "_data" / "inventories" / "example"  # where a wheel ships it
    assert resources.is_shipped(inside) and resources.is_shipped(PACKAGE)
    assert not resources.is_shipped(ROOT / "inventories" / "example")  # a checkout's own
    assert not resources.is_shipped(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert resources.writable_base(inside) == tmp_path
    assert resources.writable_base(ROOT / "inventories" / "example") == (
        ROOT / "inventories" / "example")
