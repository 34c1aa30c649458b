"""`provision up` end to end on the example site in the local lab: real BMC emulators
(sushy-tools, ipmi_sim), real SSH test hosts, the real rendered playbooks, and what the
roles did on the hosts (tests/integration/site_run_flow.py); then site.yml again, which
changes nothing, and a failing task on one host; then faults injected into the same lab,
each on one node while the others go on; then a node added to the site that is up
(tests/integration/add_flow.py), and last the search for secrets in everything the runs
left. One lab and one converge of the roles for all of them, in this order (CI time): a
test that changes a host puts it back."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from provisioner import lab as lab_mod
from provisioner.lab.overlay import load  # the site with the running lab's endpoints
from provisioner.state import StateStore
from provisioner.workflows import report
from provisioner.workflows.up import LAB_OS_NOTE, state_path
from tests.conftest import EXAMPLE, ROOT, requires_ssh_hosts
from tests.integration import add_flow, site_run_flow
from tests.integration.conftest import forget_state, provision, requires_ipmi_sim, ssh_lab

pytestmark = [pytest.mark.integration, requires_ipmi_sim,
              requires_ssh_hosts]
SERVERS = {"dgx01", "dgx02", "stor01", "cp01", "cp02", "cp03"}
# The trivial playbook for both steps where a test is about the workflow, not the roles.
TRIVIAL = ("--playbook", "ping.yml", "--verify-playbook", "ping.yml")
# After reset_state the lab's nodes are on and answer as installed: a run that is to boot
# them again names them (without it, `up` refuses them: the end-to-end test shows it).
REINSTALL = ("--reinstall", "*")
LIFECYCLE = ["inspected", "booting", "os_ready", "configured", "verified", "ready"]


# Every `up` of this module runs with a switch password in its environment (the example
# site reads it from PROVISION_SWITCH_PASSWORD): test_no_secret_anywhere_after_the_runs
# looks for it, and for the lab's BMC password, in everything the runs left.
SWITCH_PASSWORD = "sw-" + os.urandom(8).hex()


@pytest.fixture(scope="module")
def site_lab(tmp_path_factory):
    before = os.environ.get("PROVISION_SWITCH_PASSWORD")
    os.environ["PROVISION_SWITCH_PASSWORD"] = SWITCH_PASSWORD
    try:
        with ssh_lab(tmp_path_factory, EXAMPLE, "up") as lab:
            yield lab
    finally:
        if before is None:
            os.environ.pop("PROVISION_SWITCH_PASSWORD", None)
        else:
            os.environ["PROVISION_SWITCH_PASSWORD"] = before


def store_of(site: Path) -> StateStore:
    return StateStore(state_path(load(site)))


def reset_state(site: Path) -> None:
    """Forget every node (a fresh site), keeping the lab running."""
    forget_state(site)


def transitions(store: StateStore, run_id: int | None = None) -> list[tuple[str, str]]:
    return [(e.hostname or "", e.to_phase or "") for e in store.events()
            if e.kind == "transition" and (run_id is None or e.run_id == run_id)]


def up_json(site: Path, *extra: str, timeout: float = 600) -> tuple[int, dict, str]:
    proc = provision("up", str(site), "--json", *extra, timeout=timeout)
    doc = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    return proc.returncode, doc, proc.stderr


def test_end_to_end_every_node_ready_then_nothing_to_do(site_lab):
    site, lab_state = site_lab
    plan0 = provision("plan", str(site), "--json", check=True)
    plan_doc = report.PlanReport.model_validate(json.loads(plan0.stdout))
    assert {n.hostname for n in plan_doc.nodes if n.action == "add"} == SERVERS

    site_run_flow.before_the_first_converge(lab_state)
    proc = provision("up", str(site), "--no-progress", timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    site_run_flow.check_the_first_converge(site, lab_state)
    assert "6 of 6 ready, 0 failed" in proc.stdout
    assert "OS install skipped" in proc.stderr
    # what the lab skipped is counted by tag and said (kubeadm join among needs_cluster)
    skipped = re.search(r"(\d+) task\(s\) a lab host cannot do were skipped by tag "
                        r"\(needs_gpu: (\d+), needs_cluster: (\d+)", proc.stdout)
    assert skipped and int(skipped[1]) > int(skipped[2]) > 0 and int(skipped[3]) > 0
    assert "they need a GPU, a Kubernetes API server" in proc.stdout
    assert "rendered project:" in proc.stdout and "playbook logs:" in proc.stdout

    store = store_of(site)
    assert {n.hostname: n.phase.value for n in store.nodes()} == dict.fromkeys(SERVERS,
                                                                              "ready")
    assert store.check_consistency() == []
    for host in SERVERS:  # every phase once, in order
        assert [p for h, p in transitions(store) if h == host] == LIFECYCLE, host
        notes = [e.detail["note"] for e in store.events(host) if e.kind == "os_install_skipped"]
        assert notes == [LAB_OS_NOTE]
    # the fabric step ran before the host RoCE step: leaf01's ports were pushed to the lab's
    # switch stand-in (FRR vtysh over SSH, lab/switch.py), one event for the switch
    assert "leaf01: fabric ok: pushed" in proc.stdout + proc.stderr or \
        "fabric: leaf01 pushed" in proc.stdout
    pushes = [e.detail for e in store.events("leaf01") if e.kind == "fabric_push"]
    assert [d["status"] for d in pushes] == ["pushed"]
    assert any("dgx01 roce" in line for line in pushes[0]["applied"])
    # the verify step told apart what it checked and what the lab cannot show
    ready = {e.hostname: e.detail for e in store.events() if e.to_phase == "verified"}
    assert "Verify RoCE QoS as configured" in ready["dgx01"]["checks"]
    assert any("no GPU" in n for n in ready["dgx01"]["not_verified"])
    assert "not_verified" not in ready["stor01"]  # no GPU, no Kubernetes: all checked
    # the BMC steps ran for real: the emulators report the nodes on
    lab_state = lab_mod.status(load(site))
    assert lab_state is not None
    power = (Path(lab_state.endpoints["cp03"]["chassis_dir"]) / "power").read_text().strip()
    assert power == "1"

    before = len(store.events())
    code, doc, _ = up_json(site)
    assert code == 0 and doc["nothing_to_do"] is True
    assert transitions(store, doc["run_id"]) == []
    assert len(store.events()) == before + 2  # run_started, run_ended: nothing else
    again = provision("up", str(site))
    assert "nothing to do: all 6 nodes are ready" in again.stdout

    status = report.StatusReport.model_validate(
        json.loads(provision("status", str(site), "--json", check=True).stdout))
    assert status.phases == {"ready": 6}
    assert status.racks[0].powered_w > 0 and 0 < status.racks[0].utilization < 1
    assert status.runs[0].status == "ok"
    plan1 = report.PlanReport.model_validate(
        json.loads(provision("plan", str(site), "--json", "--refresh", check=True).stdout))
    assert plan1.summary["unchanged"] == 6
    assert all(n.bmc is not None and n.bmc.power == "on" and not n.bmc.problems
               for n in plan1.nodes)

    # --from-phase with --limit: only cp01 goes back to os_ready and runs on from there
    code, doc, err = up_json(site, "--limit", "cp01", "--from-phase", "os_ready", *TRIVIAL)
    assert code == 0, err[-2000:]
    assert [n["hostname"] for n in doc["nodes"]] == ["cp01"]
    assert transitions(store, doc["run_id"]) == [
        ("cp01", "os_ready"), ("cp01", "configured"), ("cp01", "verified"), ("cp01", "ready")]

    # the state store is lost: every node is on and answers as installed (the lab hosts carry
    # the marker), so `up` refuses each one before any boot override or power change
    lab_state = lab_mod.status(load(site))
    assert lab_state is not None
    history = {h: Path(lab_state.endpoints[h]["chassis_dir"]) / "history"
               for h in ("cp03", "stor01")}  # every set the IPMI BMCs were told, in order
    told = {h: f.read_text() for h, f in history.items()}
    reset_state(site)
    code, doc, err = up_json(site, *TRIVIAL)
    assert code == 9, err[-2000:]
    assert {n["hostname"] for n in doc["nodes"]} == SERVERS
    for n in doc["nodes"]:
        assert n["failed_phase"] == "inspected", n
        assert re.fullmatch(r"installed \(marker /etc/provisioner-installed: \S+\) and "
                            r"answering on [\d.]+:22; refusing to reinstall: name it with "
                            rf"--reinstall {n['hostname']}", n["reason"]), n["reason"]
    lost = store_of(site)  # enrolled afresh (an enrol event, not a transition), then refused
    assert {e.hostname for e in lost.events() if e.kind == "enrolled"} == SERVERS
    assert {p for _, p in transitions(lost)} == {"inspected", "failed"}
    assert {h: f.read_text() for h, f in history.items()} == told  # no boot, no power
    plan2 = report.PlanReport.model_validate(
        json.loads(provision("plan", str(site), "--json", "--refresh", check=True).stdout))
    assert all(n.bmc is not None and n.bmc.power == "on" for n in plan2.nodes)

    # stor01 as a factory-installed node arrives: its OS runs, without our marker. Adopted,
    # it is taken as installed: no boot override and no power change (it is on), the
    # release read over SSH, the marker written, the playbooks run, ready
    site_run_flow.on_host("stor01", "rm /etc/provisioner-installed", site_lab[1])
    code, doc, err = up_json(site, "--limit", "stor01", "--adopt", "stor01", *TRIVIAL)
    assert code == 0, err[-2000:]
    assert transitions(lost, doc["run_id"]) == [("stor01", p) for p in LIFECYCLE]
    boot = next(e.detail for e in lost.events("stor01") if e.run_id == doc["run_id"]
                and e.to_phase == "booting")
    assert boot["boot"] == "adopted: no boot override" and boot["was"] == "on"
    os_ready = next(e.detail for e in lost.events("stor01") if e.run_id == doc["run_id"]
                    and e.to_phase == "os_ready")
    assert os_ready["os_install"] == "adopted"
    assert re.match(r"adopted: runs debian \d+ \(release not compared\), marker "
                    r"'stor01 adopted'", os_ready["adopted"]), os_ready
    assert site_run_flow.on_host("stor01", "cat /etc/provisioner-installed",
                                 site_lab[1]) == "stor01 adopted\n"
    assert history["stor01"].read_text() == told["stor01"]  # nothing asked of its BMC


def test_site_yml_again_changes_nothing_and_a_failing_host_leaves_the_others_finished(
        site_lab):
    """The roles converged by the end-to-end run: site.yml run again changes nothing on any
    host, and one host broken by hand fails alone (site_run_flow, one run for both)."""
    site_run_flow.runs_again_changing_nothing_but_a_broken_host_fails_alone(site_lab)


def test_a_kernel_without_headers_in_the_archive_stops_with_the_reason(site_lab):
    site_run_flow.a_kernel_without_headers_in_the_archive_stops_with_the_reason(site_lab)


def _with_overlay(site: Path, edit) -> str:
    overlay = site / ".provision" / "lab" / "overlay.yaml"
    original = overlay.read_text()
    doc = yaml.safe_load(original)
    edit(doc)
    overlay.write_text(yaml.safe_dump(doc))
    return original


def test_fabric_check_live_in_the_lab_says_what_it_cannot_verify(site_lab):
    """`fabric check --live` logs into the lab hosts for real over SSH and reads each RoCE
    NIC there: a lab host has only its management NIC, so the RoCE NIC is said to be
    missing by name (not taken from the inventory), and the switch stand-in carries no
    RoCE QoS: every end is listed as not verifiable and no link is claimed to agree."""
    site, _ = site_lab
    proc = provision("fabric", "check", str(site), "--live", "--json")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0 and doc["live"] is True and doc["links_checked"] == 0
    why = {(u["end"], u["name"]): u["why"] for u in doc["not_verifiable"]}
    for host in ("dgx01", "dgx02"):
        assert why[("host", f"{host} roce")] == f"{host} has no interface roce " \
            "(/sys/class/net/roce)"
    assert "lab stand-in speaking cisco_ios for a cumulus switch" in why[("switch", "leaf01")]


def test_faults_fail_one_node_each_and_the_rest_reach_ready(site_lab, tmp_path):
    """One run, three faults on three nodes: a wrong BMC password (cp01), an SSH host that
    never answers (stor01), a playbook failure (dgx02: no Python). The other three reach
    ready; once the faults are fixed the next run finishes the three from the phase each
    failed in and redoes nothing else."""
    site, lab_state = site_lab
    reset_state(site)
    wrong = tmp_path / "wrong-password"
    wrong.write_text("not-the-password\n")
    wrong.chmod(0o600)

    def wrong_password(doc):
        doc["credentials"]["wrong"] = {"username": "admin", "password": {"file": str(wrong)}}
        doc["bmc"]["cp01"]["credentials"] = "wrong"

    overlay = site / ".provision" / "lab" / "overlay.yaml"
    original = _with_overlay(site, wrong_password)
    stor = next(h for h in lab_state.ssh_hosts if h.name == "stor01")
    dgx02 = next(h for h in lab_state.ssh_hosts if h.name == "dgx02")
    key = Path(dgx02.upper).parents[1] / "id_ed25519"
    ssh = ["ssh", "-n", "-i", str(key), "-o", "StrictHostKeyChecking=no", "-o",
           "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", f"root@{dgx02.address}"]
    subprocess.run(["ip", "link", "set", stor.veth, "down"], check=True)
    subprocess.run([*ssh, "mv /usr/bin/python3.11 /usr/bin/python3.11.off"], check=True,
                   timeout=60)
    password = (site / ".provision" / "lab" / "bmc-password").read_text().strip()
    try:
        code, doc, err = up_json(site, "--os-timeout", "4", *REINSTALL, *TRIVIAL)
    finally:
        overlay.write_text(original)
        subprocess.run(["ip", "link", "set", stor.veth, "up"], check=True)
        subprocess.run([*ssh, "mv /usr/bin/python3.11.off /usr/bin/python3.11"], check=True,
                       timeout=60)
    assert code == 9, err[-3000:]
    nodes = {n["hostname"]: n for n in doc["nodes"]}
    assert nodes["cp01"]["phase"] == "failed" and nodes["cp01"]["failed_phase"] == "enrolled"
    assert "cp01: BMC refused the credentials" in nodes["cp01"]["reason"]
    assert nodes["stor01"]["failed_phase"] == "booting"
    assert "no SSH answer from 10.250.0.31:22 after 4 s" in nodes["stor01"]["reason"]
    assert nodes["dgx02"]["failed_phase"] == "os_ready"
    assert "failed at 'Answer over SSH with Python'" in nodes["dgx02"]["reason"]
    for host in ("dgx01", "cp02", "cp03"):
        assert nodes[host]["phase"] == "ready", nodes[host]
    # secrets stay secret: neither password in anything the run printed or stored
    text = json.dumps(doc) + err + "".join(json.dumps(e.detail) for e in
                                           store_of(site).events())
    assert password not in text and "not-the-password" not in text
    status = report.StatusReport.model_validate(
        json.loads(provision("status", str(site), "--json", check=True).stdout))
    assert {n.hostname for n in status.nodes if n.phase == "failed"} == {"cp01", "stor01",
                                                                        "dgx02"}
    plan = report.PlanReport.model_validate(
        json.loads(provision("plan", str(site), "--json", check=True).stdout))
    assert plan.summary["retry"] == 3 and plan.summary["unchanged"] == 3
    assert next(n for n in plan.nodes if n.hostname == "dgx02").steps == [
        "configure", "verify", "ready"]

    store = store_of(site)
    done_before = set(transitions(store))
    code, doc, err = up_json(site, *REINSTALL, *TRIVIAL)
    assert code == 0, err[-3000:]
    assert {n["hostname"]: n["phase"] for n in doc["nodes"]} == dict.fromkeys(SERVERS, "ready")
    resumed = transitions(store, doc["run_id"])
    assert {h for h, _ in resumed} == {"cp01", "stor01", "dgx02"}
    # each failed node resumed at the phase it failed in (the retry), then went on
    assert [p for h, p in resumed if h == "dgx02"] == ["os_ready", "configured", "verified",
                                                       "ready"]
    assert [p for h, p in resumed if h == "stor01"] == ["booting", "os_ready", "configured",
                                                        "verified", "ready"]
    retries = {("cp01", "enrolled"), ("stor01", "booting"), ("dgx02", "os_ready")}
    assert [t for t in resumed if t in done_before and t not in retries] == []
    assert store.check_consistency() == []


def test_bmc_emulator_stopped_mid_run(site_lab):
    """cp03's ipmi_sim is stopped (SIGSTOP) right after cp03 was inspected: its boot step
    times out and cp03 fails with the reason; the rest reach ready; once the emulator runs
    again, the next run completes cp03 from where it failed."""
    site, lab_state = site_lab
    reset_state(site)
    sim = next(p for p in lab_state.processes if p.role == "ipmi:cp03")
    proc = subprocess.Popen([sys.executable, "-m", "provisioner", "up", str(site),
                             "--json-events", *REINSTALL, *TRIVIAL,
                             "--request-timeout", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    stopped = False
    lines = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            ev = json.loads(line) if line.startswith('{"schema": "provisioner.up-event') else {}
            if ev.get("node") == "cp03" and ev.get("step") == "inspect" and \
                    ev.get("status") == "ok" and not stopped:
                os.kill(sim.pid, signal.SIGSTOP)
                stopped = True
        proc.wait(timeout=600)
    finally:
        if stopped:
            os.kill(sim.pid, signal.SIGCONT)
    assert stopped, "".join(lines)[-2000:]
    assert proc.returncode == 9
    result = json.loads("".join(ln for ln in lines
                                if not ln.startswith('{"schema": "provisioner.up-event')))
    nodes = {n["hostname"]: n for n in result["nodes"]}
    assert nodes["cp03"]["phase"] == "failed" and nodes["cp03"]["failed_phase"] == "inspected"
    assert "cp03" in nodes["cp03"]["reason"]
    assert all(nodes[h]["phase"] == "ready" for h in SERVERS - {"cp03"})

    time.sleep(0.5)
    code, doc, err = up_json(site, *REINSTALL, *TRIVIAL)
    assert code == 0, err[-2000:]
    store = store_of(site)
    resumed = transitions(store, doc["run_id"])
    assert [p for h, p in resumed if h == "cp03"] == ["inspected", "booting", "os_ready",
                                                      "configured", "verified", "ready"]
    assert {h for h, _ in resumed} == {"cp03"}


def test_add_one_node_to_the_up_site(site_lab):
    """Plug-and-play on this lab once the site is up (tests/integration/add_flow.py): the
    other nodes see nothing but the join's one step on the first control plane."""
    site, lab_state = site_lab
    add_flow.discover_add_and_bring_up(site, lab_state)


# The only files that may hold the lab's BMC password: the lab's own (the 0600 password file
# the overlay points to, and ipmi_sim's user table, which the emulator needs in clear).
BMC_PASSWORD_HOLDERS = (re.compile(r"\.provision/lab/bmc-password$"),
                        re.compile(r"\.provision/lab/ipmi/[^/]+/lan\.conf$"))
# A kubeadm bootstrap token or certificate key as they appear on a join command line.
JOIN_SECRETS = re.compile(rb"--token [a-z0-9]{6}\.[a-z0-9]{16}|--certificate-key [0-9a-f]{64}")


def test_no_secret_anywhere_after_the_runs(site_lab):
    """After the end-to-end run and whatever else ran on this lab (the last test of the
    module: the add and its check-mode join included): the BMC and
    switch passwords and any join token or certificate key are in no artifact, event file,
    log, state store (its WAL and backups included), rendered file or file the playbooks
    wrote on the SSH test hosts (their overlay upper/ directories)."""
    site, _ = site_lab
    bmc_password = (site / ".provision/lab/bmc-password").read_text().strip()
    assert len(bmc_password) >= 16 and len(SWITCH_PASSWORD) > 16
    needles = (bmc_password.encode(), SWITCH_PASSWORD.encode())
    seen: dict[str, int] = {}
    hits, holders = [], []
    for top, dirs, files in os.walk(site):
        # merged/ (the mounted view) and work/ (overlayfs scratch) of the SSH test hosts:
        # what the playbooks wrote there is in upper/
        dirs[:] = [d for d in dirs if d not in ("merged", "work")]
        for name in files:
            path = Path(top) / name
            if path.is_symlink() or not path.is_file():
                continue
            rel = str(path.relative_to(site))
            data = path.read_bytes()
            kind = ("artifact" if "/artifacts/" in rel else "state" if ".db" in rel
                    else "log" if rel.endswith((".log", "stdout")) else "other")
            seen[kind] = seen.get(kind, 0) + 1
            if bmc_password.encode() in data and any(h.search(rel) for h in BMC_PASSWORD_HOLDERS):
                holders.append(rel)
                continue
            hits += [f"{rel}: secret {i}" for i, n in enumerate(needles) if n in data]
            hits += [f"{rel}: {m.group()[:12]}..." for m in JOIN_SECRETS.finditer(data)]
    assert hits == []
    # the search could have found them: the legitimate holders do hold the password, and
    # the walk went through artifacts, state stores (with backups) and logs
    assert ".provision/lab/bmc-password" in holders and len(holders) > 1, holders
    assert seen.get("artifact", 0) > 10 and seen.get("state", 0) >= 2 and seen.get("log"), seen
    assert any(".backups/" in str(p) for p in site.rglob("*.db")), "no state backup seen"
