"""A command imports what it needs: `--version` nothing of the commands, `bmc` no report,
upgrade, fabric or SSH library (the import-time cost every `provision` call paid)."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = r"""
import json, sys
from provisioner.cli import root
sys.argv = ["provision", *sys.argv[1:]]
command = root.named_command(sys.argv[1:])
root.build([command] if command else None)
ours = ("provisioner", "paramiko", "sushy", "pyghmi", "netmiko", "kubernetes", "ansible_runner")
print(json.dumps(sorted(m for m in sys.modules if m.startswith(ours))))
"""


def _modules(*argv: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    return set(json.loads(out))


def test_version_imports_no_command():
    out = subprocess.run([sys.executable, "-c", "import sys; sys.argv=['provision','--version'];"
                          "from provisioner.cli import main; main();"
                          "print(sorted(m for m in sys.modules if m.startswith('provisioner')))"],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    version, modules = out.splitlines()
    assert version.startswith("provision ")
    assert eval(modules) == ["provisioner", "provisioner.cli"]


def test_bmc_imports_neither_the_other_commands_nor_the_protocol_libraries():
    mods = _modules("bmc", "on", "--help")
    assert "provisioner.cli.bmc" in mods
    for unwanted in ("provisioner.cli.report", "provisioner.cli.upgrade", "provisioner.cli.fabric",
                     "provisioner.report.html", "provisioner.workflows.upgrade.apply", "paramiko",
                     "sushy", "pyghmi", "netmiko", "kubernetes", "ansible_runner"):
        assert unwanted not in mods, unwanted


def test_a_global_option_before_the_command_still_names_it():
    from provisioner.cli import root

    assert root.named_command(["--debug", "bmc", "on"]) == "bmc"
    assert root.named_command(["--help"]) is None
    assert root.named_command(["bmcc"]) is None  # a typo: the whole app answers
    assert _modules("--no-color", "pxe", "render", "--help") >= {"provisioner.cli.pxe"}
