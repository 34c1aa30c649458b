"""upgrade plan: refusals against the CUDA release notes (Table 3), the Fabric Manager user
guide and the Kubernetes version-skew policy, bundle errors with file:line, changes, batches
per failure domain, and the CLI's exit code 11."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner.errors import ConfigError, ExitCode, InventoryError
from provisioner.inventory import load
from provisioner.inventory.bundle_models import load_bundle
from provisioner.inventory.topology import servers
from provisioner.profile import for_site
from provisioner.upgrade.plan import Durations, PlanOptions, make_plan
from provisioner.upgrade.schedule import Scheduler
from provisioner.workflows.upgrade import apply as apply_mod
from tests.conftest import EXAMPLE, ROOT
from tests.unit.test_upgrade_apply import stor01_in_kubernetes

GOOD = """\
bundle: {name: "next"}
nvidia_driver: {branch: "570", version: "570.148.08", kernel_modules: auto}
fabric_manager: "570.148.08"
nscq: "570.148.08"
cuda: "12.8.1"
doca: "2.9.1"
kubernetes: "1.36.4"
"""


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """The example site, stor01 a Kubernetes worker too (test_upgrade_apply's
    stor01_in_kubernetes: the batches show three workers)."""
    dest = tmp_path / "site"
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns(".provision"))
    stor01_in_kubernetes(dest)
    return dest


def plan_of(site: Path, text: str, **kw: object):  # type: ignore[no-untyped-def]
    (site / "bundles" / "next.yaml").write_text(text)
    loaded = load(site)
    p, _ = apply_mod.plan(loaded, "next", PlanOptions(**kw), None,  # type: ignore[arg-type]
                          for_site(loaded))
    return p


def codes(site: Path, text: str) -> list[str]:
    return [r.code for r in plan_of(site, text).refusals]


def test_good_bundle_is_planned_control_planes_first(site: Path) -> None:
    p = plan_of(site, GOOD)
    assert p.ok, p.refusals
    assert p.batches[:3] == [["cp01"], ["cp02"], ["cp03"]]
    changed = {c.component: c for c in p.changes}
    assert changed["nvidia_driver"].hosts == ("dgx01", "dgx02")
    assert changed["kubernetes"].direction == "upgrade"
    assert {n.hostname for n in p.nodes if n.reboot} == {"dgx01", "dgx02"}
    assert p.rollback and "kubernetes" in p.rollback[0]
    # GOOD pins no DCGM while the site pins 4.5.1: unpinned, and said
    assert any(w.startswith("dcgm is pinned at 4.5.1 now and the bundle pins none")
               for w in p.warnings), p.warnings
    assert not any("pins none" in w for w in plan_of(
        site, GOOD + 'dcgm: "4.5.2"\n').warnings)


def test_cuda_needs_newer_driver(site: Path) -> None:
    old = GOOD.replace("570.148.08", "570.86.15").replace('cuda: "12.8.1"', 'cuda: "12.9"')
    assert "cuda-needs-newer-driver" in codes(site, old)


def test_fabric_manager_must_equal_driver(site: Path) -> None:
    bad = GOOD.replace('fabric_manager: "570.148.08"', 'fabric_manager: "570.124.06"')
    assert codes(site, bad) == ["fabric-manager-version"]
    assert "nscq-version" in codes(site, GOOD.replace('nscq: "570.148.08"',
                                                      'nscq: "570.124.06"'))
    assert "fabric-manager-missing" in codes(
        site, GOOD.replace('fabric_manager: "570.148.08"\n', ""))


def test_kubernetes_may_not_skip_a_minor(site: Path) -> None:
    assert codes(site, GOOD.replace("1.36.4", "1.37.1")) == ["kubernetes-skips-minor"]


def test_kubernetes_downgrade_is_refused_driver_downgrade_is_a_warning(site: Path) -> None:
    back = GOOD.replace("1.36.4", "1.34.9").replace("570.148.08", "570.124.06")
    p = plan_of(site, back.replace('"12.8.1"', '"12.8"'))
    assert [r.code for r in p.refusals] == ["kubernetes-downgrade"]
    drv = GOOD.replace("570.148.08", "570.86.15").replace('"12.8.1"', '"12.8"').replace(
        "1.36.4", "1.35.8")
    p = plan_of(site, drv)
    assert p.ok and any("nvidia_driver goes back" in w for w in p.warnings)


def test_kubelet_never_newer_than_apiserver(site: Path) -> None:
    (site / "bundles" / "next.yaml").write_text(GOOD)
    loaded = load(site)
    p, _ = apply_mod.plan(loaded, "next", PlanOptions(), "dgx*", for_site(loaded))
    assert "kubelet-newer-than-apiserver" in [r.code for r in p.refusals]


def test_workers_alone_cannot_take_a_kubernetes_patch_first(site: Path) -> None:
    """A patch (1.35.8 -> 1.35.9) for the workers alone is refused before anything is
    drained: their `kubeadm upgrade node` needs the cluster's configuration moved by a
    control plane first. With a control plane in the run, it goes first and is allowed."""
    text = (site / "bundles" / "2026.10.yaml").read_text().replace(
        'name: "2026.10"', 'name: "next"').replace('kubernetes: "1.35.8"',
                                                   'kubernetes: "1.35.9"')
    (site / "bundles" / "next.yaml").write_text(text)
    loaded = load(site)
    p, _ = apply_mod.plan(loaded, "next", PlanOptions(), "dgx*", for_site(loaded))
    assert [r.code for r in p.refusals] == ["workers-before-control-plane"]
    p, _ = apply_mod.plan(loaded, "next", PlanOptions(), "dgx*,cp01", for_site(loaded))
    assert p.ok, p.refusals
    # workers already at the patch (recorded so) move nothing of Kubernetes: not refused
    hosts = [h for h in servers(loaded) if h.hostname.startswith("dgx")]
    current = {h.hostname: {"kubernetes": "1.35.9" if h.hostname.startswith("dgx")
                            else "1.35.8"} for h in servers(loaded)}
    target = load_bundle(site, "next").bundle
    p = make_plan(loaded, hosts, target, current, PlanOptions(),
                  [h.hostname for h in servers(loaded) if h.control_plane])
    assert "workers-before-control-plane" not in [r.code for r in p.refusals]


def test_a_driver_move_on_dgx_os_is_said_before_any_drain(site: Path) -> None:
    """DGX OS ships its driver: a bundle moving it is said (each node must already run the
    bundle's driver, updated through DGX OS, or it fails its check after its drain), not
    refused, since that bundle is how fabric manager and nscq follow DGX OS's update; without
    the driver move nothing is said."""
    (site / "site.yaml").write_text((site / "site.yaml").read_text().replace(
        "os: ubuntu-22.04", "os: dgx-os-6"))
    moved = plan_of(site, GOOD)
    assert "dgx-os-driver" not in [r.code for r in moved.refusals]
    assert any("ships its own and the tool installs none" in w and "dgx01, dgx02" in w
               for w in moved.warnings), moved.warnings
    same = (site / "bundles" / "2026.10.yaml").read_text().replace(
        'name: "2026.10"', 'name: "next"').replace("4.5.1", "4.5.2")
    assert not any("ships its own" in w for w in plan_of(site, same).warnings)


def test_open_modules_on_volta(site: Path) -> None:
    placements = site / "placements.yaml"
    placements.write_text(placements.read_text().replace("block: dgx-h100", "block: dgx-1"))
    bad = GOOD.replace("kernel_modules: auto", "kernel_modules: open")
    assert "open-modules-unsupported" in codes(site, bad)
    assert "open-modules-unsupported" not in codes(site, GOOD)


def test_bundle_errors_name_file_line_and_key(site: Path) -> None:
    (site / "bundles" / "next.yaml").write_text(GOOD.replace("cuda:", "cudaa:"))
    with pytest.raises(InventoryError) as exc:
        load_bundle(site, "next")
    assert "next.yaml:5:1" in str(exc.value) and "cudaa" in str(exc.value)
    (site / "bundles" / "next.yaml").write_text(GOOD.replace('"1.36.4"', "1.36"))
    with pytest.raises(InventoryError, match=r"next.yaml:7:\d+.*kubernetes"):
        load_bundle(site, "next")
    with pytest.raises(ConfigError, match=r"2026\.10, 2026\.11"):
        load_bundle(site, "missing")


def test_failure_domains_by_label_and_percentage(site: Path) -> None:
    (site / "bundles" / "next.yaml").write_text(GOOD)
    loaded = load(site)
    hosts = servers(loaded)
    current = {h.hostname: {"kubernetes": "1.35.8"} for h in hosts}
    target = load_bundle(site, "next").bundle
    p = make_plan(loaded, hosts, target, current, PlanOptions(batch=10, max_unavailable="50%"))
    assert p.max_unavailable == {"r01": 3}  # 50 % of the rack's 6 servers
    # Kubernetes moves: the control planes' kubeadm upgrade in place first, then three
    # down at once in the rack, one control plane per round
    assert p.control_planes_first == ["cp01", "cp02", "cp03"]
    assert p.batches == [["cp01", "dgx01", "dgx02"], ["cp02", "stor01"], ["cp03"]]
    with pytest.raises(ConfigError, match="no label 'zone'"):
        make_plan(loaded, hosts, target, current, PlanOptions(domain_label="zone"))


def test_cli_exit_code_for_a_refused_plan(site: Path) -> None:
    (site / "bundles" / "next.yaml").write_text(GOOD.replace("1.36.4", "1.38.0"))
    proc = subprocess.run([sys.executable, "-m", "provisioner", "upgrade", "plan", str(site),
                           "--to", "next", "--json"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == ExitCode.UPGRADE_REFUSED == 11
    assert '"kubernetes-skips-minor"' in proc.stdout


GPU_STACK = GOOD.replace('"1.36.4"', '"1.35.8"') + 'containerd: "1.7.24"\n'  # no Kubernetes


def test_workers_go_alongside_the_control_planes_only_when_kubernetes_stays(
        site: Path) -> None:
    gpu = plan_of(site, GPU_STACK, max_unavailable=3, batch="100%")
    assert gpu.ok and not gpu.workers_wait and "no Kubernetes version" in gpu.order
    # one rack, three down at once: every control-plane round carries workers with it
    assert gpu.batches == [["cp01", "dgx01", "dgx02"], ["cp02", "stor01"], ["cp03"]]
    assert gpu.control_planes_first == []
    # Kubernetes moves: each control plane's API server first, in place (no drain), then
    # the same rounds as the GPU bundle; no kubelet is ever newer than an API server
    kube = plan_of(site, GOOD, max_unavailable=3, batch="100%")
    assert kube.workers_wait and "(1.35.8 -> 1.36.4)" in kube.order
    assert kube.control_planes_first == ["cp01", "cp02", "cp03"]
    assert "kubeadm upgrade in place" in kube.order
    assert kube.batches == gpu.batches
    assert kube.planned_s == gpu.planned_s + 3 * Durations().kubeadm_s


def test_a_control_plane_already_on_the_bundle_is_not_moved_again(site: Path) -> None:
    """An earlier run finished cp03: the other two move in place, and nothing waits for
    cp03. A control plane down (failed or part-way) makes the workers wait instead."""
    (site / "bundles" / "next.yaml").write_text(GOOD)
    loaded = load(site)
    every = servers(loaded)
    current = {h.hostname: {"kubernetes": "1.36.4" if h.hostname == "cp03" else "1.35.8"}
               for h in every}
    p = make_plan(loaded, every, load_bundle(site, "next").bundle, current,
                  PlanOptions(batch="100%", max_unavailable=3),
                  [h.hostname for h in every if h.control_plane], every)
    assert p.ok and p.control_planes_first == ["cp01", "cp02"]
    assert p.batches == [["cp01", "dgx01", "dgx02"], ["cp02", "stor01"]]
    sched = Scheduler({h.hostname: "r01" for h in every}, frozenset({"cp01", "cp02", "cp03"}))
    todo = ["cp01", "cp02", "dgx01"]
    assert sched.control_planes_first(todo) == ["cp01", "cp02"]
    assert sched.control_planes_first(todo, down={"cp03"}) == []
    assert sched.control_planes_first(["dgx01"]) == []  # no control plane to move
    assert sched.control_planes_first(["cp01", "cp02"]) == []  # no worker waits for them


def test_workers_wait_for_a_failed_control_plane_only_when_kubernetes_changes() -> None:
    """A control plane that failed may still serve the old API version: with a Kubernetes
    change no worker may start (a kubelet never newer than the API server)."""
    domains = {"cp1": "a", "cp2": "b", "cp3": "c", "w1": "a", "w2": "b"}
    cps = frozenset({"cp1", "cp2", "cp3"})
    kube = Scheduler(domains, cps, batch="100%", max_unavailable=1, workers_wait=True)
    assert kube.next_batch(["w1", "w2"], down={"cp3"}) == []
    assert "workers wait for every control plane" in kube.why_none(["w1", "w2"], {"cp3"})
    assert kube.next_batch(["cp2", "w1", "w2"], down={"cp3"}) == []  # quorum, and they wait
    assert "etcd quorum); workers wait" in kube.why_none(["cp2", "w1"], {"cp3"})
    gpu = Scheduler(domains, cps, batch="100%", max_unavailable=1, workers_wait=False)
    assert gpu.next_batch(["w1", "w2"], down={"cp3"}) == ["w1", "w2"]
    # cp1 shares rack a with w1: it takes the rack's one slot, w1 waits for the next round
    assert gpu.next_batch(["cp1", "w1", "w2"], down=()) == ["cp1", "w2"]
    # quorum: with cp3 down no other control plane may go, the workers still may
    assert gpu.next_batch(["cp2", "w1"], down={"cp3"}) == ["w1"]
    assert gpu.next_batch(["cp2"], down={"cp3"}) == []
    assert "etcd quorum" in gpu.why_none(["cp2"], {"cp3"})


def test_plan_says_which_bundle_rows_the_roles_do_not_apply(site: Path) -> None:
    """containerd, the container toolkit and the charts are recorded with a bundle, but the
    roles do not pin them: the plan must not let an operator believe they move."""
    p = plan_of(site, GPU_STACK)
    notes = [w for w in p.warnings if "recorded with the bundle but not applied" in w]
    assert any(w.startswith("containerd 1.7.24 ") for w in notes), p.warnings
    assert not any(w.startswith(("nvidia_driver", "cuda", "dcgm")) for w in notes)


def test_a_control_plane_down_for_another_reason_does_not_hold_the_workers() -> None:
    """Kubernetes changes and every control plane is done; cp3 is then cordoned by hand: it
    uses its domain's allowance and quorum, but the API servers are all new, so the
    workers go on (only a control plane this upgrade has not finished holds them)."""
    domains = {"cp1": "a", "cp2": "b", "cp3": "c", "w1": "a", "w2": "b"}
    kube = Scheduler(domains, frozenset({"cp1", "cp2", "cp3"}), batch="100%",
                     max_unavailable=1, workers_wait=True)
    assert kube.next_batch(["w1", "w2"], down={"cp3"}) == []  # a failed cp3 holds them
    assert kube.next_batch(["w1", "w2"], down={"cp3"}, unfinished=set()) == ["w1", "w2"]
    assert kube.next_batch(["w1", "w2"], down={"cp1"}, unfinished=set()) == ["w2"]
    assert "cp3 did not finish" in kube.why_none(["w1"], {"cp3"}, unfinished={"cp3"})


def test_a_pending_node_that_is_not_ready_takes_nothing_more_but_quorum_holds() -> None:
    """w1 is NotReady (down) and pending: upgrading it adds no unavailability, so it goes
    with w2 although the rack allows two down and w1 counts; a NotReady control plane is
    still checked for quorum as if it went down now."""
    domains = {"w1": "a", "w2": "a", "w3": "a"}
    s = Scheduler(domains, frozenset(), batch="100%", max_unavailable=2, workers_wait=False)
    assert s.next_batch(["w1", "w2", "w3"], down={"w1"}) == ["w1", "w2"]
    assert s.next_batch(["w2", "w3"], down={"w1"}) == ["w2"]  # w1 down, not pending: counts
    cps = {"cp1": "a", "cp2": "b", "cp3": "c"}
    q = Scheduler(cps, frozenset(cps), batch="100%", max_unavailable=1, workers_wait=True)
    assert q.next_batch(["cp1", "cp3"], down={"cp1", "cp2"}) == []  # cp2 failed: quorum
    assert q.next_batch(["cp1", "cp3"], down={"cp1"}) == ["cp1"]


def test_the_driver_source_stays_the_sites(site: Path) -> None:
    """A Secure Boot site takes Canonical's signed modules: a bundle that names no source
    keeps the site's (it must not move the nodes onto NVIDIA's unsigned DKMS build), and one
    that names another is refused (a reinstall, not a rolling upgrade)."""
    text = (site / "site.yaml").read_text()
    (site / "site.yaml").write_text(text.replace(
        'version: "570.124.06"\n',
        'version: "570.124.06"\n    source: canonical\n    kernel_flavour: nvidia\n', 1))
    (site / "bundles" / "next.yaml").write_text(GOOD)
    loaded = load(site)
    assert loaded.site.software.nvidia_driver.source == "canonical"
    bundle = load_bundle(site, "next").bundle
    from provisioner import render
    from provisioner.upgrade.plan import site_at
    packages = {i["name"] for i in render.artifacts(site_at(loaded, bundle))
                if i["kind"] == "package"}
    assert "linux-modules-nvidia-570-server-open-nvidia" in packages  # the site's flavour
    assert "nvidia-driver-570-open" not in packages
    assert plan_of(site, GOOD).ok
    assert codes(site, GOOD.replace("kernel_modules: auto", "kernel_modules: auto, "
                                    "source: nvidia")) == ["driver-source-change"]
    assert codes(site, GOOD.replace("kernel_modules: auto", "kernel_modules: auto, "
                                    "source: canonical")) == []


def test_a_bundle_without_kernel_modules_keeps_the_sites_choice(site: Path) -> None:
    """kernel_modules left out of a bundle stays the site's: a site that chose the
    proprietary modules is not moved to the open ones by the field's default ("auto")."""
    text = (site / "site.yaml").read_text()
    (site / "site.yaml").write_text(text.replace("kernel_modules: auto ",
                                                 "kernel_modules: proprietary ", 1))
    p = plan_of(site, GOOD.replace(", kernel_modules: auto", ""))
    assert p.ok, p.refusals
    assert "kernel_modules" not in {c.component for c in p.changes}
    from provisioner import render
    from provisioner.upgrade.plan import site_at
    loaded = load(site)
    packages = {i["name"] for i in render.artifacts(site_at(loaded, load_bundle(
        site, "next").bundle)) if i["kind"] == "package"}
    assert "cuda-drivers-570" in packages and "nvidia-driver-570-open" not in packages
    # a bundle that names the modules changes them, and plan says so
    p = plan_of(site, GOOD)
    assert {c.component: c.new for c in p.changes}["kernel_modules"] == "auto"
    # modules the bundle names itself: its row says so, no auto warning
    assert not any("kernel modules go" in w for w in plan_of(
        site, GOOD.replace("kernel_modules: auto", "kernel_modules: open")).warnings)
    # a kernel flavour is the nodes', not a release's
    assert "kernel-flavour-change" in codes(site, GOOD.replace(
        "kernel_modules: auto", "kernel_modules: auto, kernel_flavour: nvidia"))
    # NSCQ left out follows the driver: no "stops pinning" warning for it
    assert not any(w.startswith("nscq") for w in plan_of(
        site, GOOD.replace('nscq: "570.148.08"\n', "")).warnings)


def test_imex_must_equal_the_driver_and_lives_on_imex_trays_only(site: Path) -> None:
    """IMEX runs at the driver's version (as NSCQ does); the example's H100 nodes run no
    IMEX, so a bundle's imex row changes nothing on them."""
    bad = GOOD + 'imex: "570.124.06"\n'
    assert codes(site, bad) == ["imex-version"]
    p = plan_of(site, GOOD + 'imex: "570.148.08"\n')
    assert p.ok and "imex" not in {c.component for c in p.changes}
    from provisioner.inventory.topology import host_plans
    from provisioner.upgrade.plan import components_on
    from tests.conftest import FIXTURES
    gb = load(FIXTURES / "sites" / "gb200.yaml")
    on = {h.hostname: components_on(h, gb) for h in host_plans(gb) if h.is_server}
    assert "imex" in on["gb01"] and "fabric_manager" not in on["gb01"]
    assert "imex" not in on["cp01"]


def test_auto_modules_that_move_from_proprietary_to_open_are_said(site: Path) -> None:
    """kernel_modules: auto on both sides, but Hopper at R550 runs the proprietary modules
    and at R570 the open ones: the bundle row stays "auto", and plan says what moves."""
    text = (site / "site.yaml").read_text()
    (site / "site.yaml").write_text(
        text.replace('branch: "570"', 'branch: "550"', 1)
        .replace('version: "570.124.06"', 'version: "550.127.05"', 1)
        .replace('cuda: "12.8"', 'cuda: "12.4"', 1))
    p = plan_of(site, GOOD)
    assert p.ok, p.refusals
    moved = [w for w in p.warnings if w.startswith("the kernel modules go from")]
    assert moved == [moved[0]] and "proprietary to open on dgx01, dgx02" in moved[0]
    # from 570 to 570 nothing moves
    again = site.parent / "again"
    shutil.copytree(EXAMPLE, again, ignore=shutil.ignore_patterns(".provision"))
    assert not any("kernel modules go" in w for w in plan_of(again, GOOD).warnings)


def test_a_plan_run_again_after_apply_finished_says_there_is_nothing_to_do(
        site: Path) -> None:
    """Every server carries the bundle's `upgraded` record (apply finished): `plan` says in
    words and in JSON that all of them are on the bundle, instead of an order, no batch
    and "planned 0 min". One node left part-way is still something to do."""
    import json

    from provisioner.lifecycle import Phase
    from provisioner.state import StateStore
    from provisioner.upgrade.drift import UPGRADED
    from provisioner.upgrade.plan import effective

    (site / "bundles" / "next.yaml").write_text(GOOD)
    loaded = load(site)
    done = effective(loaded, load_bundle(site, "next").bundle).components()
    hosts = [h.hostname for h in servers(loaded)]
    db = site / "elsewhere" / "state.db"
    db.parent.mkdir()
    store = StateStore(db)
    store.enroll(hosts)
    for h in hosts:
        for p in (Phase.INSPECTED, Phase.BOOTING, Phase.OS_READY, Phase.CONFIGURED,
                  Phase.VERIFIED, Phase.READY):
            store.transition(h, p)
        store.record(h, UPGRADED, {"bundle": "next", "versions": done})

    def cli(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "provisioner", "upgrade", "plan",
                               str(site), "--to", "next", "--state", str(db), *extra],
                              capture_output=True, text=True, cwd=ROOT)

    text = cli()
    assert text.returncode == 0, text.stderr
    said = f"nothing to do: all {len(hosts)} nodes are on bundle next"
    assert text.stdout.startswith(said), text.stdout
    assert "batch" not in text.stdout and "planned 0 min" not in text.stdout
    rep = json.loads(cli("--json").stdout)
    assert rep["nothing_to_do"] is True and rep["summary"].startswith(said)
    assert rep["batches"] == [] and rep["ok"] is True
    one = json.loads(cli("--json", "--limit", "dgx01").stdout)
    assert one["summary"].startswith("nothing to do: dgx01 is on bundle next")
    # dgx02 cordoned by a run that stopped: apply takes it up again, not nothing to do
    store.transition("dgx02", Phase.CORDONED, detail={"bundle": "next"})
    again = json.loads(cli("--json").stdout)
    assert again["nothing_to_do"] is False
    assert again["summary"].startswith(f"1 of {len(hosts)} nodes move to bundle next")
