"""The lab apart from the core: its dependencies are the optional [lab] extra, and `lab up`
without them says what to install before anything starts."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from provisioner.errors import ConfigError
from provisioner.lab import emulators

ROOT = Path(__file__).resolve().parents[2]
LAB_ONLY = ("sushy-tools", "twisted")


def _name(requirement: str) -> str:
    return re.split(r"[<>=\[ ;]", requirement, maxsplit=1)[0].lower()


def test_a_production_install_brings_no_lab_dependency():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {_name(r) for r in project["dependencies"]}
    assert not core & set(LAB_ONLY)
    assert {_name(r) for r in project["optional-dependencies"]["lab"]} >= set(LAB_ONLY)
    assert '".[test,lab]"' in (ROOT / "scripts" / "bootstrap.sh").read_text()


def test_lab_up_without_the_extra_names_what_to_install():
    def nothing(_name: str) -> None:
        return None

    with pytest.raises(ConfigError, match=r"sushy-tools.*and Twisted Conch") as err:
        emulators.require_lab_extra(find=nothing)
    assert "provisioner[lab]" in (err.value.hint or "")

    def no_twisted(name: str) -> object:
        if name.startswith("twisted"):
            raise ModuleNotFoundError(name)
        return object()

    with pytest.raises(ConfigError, match="Twisted Conch") as err:
        emulators.require_lab_extra(find=no_twisted)
    assert "sushy" not in str(err.value)
    emulators.require_lab_extra()  # this checkout's environment has the extra
