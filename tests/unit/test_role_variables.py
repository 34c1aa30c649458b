"""Every role variable a role's tasks, handlers and templates name is defined by the role
(defaults, vars, a register, a set_fact or a task's vars): the lab skips the GPU- and
cluster-bound tasks, so a default dropped from a role would only fail on a real node (a
rewrite of dcgm's defaults once dropped the host engine wait's retries that way)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT

ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir())
# Given by the caller of a shared task file, as its header says.
CALLER_GIVEN = {"base_os": {"base_os_repo_name", "base_os_repo_uri", "base_os_repo_host"}}


def _walk(node: Any, found: set[str]) -> None:
    """Names a task list defines: registers, set_fact keys, task vars, loop vars, tags."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "register" and isinstance(value, str):
                found.add(value)
            elif key in ("ansible.builtin.set_fact", "vars") and isinstance(value, dict):
                found.update(value)
            elif key == "loop_control" and isinstance(value, dict):
                found.add(str(value.get("loop_var", "item")))
            elif key == "tags":
                found.update([value] if isinstance(value, str) else value)
            _walk(value, found)
    elif isinstance(node, list):
        for item in node:
            _walk(item, found)


def _undefined(base: Path, role: str) -> set[str]:
    """The role variables a role (at base) names but defines nowhere."""
    defined: set[str] = set(CALLER_GIVEN.get(role, set()))
    texts: list[str] = []
    for name in ("defaults/main.yml", "vars/main.yml"):
        path = base / name
        if path.exists():
            defined.update(yaml.safe_load(path.read_text()) or {})
            texts.append(path.read_text())
    for path in sorted([*base.glob("tasks/*.yml"), *base.glob("handlers/*.yml")]):
        _walk(yaml.safe_load(path.read_text()), defined)
        texts.append(path.read_text())
    texts += [p.read_text() for p in sorted(base.glob("templates/**/*")) if p.is_file()]
    # the role's own modules (library/NAME.py) are task keys, not variables
    defined.update(p.stem for p in base.glob("library/*.py"))
    used: set[str] = set()
    for text in texts:
        code = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
        used.update(re.findall(rf"\b{role}_[a-z0-9_]+\b", code))
    return used - defined


@pytest.mark.parametrize("role", ROLES)
def test_every_role_variable_the_role_names_is_defined(role: str) -> None:
    assert _undefined(ROOT / "roles" / role, role) == set()


def test_the_check_finds_a_dropped_default(tmp_path: Path) -> None:
    """On a copy of dcgm whose defaults lost the host engine wait's retries."""
    copy = tmp_path / "dcgm"
    shutil.copytree(ROOT / "roles/dcgm", copy)
    defaults = copy / "defaults/main.yml"
    text = defaults.read_text()
    assert "dcgm_engine_wait_retries: 12\n" in text
    defaults.write_text(text.replace("dcgm_engine_wait_retries: 12\n", ""))
    assert _undefined(copy, "dcgm") == {"dcgm_engine_wait_retries"}
