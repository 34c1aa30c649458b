"""`provision fabric check|render` (no switches needed) and the pure CLI diff/undo logic."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from provisioner.cli import app
from provisioner.switches import cli_diff
from tests.conftest import EXAMPLE

runner = CliRunner()


def _site(tmp_path: Path, old: str, new: str, name: str = "placements.yaml") -> Path:
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns(".provision"))
    f = site / name
    assert old in f.read_text()
    f.write_text(f.read_text().replace(old, new))
    return site


def test_check_example_agrees() -> None:
    result = runner.invoke(app, ["fabric", "check", str(EXAMPLE), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["ok"] and doc["links_checked"] == 2 and doc["mismatches"] == []


def test_check_mismatch_exits_10_and_names_both_ends(tmp_path: Path) -> None:
    # A leaf whose dialect carries no RoCE QoS: every host on it disagrees.
    site = _site(tmp_path, "management: {os: cumulus, credentials: switch}",
                 "management: {os: cisco_ios, credentials: switch}")
    site_yaml = site / "site.yaml"
    site_yaml.write_text(site_yaml.read_text().replace('"swp{n}s0"', '"Ethernet0/{n}"'))
    result = runner.invoke(app, ["fabric", "check", str(site), "--json"])
    assert result.exit_code == 10
    doc = json.loads(result.output)
    pfc = [m for m in doc["mismatches"] if m["what"] == "pfc" and m["host"] == "dgx01"]
    assert pfc == [{"host": "dgx01", "nic": "roce", "switch": "leaf01", "port": "Ethernet0/1",
                    "what": "pfc", "host_value": "3", "switch_value": "none"}]
    text = runner.invoke(app, ["fabric", "check", str(site)]).output
    # The IOS dialect renders descriptions only, so it sets no MTU on the port either.
    assert "dgx02 roce <-> leaf01 Ethernet0/2: mtu: host 9000, switch port not configured" in text
    assert "dgx02 roce <-> leaf01 Ethernet0/2: dscp-map" in text


def test_render_writes_secret_free_files(tmp_path: Path) -> None:
    result = runner.invoke(app, ["fabric", "render", str(EXAMPLE), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "leaf01" / "nvue.yaml").read_text()
    assert "swp1s0:" in text and "PROVISION_SWITCH_PASSWORD" not in text


def test_cli_diff_sends_only_the_difference() -> None:
    running = "hostname x\n!\ninterface Gi0/1\n description dgx01 roce\n!\ninterface Gi0/2\n"
    desired = "interface Gi0/1\n description dgx01 roce\ninterface Gi0/2\n description dgx02\n"
    assert cli_diff.plan(desired, running) == ["interface Gi0/2", "description dgx02"]
    assert cli_diff.plan(desired, running + " description dgx02\n") == []


def test_undo_restores_or_negates() -> None:
    running = "interface Gi0/1\n description old\n"
    desired = "interface Gi0/1\n description new\n mtu 9000\nlogging host 10.0.0.1\n"
    todo = cli_diff.missing(desired, running)
    applied = cli_diff.commands(todo)
    assert cli_diff.undo(applied, todo, running) == [
        "no logging host 10.0.0.1", "interface Gi0/1", "no mtu 9000", "description old"]


def test_undo_of_a_no_line_puts_the_setting_back() -> None:
    """An EOS tx-queue's `no priority` (round-robin) is undone by `priority strict`, the
    default the running config does not show, or by the line that was there; never by
    `no no priority`."""
    running = "interface Ethernet1\n   tx-queue 3\n      bandwidth percent 20\n"
    desired = ("interface Ethernet1\n   tx-queue 3\n      no priority\n"
               "      bandwidth percent 50\n")
    todo = cli_diff.missing(desired, running)
    applied = cli_diff.commands(todo)
    undo = cli_diff.undo(applied, todo, running)
    assert "no no priority" not in undo
    assert undo == ["interface Ethernet1", "tx-queue 3", "bandwidth percent 20",
                    "priority strict"]
    shown = running + "      priority weighted\n"  # a line for it there: that one comes back
    assert "priority weighted" in cli_diff.undo(applied, cli_diff.missing(desired, shown),
                                                shown)


def test_push_refuses_a_miscabled_site_before_connecting(tmp_path: Path) -> None:
    site = _site(tmp_path, '"swp{n}s0"', '"swp{n}s7"', name="site.yaml")
    result = runner.invoke(app, ["fabric", "push", str(site)])
    assert result.exit_code == 3
    assert "sn5600 ports split into at most 2" in result.output


def test_push_prune_is_passed_on_and_stale_lines_are_shown(tmp_path: Path,
                                                            monkeypatch: Any) -> None:
    """`--prune` reaches ops.run; stale and removed lines are printed and in the JSON."""
    from provisioner.cli import fabric as fabric_cli
    from provisioner.switches.base import SwitchOutcome

    seen: dict[str, Any] = {}
    line = "interface Ethernet1 > priority-flow-control priority 3 no-drop"

    def fake_run(loaded: Any, env: Any, **kw: Any) -> list[SwitchOutcome]:
        seen.update(kw)
        if kw["prune"]:
            return [SwitchOutcome("leaf01", "eos", "pushed", pruned=(line,))]
        return [SwitchOutcome("leaf01", "eos", "unchanged", stale=(line,))]

    monkeypatch.setattr(fabric_cli.ops, "run", fake_run)
    site = _site(tmp_path, "name:", "name:")
    left = runner.invoke(app, ["fabric", "push", str(site)])
    assert left.exit_code == 0 and seen["prune"] is False
    assert "stale, left in place" in left.output and "--prune" in left.output
    pruned = runner.invoke(app, ["fabric", "push", str(site), "--prune", "--json"])
    assert pruned.exit_code == 0 and seen["prune"] is True, pruned.output
    doc = json.loads(pruned.output)
    assert doc["switches"][0]["pruned"] == [line] and doc["switches"][0]["stale"] == []


def test_lab_stand_ins_are_said_with_what_they_cannot_compare(tmp_path: Path) -> None:
    """A lab overlay standing FRR's vtysh (cisco_ios) in for the Cumulus leaf: diff, push
    and check --live say, in their notes and in text, what answers and what is not
    compared or sent. The stand-in's port is held closed: nothing is reached."""
    import socket

    site = _site(tmp_path, "name:", "name:")
    lab = site / ".provision" / "lab"
    lab.mkdir(parents=True)
    (lab / "pw").write_text("x\n")
    (lab / "pw").chmod(0o600)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        port = closed.getsockname()[1]
        (lab / "overlay.yaml").write_text(json.dumps({  # JSON is YAML
            "bmc": {}, "credentials": {"lab-switch": {
                "username": "admin", "password": {"file": str(lab / "pw")}}},
            "switches": {"leaf01": {"address": "127.0.0.1", "port": port,
                                    "credentials": "lab-switch", "stand_in": "cisco_ios"}}}))
        said = ("lab: leaf01 is stood in by FRRouting's vtysh (IOS-style CLI), not Cumulus "
                "Linux (NVUE): ")
        for cmd in ("diff", "push"):
            doc = json.loads(runner.invoke(app, ["fabric", cmd, str(site), "--json"]).output)
            assert doc["notes"] == [said + "its cumulus config (PFC, ECN, the DSCP map, DSCP "
                                    "trust and the port MTU) is rendered and checked, not "
                                    "pushed; only port descriptions are diffed and pushed"]
            assert doc["switches"][0]["nos"] == "cisco_ios"
        text = runner.invoke(app, ["fabric", "diff", str(site)]).output
        assert "note: " + said in " ".join(text.split())
        live = json.loads(runner.invoke(app, ["fabric", "check", "--live", str(site),
                                              "--json"]).output)
        assert live["notes"] == [said + "PFC, ECN, the DSCP map, DSCP trust and the port MTU "
                                 "cannot be compared live; `fabric check` without --live "
                                 "compares its rendered cumulus config with the hosts"]
    # no lab: no note
    plain = json.loads(runner.invoke(app, ["fabric", "check", str(EXAMPLE), "--json"]).output)
    assert plain["notes"] == []
