"""Where the tool's own files are: playbooks, roles, templates and the example inventories,
and the files shipped inside the package (the block catalog, the lab's scripts).

In a checkout (or an editable install) the data directories are the top-level directories
of the source tree. In an installed wheel they are package data under provisioner/_data/
(the wheel's build copies them there, see setup.py), found through importlib.resources.
This module is the one place that builds a path to shipped data: a path built from a
module's own location elsewhere names the source tree and breaks in the wheel
(tests/unit/test_resources.py holds every other module to that).
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


@cache
def _package() -> Path:
    """The installed provisioner package's own directory (site-packages/provisioner)."""
    return Path(__file__).resolve().parent


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


def templates_dir(*parts: str) -> Path:
    """templates/, or a directory below it (`templates_dir("switch", "cumulus")`)."""
    return data_dir("templates").joinpath(*parts)


def example_site() -> Path:
    """The embedded default site (inventories/example)."""
    return data_dir("inventories") / "example"


def package_bytes(package: str, name: str) -> bytes:
    """A file shipped beside a module of the package (package data in pyproject.toml):
    `package_bytes("provisioner.inventory", "catalog.yaml")`."""
    if package != "provisioner" and not package.startswith("provisioner."):
        raise ValueError(f"not a provisioner package: {package}")
    try:
        return resources.files(package).joinpath(name).read_bytes()
    except (FileNotFoundError, ModuleNotFoundError):
        raise ConfigError(f"provisioner's {package}/{name} is not installed",
                          hint="reinstall provisioner from its wheel (pip install provisioner)"
                          ) from None


def is_shipped(path: Path) -> bool:
    """Whether `path` is inside the installed package (its data is read-only: an installed
    wheel's site-packages, or a system's). A checkout's inventories/ are not."""
    return path.resolve().is_relative_to(_package())


def writable_base(base_dir: Path) -> Path:
    """The directory a site's generated files go beside: the site's own directory, or the
    current one when the site is the embedded example inside the installed package."""
    return Path.cwd() if is_shipped(base_dir) else base_dir
