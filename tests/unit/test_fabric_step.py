"""The fabric step of `up` (workflows/steps/fabric.py) on its own: which nodes it holds back,
and what it records. The push itself runs against a real SSH peer in the lab
(tests/integration/test_up.py) and in tests/integration/test_switches*.py."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

from provisioner.inventory import load
from provisioner.inventory.topology import servers
from provisioner.lifecycle import Phase
from provisioner.profile import for_site
from provisioner.state import StateStore
from provisioner.workflows import engine
from provisioner.workflows.steps import Context
from provisioner.workflows.steps import fabric as fabric_step
from tests.conftest import EXAMPLE, ios_leaf_example

PATH = (Phase.INSPECTED, Phase.BOOTING, Phase.OS_READY)


def _ctx(site: Path, env: dict[str, str], at: dict[str, Phase]) -> tuple[Context, list[str]]:
    loaded = load(site)
    prof = for_site(loaded)
    store = StateStore(prof.state_path)
    plans = {s.hostname: s for s in servers(loaded)}
    hosts = list(plans)
    run_id = store.start_run("test")
    store.enroll(hosts, run_id=run_id)
    for host, phase in at.items():
        for step in PATH[:PATH.index(phase) + 1]:
            store.transition(host, step, run_id=run_id)
    seen: list[engine.Progress] = []
    journal = engine.Journal(store, run_id, seen.append)
    journal.load(hosts)
    return Context(loaded, env, journal, threading.Event(), plans, prof), hosts


def _copy(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns(".provision"))
    return site


def test_a_switch_that_cannot_be_configured_holds_back_only_its_nodes(tmp_path: Path) -> None:
    # No switch password in the environment: leaf01 fails before any connection is made.
    ctx, hosts = _ctx(_copy(tmp_path), {}, {"dgx01": Phase.OS_READY, "dgx02": Phase.OS_READY,
                                             "cp01": Phase.OS_READY})
    done = fabric_step.run(ctx, hosts)
    assert [(o.switch, o.status) for o in done] == [("leaf01", "failed")]
    assert "PROVISION_SWITCH_PASSWORD" in (done[0].error or "")
    out = ctx.journal.outcomes
    for host in ("dgx01", "dgx02"):
        assert out[host].phase is Phase.FAILED and out[host].failed_phase is Phase.OS_READY
        assert "switch leaf01 not configured" in (out[host].reason or "")
    assert out["cp01"].phase is Phase.OS_READY  # not on a RoCE leaf: goes on
    events = [e for e in ctx.journal.store.events("leaf01") if e.kind == "fabric_push"]
    assert [e.detail["status"] for e in events] == ["failed"]


def test_hosts_and_switch_disagreeing_push_nothing_and_name_both_ends(tmp_path: Path) -> None:
    site = ios_leaf_example(tmp_path)
    ctx, hosts = _ctx(site, {"PROVISION_SWITCH_PASSWORD": "pw"},
                      {"dgx01": Phase.OS_READY, "dgx02": Phase.BOOTING})
    assert fabric_step.run(ctx, hosts) == []  # nothing pushed
    out = ctx.journal.outcomes
    assert out["dgx01"].phase is Phase.FAILED
    assert "dgx01 roce <-> leaf01 Ethernet0/1: pfc: host 3, switch none" in (
        out["dgx01"].reason or "")
    assert out["dgx02"].phase is Phase.BOOTING  # not about to be configured: untouched
    kinds = [e.kind for e in ctx.journal.store.events("leaf01")]
    assert kinds == ["fabric_check"]


def test_no_node_about_to_be_configured_means_no_fabric_step(tmp_path: Path) -> None:
    ctx, hosts = _ctx(_copy(tmp_path), {}, {"dgx01": Phase.BOOTING})
    assert fabric_step.run(ctx, hosts) == []
    assert ctx.journal.store.events("leaf01") == []


def test_a_lab_stand_in_gets_its_own_dialect_for_the_same_ports(tmp_path: Path) -> None:
    from provisioner.switches import ops

    t = ops.targets(load(_copy(tmp_path)), stand_ins={"leaf01": "cisco_ios"})["leaf01"]
    assert (t.nos, t.stands_in_for) == ("cisco_ios", "cumulus")
    assert "interface swp1s0\n description dgx01 roce" in t.text
    assert ops.targets(load(_copy(tmp_path / "b")))["leaf01"].nos == "cumulus"


def test_a_policy_the_switch_os_cannot_render_fails_its_nodes_not_up(tmp_path: Path) -> None:
    site = _copy(tmp_path)
    f = site / "site.yaml"
    f.write_text(f.read_text().replace("priority: 3, cnp_dscp", "priority: 4, cnp_dscp"))
    ctx, hosts = _ctx(site, {}, {"dgx01": Phase.OS_READY, "cp01": Phase.OS_READY})
    assert fabric_step.run(ctx, hosts) == []
    out = ctx.journal.outcomes
    assert out["dgx01"].phase is Phase.FAILED
    assert "default RoCE classes" in (out["dgx01"].reason or "")
    assert out["cp01"].phase is Phase.OS_READY


def test_adding_a_node_pushes_its_ports_alone_not_the_drift_of_others() -> None:
    """`add`'s fabric step (ports_only) renders the new node's ports with the switch-wide
    QoS and nothing else: on a switch where another port drifted, the lines sent are the
    new port's only (the drift is `fabric push`'s to repair, not an addition's)."""
    from provisioner.switches import cli_diff, ops

    loaded = load(EXAMPLE)
    full, mine = ops.targets(loaded)["leaf01"], ops.targets(loaded, {"dgx02"})["leaf01"]
    assert "swp1s0" in full.text and "swp2s0" in mine.text and "swp1s0" not in mine.text
    # NVUE's switch-wide RoCE QoS comes with the port (`nv config patch` merges it)
    assert "roce" in mine.text and "swp2s0" in full.text
    assert "leaf01" not in ops.targets(loaded, {"cp01"})  # no RoCE port: no switch touched
    stand_in = {"leaf01": "cisco_ios"}
    drifted = ops.targets(loaded, stand_ins=stand_in)["leaf01"].text.replace(
        " description dgx01 roce\n", "")
    running = drifted.replace(" description dgx02 roce\n", "")  # dgx02 is being added
    sent = cli_diff.plan(ops.targets(loaded, {"dgx02"}, stand_in)["leaf01"].text, running)
    assert sent == ["interface swp2s0", "description dgx02 roce"]
    assert "description dgx01 roce" in cli_diff.plan(
        ops.targets(loaded, stand_ins=stand_in)["leaf01"].text, running)  # a push repairs it
