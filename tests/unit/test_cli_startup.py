"""A command imports what it needs: `--version` nothing of the commands, `bmc` no report,
upgrade, fabric or SSH library (the import-time cost every `provision` call paid).

Asserted on what is imported, not on how long it takes (issue 37 §4 measures the time:
`python -X importtime -m provisioner bmc on --help`)."""

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
print(json.dumps(sorted(sys.modules)))
"""
# Imported where they are used (a driver, an SSH session, a playbook, a render), never at a
# command's start.
LIBRARIES = ("sushy", "pyghmi", "paramiko", "netmiko", "ansible_runner", "kubernetes", "jinja2")
# Layers `provision bmc` does not run: the workflows (bmc.blocked_racks is imported by the
# power commands when they run), the report, upgrade, SSH, switches, Kubernetes, the lab.
LAYERS = ("provisioner.workflows", "provisioner.report", "provisioner.upgrade",
          "provisioner.ssh", "provisioner.switches", "provisioner.kube", "provisioner.lab",
          "provisioner.cli.report", "provisioner.cli.upgrade", "provisioner.cli.fabric")


def _imported(code: str) -> set[str]:
    """Every module a fresh interpreter has after `code`."""
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport json, sys\n"
                          "print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    return set(json.loads(out.splitlines()[-1]))


def _heavy(mods: set[str]) -> list[str]:
    return sorted(m for m in mods if m.split(".")[0] in LIBRARIES
                  or any(m == layer or m.startswith(layer + ".") for layer in LAYERS))


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
    mods = _imported("import sys; sys.argv = ['provision', '--version']\n"
                     "from provisioner.cli import main; main()")
    assert not {m.split(".")[0] for m in mods} & {"typer", "click", "rich", "pydantic", "yaml",
                                                 *LIBRARIES}


def test_bmc_imports_neither_the_other_commands_nor_the_protocol_libraries():
    mods = _modules("bmc", "on", "--help")
    assert "provisioner.cli.bmc" in mods
    assert _heavy(mods) == []


def test_the_bmc_command_module_imports_no_library_or_layer_it_does_not_run():
    """What `provision bmc on` imports before it runs: the command module and the BMC layer,
    no protocol library (make_driver imports it), no template engine, no workflow."""
    mods = _imported("import provisioner.cli.bmc")
    assert _heavy(mods) == []
    # nor the inventory's models, YAML or the console: cli/common imports them where a
    # command loads a site or prints
    assert not {m.split(".")[0] for m in mods} & {"pydantic", "yaml", "rich"}


def test_the_bmc_layer_imports_no_inventory_and_no_driver():
    """provisioner.bmc imports the inventory (its pydantic models, the loader, topology and
    credentials) where a target is made (targets), a driver where one is made (make_driver)."""
    mods = _imported("import provisioner.bmc")
    assert _heavy(mods) == []
    late = ("provisioner.bmc.redfish", "provisioner.bmc.ipmi", "provisioner.credentials",
            "provisioner.secrets", "provisioner.inventory", "pydantic", "yaml", "requests",
            "urllib3")
    assert sorted(m for m in mods if m.startswith(late)) == []


def test_the_root_imports_no_command_until_one_is_named():
    mods = _imported("import provisioner.cli.root")
    assert {m for m in mods if m.startswith("provisioner.")} <= {
        "provisioner.cli", "provisioner.cli.root", "provisioner.errors"}


def test_a_global_option_before_the_command_still_names_it():
    from provisioner.cli import root

    assert root.named_command(["--debug", "bmc", "on"]) == "bmc"
    assert root.named_command(["--help"]) is None
    assert root.named_command(["bmcc"]) is None  # a typo: the whole app answers
    assert _modules("--no-color", "pxe", "render", "--help") >= {"provisioner.cli.pxe"}
