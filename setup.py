"""Build hook only (the project is configured in pyproject.toml): the wheel carries the
top-level playbooks/, roles/, templates/ and inventories/ as package data under
provisioner/_data/, where provisioner/resources.py finds them without the source tree."""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

DATA_DIRS = ("playbooks", "roles", "templates", "inventories")
SKIP = shutil.ignore_patterns(".provision", "__pycache__", "*.pyc", ".molecule", ".cache")


class BuildPyWithData(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads them from the checkout
        here = Path(__file__).resolve().parent
        dest = Path(self.build_lib) / "provisioner" / "_data"
        shutil.rmtree(dest, ignore_errors=True)  # no stale files from an earlier build
        for name in DATA_DIRS:
            shutil.copytree(here / name, dest / name, ignore=SKIP, dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildPyWithData})
