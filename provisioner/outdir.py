"""A directory a command generates whole (`render`'s Ansible project, `pxe render`'s boot
files): written into a hidden directory beside its target and renamed onto it at the end,
so that a run refused half-way leaves no partial directory and a former output stays as it
was. MARKER inside such a directory says that it is one: replacing it is safe, and the
inventory loader skips it (its YAML files are output, never inventory)."""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from provisioner.errors import RenderError

MARKER = ".provisioner-render"
T = TypeVar("T")


def is_output(path: Path) -> bool:
    """Whether `path` is a directory a former run generated (it holds MARKER)."""
    return (path / MARKER).is_file()


def replace(out: Path, fill: Callable[[Path], T], *,
            former: Callable[[Path], bool] = is_output) -> T:
    """Run `fill` on a new hidden directory beside `out`, then put that directory in the
    place of `out`. Refused (RenderError, nothing written) when `out` holds files and
    `former` does not take it for a former output; `fill` writes MARKER itself."""
    if out.exists() and not (out.is_dir() and (not any(out.iterdir()) or former(out))):
        raise RenderError(f"{out} is not empty and not a former render",
                          hint="choose an empty directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    tag = f"{os.getpid()}-{secrets.token_hex(4)}"
    work = out.parent / f".{out.name}.rendering-{tag}"
    old = out.parent / f".{out.name}.replaced-{tag}"
    work.mkdir()
    try:
        result = fill(work)
        if out.exists():
            out.rename(old)  # aside first: `out` is never a half-deleted directory
        try:
            work.rename(out)
        except OSError:
            if old.exists():
                old.rename(out)
            raise
    finally:
        for left in (work, old):
            if left.exists():
                shutil.rmtree(left)
    return result
