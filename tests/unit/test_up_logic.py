"""The up workflow's decisions with fake BMC drivers (no network): facts against the
declared block, the rack budget gate, virtual media, waves, plan and status reports and
their documented schemas."""

from __future__ import annotations

import json
import re
import shutil
import threading
from pathlib import Path

import pytest

from provisioner.bmc.base import (
    BmcTarget,
    BootDevice,
    BootMode,
    BootSetting,
    Gpu,
    HardwareFacts,
    NicFact,
    PowerAction,
    PowerState,
)
from provisioner.errors import ConfigError, InventoryError
from provisioner.inventory import load
from provisioner.inventory.topology import ansible_host
from provisioner.render import HostPlan
from provisioner.state import Phase, StateStore
from provisioner.workflows import report
from provisioner.workflows import up as up_mod
from provisioner.workflows.steps import guard
from tests.conftest import EXAMPLE, FIXTURES, ROOT


def server(name: str = "dgx01") -> HostPlan:
    return next(s for s in up_mod.servers(load(EXAMPLE)) if s.hostname == name)


def test_facts_that_match_the_block_pass_and_missing_ones_are_notes():
    s = server("dgx01")
    facts = HardwareFacts(gpus=(Gpu("H100", 8),),
                          nics=(NicFact("eth0", "52:54:00:00:00:21"),
                                NicFact("eth1", "52:54:00:00:01:21"),
                                NicFact("eth2", "52:54:00:00:02:21")))
    assert up_mod.compare_facts(s, facts) == ([], [])
    problems, notes = up_mod.compare_facts(s, HardwareFacts())
    assert problems == []
    assert notes == ["the BMC reports no GPU inventory; GPUs are counted at verify",
                     "the BMC reports no NIC MACs; the declared MACs are not checked"]


def test_a_dgx_h100_slot_reporting_4_gpus_or_other_macs_is_a_problem():
    s = server("dgx01")
    facts = HardwareFacts(gpus=(Gpu("H100", 4),), nics=(NicFact("eth0", "52:54:00:00:00:99"),))
    problems, _ = up_mod.compare_facts(s, facts)
    assert problems[0] == "the BMC reports 4 GPU(s); block dgx-h100 has 8"
    assert problems[1].startswith("MAC 52:54:00:00:00:21 (mgmt) is not among the BMC's NICs")
    cp = server("cp01")  # no GPUs declared: reported GPUs are a mismatch too
    assert up_mod.compare_facts(cp, HardwareFacts(gpus=(Gpu("L40S", 2),)))[0] == [
        "the BMC reports 2 GPU(s); block hci-2u4n has 0"]


def test_waves_put_control_planes_first_and_respect_the_size():
    hosts = ["dgx01", "dgx02", "cp01", "stor01", "cp02"]
    assert up_mod.waves(hosts, 2, first=["cp01", "cp02"]) == [
        ["cp01", "cp02"], ["dgx01", "dgx02"], ["stor01"]]
    assert up_mod.waves(hosts, 20) == [hosts]


class FakeDriver:
    """Records what the workflow asked of a BMC; answers like a healthy one."""

    calls: dict[str, list[str]] = {}
    gpus: dict[str, int] = {}
    on: set[str] = set()  # nodes whose BMC reports them on at the start

    def __init__(self, target: BmcTarget) -> None:
        self.target = target
        self.power = PowerState.ON if target.node in FakeDriver.on else PowerState.OFF
        self.log = FakeDriver.calls.setdefault(target.node, [])

    def validate(self) -> None: ...

    def get_power_state(self) -> PowerState:
        return self.power

    def set_power(self, action: PowerAction, timeout_s: float) -> PowerState:
        self.log.append(f"power {action.value}")
        self.power = PowerState.ON if action is PowerAction.ON else PowerState.OFF
        return self.power

    def set_boot_device(self, device: BootDevice, *, persistent: bool = False,
                        mode: BootMode = BootMode.UEFI) -> BootSetting:
        self.log.append(f"boot {device.value} {'persistent' if persistent else 'once'}")
        return BootSetting(device, persistent, mode)

    def get_boot_device(self) -> BootSetting:
        return BootSetting(BootDevice.NONE)

    def hardware_facts(self) -> HardwareFacts:
        self.log.append("facts")
        n = FakeDriver.gpus.get(self.target.node, 0)
        return HardwareFacts(gpus=(Gpu("H100", n),) if n else ())

    def power_reading_w(self) -> float | None:
        return None

    def insert_virtual_media(self, image_url: str) -> None:
        self.log.append(f"media {image_url}")

    def eject_virtual_media(self) -> None: ...

    def close(self) -> None: ...


@pytest.fixture(autouse=True)
def no_ssh_answers(monkeypatch):
    """Pure logic: no node's OS ever answers (and no lab running here can answer for it)."""
    FakeDriver.on = set()
    monkeypatch.setattr(guard, "check_installed", lambda address, *_a, **_k: guard.Answer(
        guard.State.SILENT, f"no SSH answer from {address}:22 (test)"))
    monkeypatch.setattr(guard, "ask_cluster", lambda node, *_a, **_k: guard.ClusterAnswer(
        guard.Membership.UNREACHABLE, "no cluster reachable (test)"))


@pytest.fixture
def example_copy(tmp_path: Path) -> Path:
    dest = tmp_path / "site"
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns(".provision"))
    return dest


def run_up(site: Path, **opts) -> tuple[up_mod.UpResult, list[up_mod.Progress]]:
    FakeDriver.calls = {}
    seen: list[up_mod.Progress] = []
    lock = threading.Lock()

    def progress(p: up_mod.Progress) -> None:
        with lock:
            seen.append(p)

    result = up_mod.up(load(site), {"PROVISION_BMC_PASSWORD": "x"},
                       up_mod.UpOptions(**{"os_timeout_s": 0.2, **opts}), progress=progress,
                       make_driver=FakeDriver)
    return result, seen


def test_inspection_mismatch_stops_that_node_and_the_others_boot(example_copy):
    FakeDriver.gpus = {"dgx01": 8, "dgx02": 4}
    result, seen = run_up(example_copy)
    by = {n.hostname: n for n in result.nodes}
    assert by["dgx02"].failed_phase is Phase.ENROLLED
    assert "the BMC reports 4 GPU(s); block dgx-h100 has 8" in (by["dgx02"].reason or "")
    assert "power on" not in FakeDriver.calls["dgx02"]  # never powered on
    # the rest went through inspect and boot (PXE once, power on); no SSH answers at the
    # documentation addresses, so they fail at wait_os with the timeout as the reason
    assert FakeDriver.calls["dgx01"] == ["facts", "boot pxe once", "power on"]
    for host in ("dgx01", "cp01", "cp03", "stor01"):
        assert by[host].failed_phase is Phase.BOOTING, by[host]
        assert "no SSH answer from" in (by[host].reason or "")
    assert not result.lab and result.failed and not result.interrupted
    assert ("dgx02", "inspect", "failed") in {(p.node, p.step, p.status) for p in seen}

    # next run: failed nodes retried from the phase they failed in; dgx02 inspected again
    FakeDriver.gpus = {"dgx02": 8}
    result, _ = run_up(example_copy)
    assert FakeDriver.calls["dgx02"][:3] == ["facts", "boot pxe once", "power on"]
    assert "dgx01" not in FakeDriver.calls  # dgx01 was booting: only SSH is awaited again
    store = StateStore(result.state_path)
    retries = [e for e in store.events("dgx01") if e.detail.get("retry")]
    assert [e.to_phase for e in retries] == ["booting"]
    assert store.check_consistency() == []


def test_from_phase_never_moves_a_node_forward(example_copy):
    """--from-phase os_ready re-runs later steps; a node that failed earlier (cp01, at
    enrolled) is not skipped ahead: it is inspected and booted first."""
    store = StateStore(up_mod.state_path(load(example_copy)))
    store.enroll(["cp01"])
    store.transition("cp01", Phase.FAILED, reason="earlier failure")
    FakeDriver.gpus = {}
    result, _ = run_up(example_copy, limit="cp01", from_phase=Phase.OS_READY)
    assert FakeDriver.calls["cp01"] == ["facts", "boot pxe once", "power on"]
    assert result.nodes[0].failed_phase is Phase.BOOTING  # no SSH here: stops at wait_os


def test_virtual_media_boot_mounts_the_iso_then_boots_from_cd(example_copy):
    site = example_copy / "site.yaml"
    text = site.read_text()
    old = "provisioning:\n  iso_url: http://10.250.0.1/ubuntu/22.04/ubuntu-22.04.5-live-server-amd64.iso\n"
    assert old in text  # the example's (the PXE default); replaced, not defined twice
    site.write_text(text.replace(old, "provisioning:\n  boot: virtual_media\n"
                    "  iso_url: http://mirror.example/ubuntu-22.04-live-server-amd64.iso\n"))
    FakeDriver.gpus = {}
    run_up(example_copy, limit="cp01")
    assert FakeDriver.calls == {"cp01": [
        "facts", "media http://mirror.example/ubuntu-22.04-live-server-amd64.iso",
        "boot cd once", "power on"]}


def test_virtual_media_without_an_iso_is_an_inventory_error(write_site):
    text = (FIXTURES / "valid_small.yaml").read_text()
    path = write_site(text.replace("hostname: gpu01",
                                   "hostname: gpu01\n        boot: virtual_media", 1))
    loaded = load(path)
    codes = {f.code for f in up_mod.checks.check(loaded)}
    assert "no-iso-url" in codes
    with pytest.raises(InventoryError):
        up_mod.up(loaded, {}, make_driver=FakeDriver)


def test_a_rack_over_its_power_budget_is_never_powered_on(tmp_path):
    site = tmp_path / "site.yaml"
    shutil.copy(FIXTURES / "invalid" / "over_power_budget.yaml", site)
    FakeDriver.calls = {}
    result = up_mod.up(load(site), {"BMC_PW": "x"}, up_mod.UpOptions(os_timeout_s=0.2),
                       make_driver=FakeDriver)
    assert FakeDriver.calls == {}  # no BMC was touched
    assert all(n.failed_phase is Phase.ENROLLED and "over budget" in (n.reason or "")
               for n in result.nodes)
    plan = report.plan(load(site))
    assert {n.action for n in plan.nodes} == {"blocked"}
    assert plan.racks[0].ok is False and "feed" in (plan.racks[0].reason or "").lower()


def test_plan_and_status_from_the_state_store(example_copy):
    loaded = load(example_copy)
    plan = report.plan(loaded)
    assert plan.summary["add"] == 6 and plan.nodes[0].steps == list(up_mod.STEPS)
    store = StateStore(up_mod.state_path(loaded))
    store.enroll(["dgx01", "dgx02", "cp01", "gone01"])
    for p in (Phase.INSPECTED, Phase.BOOTING, Phase.OS_READY, Phase.CONFIGURED,
              Phase.VERIFIED, Phase.READY):
        store.transition("dgx01", p)
    store.transition("dgx02", Phase.INSPECTED)
    store.transition("dgx02", Phase.BOOTING)
    store.transition("cp01", Phase.FAILED, reason="cp01: BMC refused the credentials")
    plan = report.plan(loaded)
    actions = {n.hostname: (n.action, n.steps) for n in plan.nodes}
    assert actions["dgx01"] == ("unchanged", [])
    assert actions["dgx02"] == ("resume", ["wait_os", "configure", "verify", "ready"])
    assert actions["cp01"] == ("retry", list(up_mod.STEPS))
    assert actions["cp02"] == ("add", list(up_mod.STEPS))
    assert actions["gone01"] == ("unknown", [])
    assert plan.summary == {"add": 3, "resume": 1, "retry": 1, "unchanged": 1, "blocked": 0,
                            "maintenance": 0, "unknown": 1}

    status = report.status(loaded)
    phases = {n.hostname: n.phase for n in status.nodes}
    assert phases == {"dgx01": "ready", "dgx02": "booting", "cp01": "failed",
                      "gone01": "enrolled"}
    assert next(n for n in status.nodes if n.hostname == "gone01").in_inventory is False
    # powered: two DGX H100 (booting, ready) and the two switches, nothing else
    dgx = loaded.catalog["dgx-h100"].max_power_w
    switches = loaded.catalog["sn5600"].max_power_w + loaded.catalog["mgmt-switch-1g"].max_power_w
    assert status.racks[0].powered_w == pytest.approx(2 * dgx + switches, abs=0.1)
    doc = report.dump(status)
    assert doc["schema"] == "provisioner.status/v1"
    assert report.StatusReport.model_validate(doc) == status
    assert report.dump(plan)["schema"] == "provisioner.plan/v1"
    assert status.backup is None  # no run yet
    store.start_run("up")
    backup = report.status(loaded).backup
    assert backup is not None and backup.kept == 1
    assert Path(backup.path).parent == Path(str(store.path) + ".backups")
    assert StateStore(Path(backup.path)).node("dgx01").phase is Phase.READY
    from typer.testing import CliRunner

    from provisioner.cli import app
    cli = CliRunner()
    doc = json.loads(cli.invoke(app, ["status", str(example_copy), "--json"]).stdout)
    assert doc["backup"]["path"] == backup.path
    text = cli.invoke(app, ["status", str(example_copy)], terminal_width=400).stdout
    assert "state backup" in text and Path(backup.path).name in text


def test_the_documented_schemas_are_the_code_s():
    """up.md points at the schema files (docs/schemas/), which are the code's."""
    text = (ROOT / "docs" / "up.md").read_text()
    files = re.findall(r"\(schemas/(provisioner\.\w+\.v1\.json)\)", text)
    documented = {json.loads((ROOT / "docs" / "schemas" / f).read_text())["properties"]
                  ["schema"]["const"]: json.loads((ROOT / "docs" / "schemas" / f).read_text())
                  for f in files}
    assert documented == report.json_schemas()


def test_plan_json_rejects_unknown_fields():
    plan = report.dump(report.plan(load(EXAMPLE)))
    plan["surprise"] = 1
    with pytest.raises(ValueError, match="surprise"):
        report.PlanReport.model_validate(plan)


def _feed(show) -> None:
    show(up_mod.Progress("dgx01", "boot", "start"))
    show(up_mod.Progress("dgx01", "configure", "task", "ok: Write the RoCE QoS settings"))
    show(up_mod.Progress("dgx02", "configure", "task", "failed: Install the driver - boom"))
    show(up_mod.Progress("dgx02", "configure", "failed", "failed at 'Install the driver'"))


def test_up_progress_plain_lines_skip_routine_tasks(capsys):
    from provisioner.console import Console

    con = Console()
    with con.up_progress(["dgx01", "dgx02"], live=False) as show:
        _feed(show)
    err = capsys.readouterr().err.splitlines()
    assert err == ["dgx01: boot start",
                   "dgx02: configure task: failed: Install the driver - boom",
                   "dgx02: configure failed: failed at 'Install the driver'"]


def test_up_progress_json_events_are_one_object_per_line(capsys):
    from provisioner.console import Console

    with Console(json_mode=True).up_progress(["dgx01"], json_events=True) as show:
        _feed(show)
    lines = capsys.readouterr().out.splitlines()
    events = [json.loads(line) for line in lines]
    assert [e["status"] for e in events] == ["start", "task", "task", "failed"]
    assert all(e["schema"] == "provisioner.up-event/v1" and e["at"] > 0 for e in events)


def test_up_progress_live_table_shows_each_node_state():
    import io

    from rich.console import Console as RichConsole

    from provisioner.console import Console

    con = Console()
    buf = io.StringIO()
    con.err = RichConsole(file=buf, force_terminal=True, width=160, no_color=True)
    with con.up_progress(["dgx01", "dgx02"], live=True) as show:
        _feed(show)
    text = buf.getvalue()
    assert "provision up" in text and "Write the RoCE QoS settings" in text
    assert "failed at 'Install the driver'" in text


def answer_as_installed(monkeypatch, installed: set[str]) -> list[str]:
    """The installed check answers INSTALLED for these nodes' addresses, SILENT for the rest;
    returns the addresses asked, in order."""
    by_address = {ansible_host(s.node): s.hostname for s in up_mod.servers(load(EXAMPLE))}
    asked: list[str] = []

    def check(address: str, login: guard.Login, timeout_s: float = 5.0) -> guard.Answer:
        asked.append(address)
        if by_address.get(address) in installed:
            return guard.Answer(guard.State.INSTALLED,
                                f"installed (marker {guard.MARKER}: x) and answering on "
                                f"{address}:{login.port}")
        return guard.Answer(guard.State.SILENT, f"no SSH answer from {address}:22")

    monkeypatch.setattr(guard, "check_installed", check)
    return asked


def test_an_installed_node_is_never_powered_off_or_rebooted(example_copy, monkeypatch):
    """The state store is lost but dgx01 is on and answers as installed: up refuses it (no
    boot override, no power change) with the reason; the others boot. A node that is off is
    not running and cannot answer: it is not asked."""
    FakeDriver.gpus = {"dgx01": 8, "dgx02": 8}
    FakeDriver.on = {"dgx01"}
    asked = answer_as_installed(monkeypatch, {"dgx01"})
    result, _ = run_up(example_copy)
    by = {n.hostname: n for n in result.nodes}
    assert FakeDriver.calls["dgx01"] == ["facts"]  # inspected only: no boot, no power
    assert by["dgx01"].failed_phase is Phase.INSPECTED
    assert by["dgx01"].reason is not None
    assert "installed (marker /etc/provisioner-installed" in by["dgx01"].reason
    assert by["dgx01"].reason.endswith("refusing to reinstall: name it with --reinstall dgx01")
    assert FakeDriver.calls["dgx02"] == ["facts", "boot pxe once", "power on"]
    assert asked.count(ansible_host(server("dgx01").node)) == 1  # once, at boot
    boot = next(e for e in StateStore(result.state_path).events("dgx02")
                if e.to_phase == "booting")
    assert boot.detail["installed_check"] == "skipped: power off"

    # a retry without --reinstall refuses again; naming another node changes nothing
    result, _ = run_up(example_copy, reinstall="dgx02")
    assert FakeDriver.calls["dgx01"] == []
    assert {n.hostname: n for n in result.nodes}["dgx01"].failed_phase is Phase.INSPECTED


def test_reinstall_names_the_installed_node_and_it_boots(example_copy, monkeypatch):
    FakeDriver.gpus = {"dgx01": 8, "dgx02": 8}
    FakeDriver.on = {"dgx01", "dgx02"}
    asked = answer_as_installed(monkeypatch, {"dgx01", "dgx02"})
    installed_check = guard.check_installed

    def reinstalled(address: str, login: guard.Login, timeout_s: float = 5.0) -> guard.Answer:
        """Installed when the boot step asks; after it, the installer runs (no marker yet):
        wait_os times out instead of running the playbooks against hosts that do not exist."""
        if address in asked:
            return guard.Answer(guard.State.NOT_INSTALLED, f"no marker on {address}")
        return installed_check(address, login, timeout_s)

    monkeypatch.setattr(guard, "check_installed", reinstalled)
    result, _ = run_up(example_copy, reinstall="dgx0*,!dgx02")
    assert FakeDriver.calls["dgx01"] == ["facts", "power off", "boot pxe once", "power on"]
    assert FakeDriver.calls["dgx02"] == ["facts"]
    store = StateStore(result.state_path)
    boot = next(e for e in store.events("dgx01") if e.to_phase == "booting")
    assert boot.detail["installed_check"] == "installed" and boot.detail["reinstall"] is True
    assert "up --reinstall dgx0*,!dgx02" in store.runs(1)[0]["command"]
    with pytest.raises(ConfigError, match="--reinstall 'nope' matches none"):
        run_up(example_copy, reinstall="nope")


def test_wait_os_waits_for_the_marker_not_for_a_banner(example_copy, monkeypatch):
    """An sshd that answers but is not the installed OS (the live installer) is not os_ready;
    the installed OS answering with the marker is."""
    FakeDriver.gpus = {"dgx01": 8, "dgx02": 8}
    installed: set[str] = set()
    by_address = {ansible_host(s.node): s.hostname for s in up_mod.servers(load(EXAMPLE))}

    def check(address: str, login: guard.Login, timeout_s: float = 5.0) -> guard.Answer:
        if by_address[address] in installed:
            return guard.Answer(guard.State.INSTALLED, "installed")
        return guard.Answer(guard.State.NOT_INSTALLED, f"logged in on {address}:22; no "
                            f"install marker {guard.MARKER}")

    monkeypatch.setattr(guard, "check_installed", check)
    result, _ = run_up(example_copy, limit="dgx01")
    dgx01 = result.nodes[0]
    assert dgx01.failed_phase is Phase.BOOTING
    assert dgx01.reason is not None
    assert dgx01.reason.startswith("no installed OS answered on ")
    assert dgx01.reason.endswith("no install marker /etc/provisioner-installed")

    installed.add("dgx01")  # the install finished: the retry reaches os_ready (and stops
    # after it, at the fabric step (no switch here) or the playbooks: not the point here)
    retry, _ = run_up(example_copy, limit="dgx01", playbook="missing.yml")
    assert retry.nodes[0].failed_phase is Phase.OS_READY, retry.nodes[0]
    store = StateStore(result.state_path)
    phases = [e.to_phase for e in store.events("dgx01") if e.kind == "transition"]
    last_boot = len(phases) - 1 - phases[::-1].index("booting")
    assert phases[last_boot:last_boot + 2] == ["booting", "os_ready"]


def test_a_kubernetes_member_is_installed_whatever_ssh_says():
    """The decision alone, from injected answers (the lab has no API server)."""
    silent = guard.Answer(guard.State.SILENT, "no SSH answer from 10.0.0.5:22")
    bare = guard.Answer(guard.State.NOT_INSTALLED, "logged in on 10.0.0.5:22; no marker")
    for membership in (guard.Membership.READY, guard.Membership.NOT_READY):
        verdict = guard.decide(silent, guard.ClusterAnswer(membership, "node dgx01, Ready=x"))
        assert verdict.installed and "a Kubernetes node: node dgx01" in verdict.detail
    unreachable = guard.ClusterAnswer(guard.Membership.UNREACHABLE, "no cluster reachable (x)")
    verdict = guard.decide(bare, unreachable)
    assert verdict.state is guard.State.NOT_INSTALLED
    assert verdict.detail.endswith("no cluster reachable (x), relying on the SSH install marker")
    absent = guard.decide(silent, guard.ClusterAnswer(guard.Membership.ABSENT, "no node"))
    assert absent.state is guard.State.SILENT and absent.detail.endswith("not a member")
    assert guard.decide(bare, None) == bare
    login = guard.Login(user="ubuntu", port=22, key_file=None, accept_any_host_key=False)
    assert guard.ready_command("dgx01", login) == (
        "sudo -n kubectl --kubeconfig /etc/kubernetes/admin.conf get node dgx01 -o "
        "jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}'")


def test_up_refuses_a_ready_kubernetes_node_without_its_marker(example_copy, monkeypatch):
    """dgx01 is on, its SSH login finds no marker (a node installed some other way), but the
    cluster has it Ready: refused, nothing changed; dgx02, not a member, boots. The control
    planes are asked, the node itself never first."""
    FakeDriver.gpus = {"dgx01": 8, "dgx02": 8}
    FakeDriver.on = {"dgx01", "dgx02"}
    monkeypatch.setattr(guard, "check_installed", lambda address, *_a, **_k: guard.Answer(
        guard.State.NOT_INSTALLED, f"logged in on {address}:22; no install marker"))
    asked: list[tuple[str, list[str]]] = []

    def cluster(node: str, planes, login, timeout_s: float = 5.0) -> guard.ClusterAnswer:
        asked.append((node, [name for name, _ in planes]))
        if node == "dgx01":
            return guard.ClusterAnswer(guard.Membership.READY, "the cluster (asked on cp01) "
                                       "has node dgx01, Ready=True")
        return guard.ClusterAnswer(guard.Membership.ABSENT, f"no node {node}")

    monkeypatch.setattr(guard, "ask_cluster", cluster)
    result, _ = run_up(example_copy, limit="dgx0*")
    by = {n.hostname: n for n in result.nodes}
    assert FakeDriver.calls["dgx01"] == ["facts"]
    assert by["dgx01"].failed_phase is Phase.INSPECTED and by["dgx01"].reason is not None
    assert "a Kubernetes node: the cluster (asked on cp01) has node dgx01, Ready=True" in (
        by["dgx01"].reason)
    assert FakeDriver.calls["dgx02"] == ["facts", "power off", "boot pxe once", "power on"]
    boot = next(e for e in StateStore(result.state_path).events("dgx02")
                if e.to_phase == "booting")
    assert boot.detail["cluster"] == "absent"
    planes = [s.hostname for s in up_mod.servers(load(EXAMPLE)) if s.control_plane]
    assert planes and all(sorted(names) == sorted(planes) for _, names in asked)


def test_a_switchs_fabric_line_is_not_printed_again_as_a_note(capsys, tmp_path):
    """The lab `up` log (plain progress) printed the fabric step's outcome as its step line
    and then again, word for word, as a summary note. The plain line said it in full: the
    note is not repeated (it stays in the result's notes, for --json); a live table, which
    cuts a long detail, still gets the note, and other notes are printed as before."""
    from provisioner.console import Console
    from provisioner.lifecycle import Phase
    from provisioner.workflows.engine import NodeOutcome

    detail = ("pushed 4 line(s), read back and saved (lab: stand-in for a cumulus switch, "
              "driven as cisco_ios; its cumulus config was checked, not pushed)")
    other = "lab: OS install skipped (the lab provides the OS)"

    def result() -> up_mod.UpResult:
        return up_mod.UpResult(
            run_id=1, site="s", lab=True, state_path=tmp_path / "state.db", project_dir=None,
            nodes=[NodeOutcome("dgx01", Phase.ENROLLED, Phase.READY, steps=["ready"])],
            notes=[f"fabric: leaf01 {detail}", other], interrupted=False, elapsed_s=1.0,
            ansible_s=0.0)

    con = Console()
    with con.up_progress(["dgx01"], live=False) as show:
        show(up_mod.Progress("leaf01", "fabric", "start", "check passed; diff and push"))
        show(up_mod.Progress("leaf01", "fabric", "ok", detail))
    con.up_result(result())
    both = capsys.readouterr()
    assert f"leaf01: fabric ok: {detail}" in both.err.splitlines()
    out = " ".join(both.out.split())
    assert detail not in out and f"note: {other}" in out
    assert [ln for ln in (both.err + both.out).splitlines() if "driven as cisco_ios" in ln] \
        == [f"leaf01: fabric ok: {detail}"]
    live = Console()
    with live.up_progress(["dgx01"], live=True) as show:
        show(up_mod.Progress("leaf01", "fabric", "ok", detail))
    live.up_result(result())
    assert f"note: fabric: leaf01 {detail}" in " ".join(capsys.readouterr().out.split())


def test_status_says_why_an_interrupted_upgrade_left_a_node_cordoned(example_copy):
    loaded = load(example_copy)
    store = StateStore(up_mod.state_path(loaded))
    store.enroll(["dgx01", "dgx02", "cp01"])
    for host in ("dgx01", "dgx02", "cp01"):
        for p in (Phase.INSPECTED, Phase.BOOTING, Phase.OS_READY, Phase.CONFIGURED,
                  Phase.VERIFIED, Phase.READY):
            store.transition(host, p)
    run = store.start_run("upgrade apply --to 2026.11", backup=False)
    store.transition("dgx01", Phase.CORDONED, run_id=run)
    store.transition("dgx01", Phase.DRAINING, run_id=run)
    store.record("dgx01", "interrupted", {"step": "drain", "detail": "stop requested"},
                 run_id=run)
    store.transition("dgx02", Phase.CORDONED, run_id=run)
    store.end_run(run, "interrupted")
    got = {n.hostname: n.reason for n in report.status(loaded).nodes}
    assert got["dgx01"] == ("cordoned by run 1 `provision upgrade apply --to 2026.11` "
                            "(stopped at its drain step); `provision upgrade apply --to "
                            "2026.11` resumes it")
    assert got["dgx02"] is not None and "(interrupted)" in got["dgx02"]
    assert got["cp01"] is None  # ready: nothing to explain
    up_run = store.start_run("up", backup=False)
    store.transition("cp01", Phase.FAILED, run_id=up_run, reason="cp01: BMC refused")
    assert {n.hostname: n.reason for n in report.status(loaded).nodes}["cp01"] == \
        "cp01: BMC refused"  # a failure's own reason is kept
