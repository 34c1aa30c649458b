"""NVUE and SONiC pushes (switches/staged.py): the command sequences, and what is reported
as applied and undone when a step fails in the middle.

There is no NVUE or SONiC simulator in this project (docs/fabric.md). The shells below are
transcripts of the documented behaviour, kept deliberately small: SONiC's config_db is a
dict changed with the independent `jsonpatch` library (what `config apply-patch` does,
RFC 6902), `config checkpoint`/`rollback` copy it; NVUE keeps an applied and a pending
`set:` tree (`nv config patch` merges into pending, `apply` copies it, `detach` drops it,
`replace` loads a file). Success lines are the documented ones ("Checkpoint created
successfully.", "Patch applied successfully."). A failure is injected at one command.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import pytest
import yaml

from provisioner.fabric import RENDERERS, PortSpec, SwitchSpec
from provisioner.inventory.models import Roce
from provisioner.roce import policy
from provisioner.switches import staged


def _spec(nos: str, ports: tuple[str, ...]) -> SwitchSpec:
    return SwitchSpec("leaf01", nos, policy(Roce(), nos, mtu_bytes=9216),  # type: ignore[arg-type]
                      tuple(PortSpec(p, f"dgx0{i} roce", 9216) for i, p in enumerate(ports, 1)))


def _merge(into: dict[str, Any], new: dict[str, Any]) -> None:
    for k, v in new.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = copy.deepcopy(v)


class SonicShell:
    def __init__(self, db: dict[str, Any], fail: str = "", partial: int = 0) -> None:
        self.db, self.fail, self.partial = db, fail, partial
        self.files: dict[str, str] = {}
        self.checkpoints: dict[str, dict[str, Any]] = {}
        self.log: list[str] = []

    def run(self, command: str) -> tuple[int, str]:
        self.log.append(command)
        argv = command.split()
        if command == "show runningconfiguration all":
            return 0, json.dumps(self.db, indent=4)
        if argv[:3] == ["sudo", "config", "checkpoint"]:
            self.checkpoints[argv[3]] = copy.deepcopy(self.db)
            return 0, "Config Rollbacker: Config checkpoint starting.\nCheckpoint created " \
                      "successfully."
        if argv[:3] == ["sudo", "config", "apply-patch"]:
            ops = json.loads(self.files[argv[3]])
            if self.fail == "apply-patch":  # GCU applies in steps: the first ones stay
                self.db = jsonpatch.apply_patch(self.db, ops[:self.partial])
                return 1, "Patch Applier: applying change 3\nError: Failed to apply patch"
            self.db = jsonpatch.apply_patch(self.db, ops)
            return 0, "Patch applied successfully."
        if argv[:3] == ["sudo", "config", "rollback"]:
            if self.fail == "rollback":
                return 1, "Error: Config rollback failed"
            self.db = copy.deepcopy(self.checkpoints[argv[3]])
            return 0, "Config rolled back successfully."
        if argv[:3] == ["sudo", "config", "save"]:
            return 0, ""
        if argv[:3] == ["sudo", "config", "delete-checkpoint"]:
            self.checkpoints.pop(argv[3], None)
            return 0, "Checkpoint deleted successfully."
        if argv[:2] == ["rm", "-f"]:
            return 0, ""
        return 127, f"bash: {argv[0]}: command not found"

    def put(self, path: str, text: str) -> None:
        self.files[path] = text

    def close(self) -> None:
        pass


SONIC_PORTS = ("Ethernet0", "Ethernet8")


def _sonic(fail: str = "", partial: int = 0) -> tuple[SonicShell, str]:
    running = {"PORT": {p: {"lanes": "0,1,2,3", "mtu": "1500", "admin_status": "up"}
                        for p in SONIC_PORTS},
               "DEVICE_METADATA": {"localhost": {"hostname": "leaf01"}}}
    return (SonicShell(running, fail, partial),
            RENDERERS["sonic"].render(_spec("sonic", SONIC_PORTS)))


def test_sonic_push_checkpoints_patches_saves_and_is_then_unchanged() -> None:
    shell, desired = _sonic()
    out = staged.run(shell, "leaf01", "sonic", desired, push=True)
    assert out.status == "pushed", out.error
    assert out.commands == ("sudo config checkpoint provision-fabric",
                            "sudo config apply-patch /tmp/provision-fabric-patch.json",
                            "sudo config save -y")
    assert "/PORT/Ethernet0/mtu" in out.applied
    assert shell.db["PORT"]["Ethernet0"]["lanes"] == "0,1,2,3"  # other config kept
    assert shell.db["PORT_QOS_MAP"]["Ethernet8"]["pfc_enable"] == "3,4"
    assert shell.checkpoints == {}  # deleted after success
    again = staged.run(shell, "leaf01", "sonic", desired, push=True)
    assert again.status == "unchanged"


def test_sonic_diff_sends_nothing() -> None:
    shell, desired = _sonic()
    out = staged.run(shell, "leaf01", "sonic", desired, push=False)
    assert out.status == "changes" and "+ /PORT/Ethernet0/mtu = 9216" in out.diff
    assert shell.log == ["show runningconfiguration all"]


def test_sonic_half_applied_patch_is_rolled_back_and_reported() -> None:
    shell, desired = _sonic(fail="apply-patch", partial=2)
    before = copy.deepcopy(shell.db)
    out = staged.run(shell, "leaf01", "sonic", desired, push=True)
    assert out.status == "rolled_back"
    assert "Failed to apply patch" in (out.error or "")
    assert len(out.applied) >= 1  # what the partial apply changed is named, not guessed
    assert out.undone == ("sudo config rollback provision-fabric",)
    assert shell.db == before
    assert "sudo config save -y" not in shell.log


def test_sonic_failed_rollback_says_check_by_hand() -> None:
    shell, desired = _sonic(fail="apply-patch", partial=2)
    shell.fail = "apply-patch"
    orig = shell.run

    def run(command: str) -> tuple[int, str]:
        if "rollback" in command:
            shell.fail = "rollback"
        return orig(command)

    shell.run = run  # type: ignore[method-assign]
    out = staged.run(shell, "leaf01", "sonic", desired, push=True)
    assert out.status == "failed" and "check leaf01 by hand" in (out.error or "")
    assert out.applied  # still reports what the half-applied patch changed


class NvueShell:
    def __init__(self, applied: dict[str, Any], fail: str = "") -> None:
        self.applied, self.pending, self.fail = applied, copy.deepcopy(applied), fail
        self.files: dict[str, str] = {}
        self.log: list[str] = []

    def _show(self) -> str:
        return yaml.safe_dump([{"header": {"model": "SN5600", "version": "cumulus-5.14"}},
                               {"set": self.applied}], sort_keys=False)

    def run(self, command: str) -> tuple[int, str]:
        self.log.append(command)
        argv = command.split()
        if command == "nv config show -o yaml":
            return 0, self._show()
        if argv[:4] == ["nv", "config", "show", "-o"] and ">" in argv:
            self.files[argv[-1]] = self._show()
            return 0, ""
        if argv[:3] == ["nv", "config", "patch"]:
            if self.fail == "patch":
                return 1, "Error: Invalid config [qos.roce.mode]: 'lossless' is not valid"
            for item in yaml.safe_load(self.files[argv[3]]):
                _merge(self.pending, item.get("set", {}))
            return 0, ""
        if argv[:3] == ["nv", "config", "apply"]:
            if self.fail == "apply" and self.pending != self.applied:
                # half the change lands (interfaces), then the apply fails
                self.applied["interface"] = copy.deepcopy(self.pending.get("interface", {}))
                self.fail = ""
                return 1, "Error: apply failed: reload of switchd timed out"
            self.applied = copy.deepcopy(self.pending)
            return 0, "applied [rev_id: 7]"
        if argv[:3] == ["nv", "config", "detach"]:
            self.pending = copy.deepcopy(self.applied)
            return 0, ""
        if argv[:3] == ["nv", "config", "replace"]:
            doc = yaml.safe_load(self.files[argv[3]])
            self.pending = next(i["set"] for i in doc if "set" in i)
            return 0, ""
        if argv[:3] == ["nv", "config", "save"] or argv[:2] == ["rm", "-f"]:
            return 0, ""
        return 127, f"-bash: {argv[0]}: command not found"

    def put(self, path: str, text: str) -> None:
        self.files[path] = text

    def close(self) -> None:
        pass


def _nvue(fail: str = "") -> tuple[NvueShell, str]:
    applied = {"system": {"hostname": "leaf01"},
               "interface": {"swp1s0": {"link": {"mtu": 1500}}}}
    return NvueShell(applied, fail), RENDERERS["cumulus"].render(_spec("cumulus",
                                                                       ("swp1s0", "swp2s0")))


def test_nvue_push_patches_applies_saves_and_is_then_unchanged() -> None:
    shell, desired = _nvue()
    out = staged.run(shell, "leaf01", "cumulus", desired, push=True)
    assert out.status == "pushed", out.error
    assert out.commands == ("nv config show -o yaml > /tmp/provision-fabric-before.yaml",
                            "nv config patch /tmp/provision-fabric.yaml",
                            "nv config apply --assume-yes", "nv config save")
    assert shell.applied["qos"]["roce"] == {"enable": True, "mode": "lossless"}
    assert shell.applied["system"] == {"hostname": "leaf01"}
    assert staged.run(shell, "leaf01", "cumulus", desired, push=True).status == "unchanged"


def test_nvue_refused_patch_is_detached_and_nothing_applied() -> None:
    shell, desired = _nvue(fail="patch")
    before = copy.deepcopy(shell.applied)
    out = staged.run(shell, "leaf01", "cumulus", desired, push=True)
    assert out.status == "rolled_back" and out.applied == ()
    assert out.undone == ("nv config detach",)
    assert "is not valid" in (out.error or "")
    assert "nv config apply --assume-yes" not in shell.log
    assert shell.applied == before and shell.pending == before


def test_nvue_half_applied_apply_goes_back_to_the_snapshot() -> None:
    shell, desired = _nvue(fail="apply")
    before = copy.deepcopy(shell.applied)
    out = staged.run(shell, "leaf01", "cumulus", desired, push=True)
    assert out.status == "rolled_back", out.error
    assert "/interface/swp1s0/link/mtu" in out.applied  # the half that landed, named
    assert "/qos/roce/mode" not in out.applied  # the half that did not
    assert out.undone == ("nv config replace /tmp/provision-fabric-before.yaml",
                          "nv config apply --assume-yes")
    assert shell.applied == before


@pytest.mark.parametrize("nos", ["cumulus", "sonic"])
def test_unreadable_running_config_is_a_fabric_error(nos: str) -> None:
    class Broken(NvueShell):
        def run(self, command: str) -> tuple[int, str]:
            return 1, "Error: nvued is not running"

    from provisioner.errors import FabricError

    with pytest.raises(FabricError, match="nvued is not running"):
        staged.run(Broken({}), "leaf01", nos, "[]", push=True)


def test_an_aborted_eos_session_reports_nothing_applied_and_sends_no_undo() -> None:
    """EOS lines go into a `configure session`; a refused one aborts it (netmiko_driver)."""
    from provisioner.switches.base import SentLines
    from provisioner.switches.ops import _switch

    class Session:
        def __init__(self) -> None:
            self.sent: list[tuple[str, ...]] = []

        def running_config(self) -> str:
            return "hostname leaf01\n"

        def apply(self, commands: Any) -> SentLines:
            self.sent.append(tuple(commands))
            return SentLines((), commands[1], "% Invalid input; session aborted")

        def save(self) -> None:
            raise AssertionError("nothing to save after an abort")

        def close(self) -> None:
            pass

    drv = Session()
    out = _switch(drv, "leaf01", "eos", "interface Ethernet1/1\n   mtu 9214\n", push=True)
    assert out.status == "rolled_back" and out.applied == () and out.undone == ()
    assert "session aborted" in (out.error or "") and "nothing applied" in (out.error or "")
    assert len(drv.sent) == 1  # no compensating lines after an abort


class OnyxRanges:
    """Onyx's running config as Onyx prints it: ports that share a setting on one line with
    a port range (`interface ethernet 1/1-1/2 qos trust L3`, as in Onyx 3.9's)."""

    def __init__(self) -> None:
        self.settings: dict[str, set[str]] = {}  # setting -> ports
        self.top: list[str] = []
        self.saved = 0

    def running_config(self) -> str:
        lines = ["##", "## Running database", "##", *self.top]
        for setting, ports in sorted(self.settings.items()):
            nums = sorted(int(p.split("/")[1]) for p in ports)
            runs: list[list[int]] = []
            for n in nums:
                if runs and runs[-1][-1] == n - 1:
                    runs[-1].append(n)
                else:
                    runs.append([n])
            for r in runs:
                where = f"1/{r[0]}" + (f"-1/{r[-1]}" if len(r) > 1 else "")
                lines.append(f"interface ethernet {where} {setting}")
        return "\n".join(lines) + "\n"

    def apply(self, commands: Any) -> Any:
        from provisioner.switches.base import SentLines
        for c in commands:
            words = c.split(" ", 3)
            if words[:2] == ["interface", "ethernet"]:
                self.settings.setdefault(words[3], set()).add(words[2])
            else:
                self.top.append(c)
        return SentLines(tuple(commands))

    def save(self) -> None:
        self.saved += 1

    def close(self) -> None:
        pass


def test_onyx_port_ranges_read_back_as_the_rendered_lines() -> None:
    """A push whose settings Onyx prints as port ranges reads back complete (saved, no
    undo), the next diff is empty, and `fabric check --live` reads each port's MTU."""
    from provisioner.switches.ops import _switch

    ports = (PortSpec("Eth1/1", "dgx01 roce", 9216), PortSpec("Eth1/2", "dgx02 roce", 9216),
             PortSpec("Eth1/3", "dgx03 roce", 9216))
    desired = RENDERERS["onyx"].render(
        SwitchSpec("leaf01", "onyx", policy(Roce(), "onyx", mtu_bytes=9216), ports))
    drv = OnyxRanges()
    out = _switch(drv, "leaf01", "onyx", desired, push=True)
    assert out.status == "pushed" and drv.saved == 1, out.error
    assert "interface ethernet 1/1-1/3 mtu 9216 force" in drv.running_config()
    assert _switch(drv, "leaf01", "onyx", desired, push=True).status == "unchanged"
    qos = RENDERERS["onyx"].parse(drv.running_config())
    assert qos.port_mtu_bytes == {"Eth1/1": 9216, "Eth1/2": 9216, "Eth1/3": 9216}
    assert qos.trust_dscp and qos.lossless_priorities == {3}


def test_a_payload_that_cannot_be_written_applies_nothing() -> None:
    from provisioner.errors import FabricError

    shell, desired = _sonic()

    def put(path: str, text: str) -> None:
        raise FabricError(f"leaf01: writing {path} failed: No space left on device")

    shell.put = put  # type: ignore[method-assign]
    out = staged.run(shell, "leaf01", "sonic", desired, push=True)
    assert out.status == "failed" and "No space left" in (out.error or "")
    assert "nothing applied" in (out.error or "")
    assert not any("apply-patch" in c for c in shell.log)
    assert "sudo config delete-checkpoint provision-fabric" in shell.log


def test_an_nvue_breakout_is_compared_even_though_its_mode_is_an_empty_mapping() -> None:
    """`breakout: {2x: {}}` is a setting: a switch not broken out lacks it (the diff says
    so), and one that shows the mode with its defaults filled in has it."""
    desired = "- set:\n    interface:\n      swp1:\n        link:\n          breakout:\n" \
              "            2x: {}\n"
    flavor = staged.FLAVORS["cumulus"]
    assert staged.missing(flavor, desired, "- set:\n    interface: {}\n") == [
        "/interface/swp1/link/breakout/2x"]
    filled = desired.replace("2x: {}", "2x:\n              lanes-per-port: 4")
    assert staged.missing(flavor, desired, filled) == []
    assert staged.missing(flavor, desired, desired) == []
    other = desired.replace("2x: {}", "4x: {}")
    assert staged.missing(flavor, desired, other) == ["/interface/swp1/link/breakout/2x"]
