"""One truth: every command acts only on a site `provision validate` accepts (the same
checks, through cli.common.load_checked), what a renderer or a role would refuse later is
refused by validate first, and a refused render leaves no partial directory."""

from __future__ import annotations

import ast
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provisioner import render as render_mod
from provisioner import roce
from provisioner.cli import app
from provisioner.errors import InventoryError, RenderError
from provisioner.fabric import RENDERERS, PortSpec, SwitchSpec
from provisioner.inventory import check, load
from provisioner.inventory.bundle_models import load_bundle
from provisioner.inventory.models import Roce
from provisioner.inventory.valid import load_valid
from provisioner.sources import GPU_OPERATOR_CHART_VERSION, NETWORK_OPERATOR_CHART_VERSION
from tests.conftest import EXAMPLE, ROOT, edited_example

runner = CliRunner()
CLI = ROOT / "provisioner" / "cli"


def _example(tmp_path: Path, name: str, file: str, old: str, new: str) -> Path:
    site = tmp_path / name
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns(".provision"))
    path = site / file
    assert old in path.read_text(), old
    path.write_text(path.read_text().replace(old, new))
    return site


def _no_control_plane(tmp_path: Path) -> Path:
    return _example(tmp_path, "no-cp", "placements.yaml", "roles: [control-plane]",
                    "roles: [worker]")


# The example's two DGX RoCE ports cabled explicitly, both on one port of leaf01.
TWO_ON_ONE_PORT = """  links:
    - {node: dgx01, nic: roce, switch: leaf01, switch_port: swp1s0}
    - {node: dgx02, nic: roce, switch: leaf01, switch_port: swp1s0}"""
RULES = """  rules:
    - {rule: rack_leaf, nic: roce, port_pattern: "swp{n}s0"}"""


def _one_port_twice(tmp_path: Path) -> Path:
    return _example(tmp_path, "one-port", "site.yaml", RULES, TWO_ON_ONE_PORT)


def _missing_port(tmp_path: Path) -> Path:
    # an SN5600 has 64 ports: the rule puts node n on port n + 99
    return _example(tmp_path, "no-port", "site.yaml", 'port_pattern: "swp{n}s0"}',
                    'port_pattern: "swp{n}s0", first_port: 100}')


def _invoke(args: list[str]) -> tuple[int, str]:
    result = runner.invoke(app, args, env={"PROVISION_BMC_PASSWORD": "x",
                                           "PROVISION_SWITCH_PASSWORD": "x"})
    return result.exit_code, result.output


# Every command that reads a site, with the arguments that get it past option parsing.
# `lab down` alone loads without the checks (a lab must come down whatever its site says).
COMMANDS: list[list[str]] = [
    ["power", "{site}"],
    ["render", "{site}", "--out", "{tmp}/render"],
    ["render", "{site}", "--artifacts"],
    ["run", "{site}", "--check"],
    ["up", "{site}", "--no-progress"],
    ["plan", "{site}"],
    ["status", "{site}"],
    ["upgrade", "plan", "{site}", "--to", "2026.11"],
    ["upgrade", "apply", "{site}", "--to", "2026.11", "--kube-api", "http://127.0.0.1:9"],
    ["fabric", "check", "{site}"],
    ["fabric", "render", "{site}", "--out", "{tmp}/fabric"],
    ["fabric", "diff", "{site}"],
    ["fabric", "push", "{site}", "--dry-run"],
    ["bmc", "status", "{site}", "--timeout", "1"],
    ["bmc", "on", "{site}", "--timeout", "1"],
    ["pxe", "render", "{site}", "--interface", "lo", "--out", "{tmp}/pxe"],
    ["doctor", "{site}"],
    ["discover", "{site}", "--range", "127.0.0.1/32", "--timeout", "0.1"],
    ["add", "{site}", "--bmc", "127.0.0.1", "--scheme", "http", "--redfish-port", "9"],
    ["lab", "up", "{site}", "--no-ssh-hosts"],
    ["lab", "status", "{site}"],
    ["lab", "add-unknown", "{site}"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(a[:2]) for a in COMMANDS])
def test_every_command_refuses_a_site_validate_refuses(tmp_path: Path,
                                                       args: list[str]) -> None:
    """A site without a control plane: validate exits 3, and so does every command, with
    validate's finding and before it touches anything (nothing written under --out)."""
    site = _no_control_plane(tmp_path)
    code, out = _invoke(["validate", str(site)])
    assert code == 3 and "no node has the control-plane role" in out
    argv = [a.format(site=site, tmp=tmp_path) for a in args]
    code, out = _invoke(argv)
    assert code == 3, out
    assert "no node has the control-plane role" in out
    assert not any(p.name in ("render", "fabric", "pxe") for p in tmp_path.iterdir())
    assert not (site / ".provision" / "lab").exists()


def test_no_command_loads_a_site_without_validates_checks() -> None:
    """The class, not the instances: a command module calls load_checked, never the bare
    loader; the exceptions are validate and report (they show the findings themselves) and
    `lab down` (teardown)."""
    allowed = {("inventory.py", "validate"), ("report.py", "report"), ("lab.py", "down")}
    bare = set()
    for path in sorted(CLI.glob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef):
                continue
            for node in ast.walk(fn):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                        and node.func.id in ("load", "load_site")):
                    bare.add((path.name, fn.name))
    assert bare == allowed


@pytest.mark.parametrize("broken, said", [
    (_one_port_twice, "leaf01 port swp1s0 is used twice"),
    (_missing_port, "has ports 1-64"),
])
def test_fabric_commands_refuse_miscabled_sites(tmp_path: Path, broken: Callable[[Path], Path],
                                                said: str) -> None:
    """Two hosts on one switch port, or a port the switch does not have: validate refuses
    the cabling, so `fabric check` does not call it agreeing and `fabric render` writes no
    config with the port twice (the last host winning)."""
    site = broken(tmp_path)
    for args in (["validate", str(site)], ["fabric", "check", str(site)],
                 ["fabric", "render", str(site), "--out", str(tmp_path / "out")]):
        code, out = _invoke(args)
        assert code == 3, (args, out)
        assert said in out, (args, out)
        assert "agree" not in out
    assert not (tmp_path / "out").exists()


def _custom_classes(tmp_path: Path) -> Path:
    # DSCP 24 on priority 3: SONiC's lossless buffers would take it; NVUE's `qos roce` not
    return edited_example(tmp_path, "roce: {dscp: 26,", "roce: {dscp: 24,")


def test_validate_refuses_roce_classes_the_switch_renderer_cannot_set(tmp_path: Path) -> None:
    """Cumulus's renderer sets NVIDIA's default classes only: validate said valid and every
    fabric command then exited 6; now validate refuses it (exit 3, at software.roce.dscp),
    and the fabric commands refuse with validate's finding."""
    site = _custom_classes(tmp_path)
    code, out = _invoke(["validate", str(site), "--json"])
    assert code == 3, out
    found = [f for f in json.loads(out)["errors"]
             if f["code"] == "roce-classes-not-expressible"]
    assert len(found) == 1 and "leaf01 run cumulus" in found[0]["message"]
    assert found[0]["location"]["key_path"] == "software.roce.dscp"
    for args in (["fabric", "check"], ["fabric", "render"]):
        code, out = _invoke([*args, str(site)])
        assert code == 3 and "NVIDIA's default RoCE classes only" in out, out


CLASSES = [(26, 3, 48, 6), (24, 3, 48, 6), (26, 4, 48, 6), (26, 3, 46, 6), (26, 3, 48, 5)]


@pytest.mark.parametrize("nos", sorted(RENDERERS))
@pytest.mark.parametrize("classes", CLASSES)
def test_a_renderer_refuses_exactly_what_it_says_it_cannot_express(
        nos: str, classes: tuple[int, int, int, int]) -> None:
    dscp, prio, cnp_dscp, cnp_prio = classes
    policy = roce.policy(Roce(dscp=dscp, priority=prio, cnp_dscp=cnp_dscp,
                              cnp_priority=cnp_prio), nos)  # type: ignore[arg-type]
    renderer = RENDERERS[nos]
    spec = SwitchSpec("leaf01", nos, policy, (PortSpec("swp1", "dgx01 roce", 9216),))
    if renderer.can_express(policy):
        assert renderer.render(spec)
    else:
        with pytest.raises(RenderError, match="default RoCE classes only"):
            renderer.render(spec)
    assert renderer.can_express(policy) == (nos not in ("cumulus", "onyx")
                                            or classes == CLASSES[0])


@pytest.mark.parametrize("nos, pattern", [("cumulus", "swp{n}s0"), ("sonic", "Ethernet{n}"),
                                          ("onyx", "Eth1/{n}/1")])
def test_validate_and_the_renderer_agree_on_every_switch_os(tmp_path: Path, nos: str,
                                                             pattern: str) -> None:
    """The same site with a leaf of each OS: validate refuses the custom classes exactly
    where that OS's renderer says it cannot express them."""
    site = _custom_classes(tmp_path)
    placements = site / "placements.yaml"
    placements.write_text(placements.read_text().replace(
        "management: {os: cumulus, credentials: switch}",
        f"management: {{os: {nos}, credentials: switch}}"))
    (site / "site.yaml").write_text((site / "site.yaml").read_text().replace(
        '"swp{n}s0"', f'"{pattern}"'))
    loaded = load(site)
    policy = roce.policy(loaded.site.software.roce, nos)  # type: ignore[arg-type]
    codes = {f.code for f in check(loaded)}
    assert ("roce-classes-not-expressible" in codes) == (not RENDERERS[nos].can_express(policy))
    assert not {"switch-port-name", "switch-port-range"} & codes, codes


def test_validate_refuses_a_kubernetes_major_the_roles_do_not_install(tmp_path: Path) -> None:
    """roles/kubernetes refuses any version but 1.x.y; validate said valid."""
    site = edited_example(tmp_path, 'version: "1.35.8", cni', 'version: "2.0.1", cni')
    code, out = _invoke(["validate", str(site)])
    assert code == 3, out
    assert "Kubernetes 2.0.1: the roles install Kubernetes 1.x only" in out
    assert "site.yaml:" in out and "software.kubernetes.version" in out
    code, out = _invoke(["render", str(site), "--out", str(tmp_path / "out")])
    assert code == 3 and not (tmp_path / "out").exists()


BUNDLE = (EXAMPLE / "bundles" / "2026.11.yaml").read_text()


def _bundle(tmp_path: Path, old: str, new: str) -> Path:
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns(".provision"))
    text = BUNDLE.replace('name: "2026.11"', 'name: "next"')
    assert old in text, old
    (site / "bundles" / "next.yaml").write_text(text.replace(old, new))
    return site


def test_the_shipped_bundles_name_the_charts_the_tool_installs() -> None:
    assert f'gpu_operator: "{GPU_OPERATOR_CHART_VERSION}"' in BUNDLE
    assert f'network_operator: "{NETWORK_OPERATOR_CHART_VERSION}"' in BUNDLE
    assert load_valid(EXAMPLE)  # and the example, bundles and all, is valid


@pytest.mark.parametrize("old, new, said", [
    (f'gpu_operator: "{GPU_OPERATOR_CHART_VERSION}"', 'gpu_operator: "v25.3.0"',
     "charts.gpu_operator v25.3.0: this version of the tool installs"),
    (f'network_operator: "{NETWORK_OPERATOR_CHART_VERSION}"', 'network_operator: "25.1"',
     "has no record of 25.1"),
    ('kubernetes: "1.36.4"', 'kubernetes: "2.0.4"', "the roles install Kubernetes 1.x only"),
])
def test_a_bundle_naming_what_the_tool_does_not_install_is_refused(
        tmp_path: Path, old: str, new: str, said: str) -> None:
    """The roles install the charts at the versions sources.py pins: a bundle naming
    another was recorded as applied while the nodes got the pinned one. Refused at load
    (file:line), by validate and by `upgrade plan` (exit 3, nothing planned)."""
    site = _bundle(tmp_path, old, new)
    with pytest.raises(InventoryError) as exc:
        load_bundle(site, "next")
    assert said in exc.value.findings[0].message
    assert exc.value.findings[0].location.file.endswith("bundles/next.yaml")
    for args in (["validate", str(site)],
                 ["upgrade", "plan", str(site), "--to", "next"],
                 ["upgrade", "plan", str(site), "--to", "2026.11"]):
        code, out = _invoke(args)
        assert code == 3 and said in out, (args, out)
    # the same chart written without its "v" is the same version
    fine = _bundle(tmp_path / "v", f'gpu_operator: "{GPU_OPERATOR_CHART_VERSION}"',
                   f'gpu_operator: "{GPU_OPERATOR_CHART_VERSION.removeprefix("v")}"')
    assert load_bundle(fine, "next").bundle.charts.gpu_operator


def _holds_a_key(tmp_path: Path) -> Path:
    site = edited_example(tmp_path, "software:\n", "software:\n  ca_certificate: ca.pem\n")
    (site / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
                                 "-----BEGIN PRIVATE KEY-----\nMII\n-----END PRIVATE KEY-----\n")
    return site


def test_a_refused_render_leaves_no_partial_directory(tmp_path: Path) -> None:
    """The CA check refuses after inventory/ was written: nothing is left at --out, and
    no work directory beside it."""
    site = _holds_a_key(tmp_path)
    out = tmp_path / "out" / "ansible"
    with pytest.raises(RenderError, match="holds a private key"):
        render_mod.render(load(site), out)
    assert not out.exists()
    assert list((tmp_path / "out").iterdir()) == []
    code, text = _invoke(["render", str(site), "--out", str(out)])
    assert code == 6 and "holds a private key" in text
    assert not out.exists()


def test_a_refused_render_keeps_the_former_render(tmp_path: Path) -> None:
    site = _holds_a_key(tmp_path)
    out = tmp_path / "ansible"
    good = render_mod.render(load(EXAMPLE), out)
    before = {p: p.read_bytes() for p in good.files}
    assert all(p.is_relative_to(out) and p.is_file() for p in good.files)
    with pytest.raises(RenderError):
        render_mod.render(load(site), out)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
