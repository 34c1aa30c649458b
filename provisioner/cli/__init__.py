"""The `provision` command: a thin Typer layer over the core (parse -> core -> console).

The package itself imports no command: `main` asks root.build for the one the command line
names, so `provision --version` and `provision bmc on` start without importing the rest.
`app` (every command) is built when first asked for, as the tests and docs tools do."""

from __future__ import annotations

import importlib
import sys
from typing import Any

from provisioner import __version__

ROOT = "provisioner.cli.root"


def main() -> None:
    if sys.argv[1:] == ["--version"]:  # answered before any command or library is imported
        sys.stdout.write(f"provision {__version__}\n")
        return
    importlib.import_module(ROOT).main()


def __getattr__(name: str) -> Any:
    """`app` (built once, every command) and the root module's other names."""
    if name.startswith("__"):
        raise AttributeError(name)
    root = importlib.import_module(ROOT)
    if name == "app":
        app = root.build()
        globals()["app"] = app
        return app
    return getattr(root, name)
