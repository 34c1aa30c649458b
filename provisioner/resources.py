"""Where the tool's own files are: playbooks, roles, templates and the example inventories.

In a checkout (or an editable install) they are the top-level directories of the source
tree. In an installed wheel they are package data under provisioner/_data/ (the wheel's
build copies them there, see setup.py), found through importlib.resources.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

from provisioner.errors import ConfigError

DATA_DIRS = ("playbooks", "roles", "templates", "inventories")


@cache
def _checkout() -> Path | None:
    root = Path(__file__).resolve().parents[1]
    if (root / "pyproject.toml").is_file() and all((root / d).is_dir() for d in DATA_DIRS):
        return root
    return None


def data_dir(name: str) -> Path:
    """One of DATA_DIRS, as a directory on disk."""
    if name not in DATA_DIRS:
        raise ValueError(f"not a data directory: {name}")
    root = _checkout()
    if root is not None:
        return root / name
    found = resources.files("provisioner").joinpath("_data", name)
    if not isinstance(found, Path) or not found.is_dir():
        raise ConfigError(f"provisioner's {name}/ directory is not installed",
                          hint="reinstall provisioner from its wheel (pip install provisioner)")
    return found


def playbooks_dir() -> Path:
    return data_dir("playbooks")


def roles_dir() -> Path:
    return data_dir("roles")


def templates_dir() -> Path:
    return data_dir("templates")


def example_site() -> Path:
    """The embedded default site (inventories/example)."""
    return data_dir("inventories") / "example"
