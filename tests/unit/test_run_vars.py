"""What `up` tells each batch's playbook of the run (steps/ansible.run_vars): the control
planes it could not configure, and those no run ever configured, read from the state
store; the kubernetes role then delegates to none of them (test_kubernetes_holder.py runs
the role's choice for real)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import yaml

from provisioner.inventory import load
from provisioner.inventory.topology import servers
from provisioner.state import Phase, StateStore
from provisioner.workflows.steps import ansible as ansible_step
from tests.conftest import EXAMPLE, moved_to


def test_failed_and_uninstalled_control_planes_are_named_and_the_batch_is_not(tmp_path: Path):
    store = StateStore(tmp_path / "state.db")
    moved_to(store, ["cp01"], Phase.INSPECTED)  # failed at boot below: never configured
    store.transition("cp01", Phase.FAILED, reason="disk holds an installed system")
    moved_to(store, ["cp02"], Phase.READY)  # ready: available
    moved_to(store, ["cp03"], Phase.VERIFIED)  # configured once, failed its gate since
    store.transition("cp03", Phase.FAILED, reason="gate")
    moved_to(store, ["dgx01"], Phase.OS_READY)  # no control plane: never named
    plans = {p.hostname: p for p in servers(load(EXAMPLE))}
    ctx = SimpleNamespace(journal=SimpleNamespace(store=store), plans=plans)
    got = ansible_step.run_vars(ctx, ["dgx01"])  # type: ignore[arg-type]
    assert got == {"kubernetes_unavailable_control_planes": ["cp01", "cp03"],
                   "kubernetes_never_configured_control_planes": ["cp01"]}
    # in the batch itself: it runs the roles now
    assert ansible_step.run_vars(ctx, ["cp01", "dgx01"])[  # type: ignore[arg-type]
        "kubernetes_unavailable_control_planes"] == ["cp03"]
    (tmp_path / "inventory").mkdir()
    ansible_step.write_run_vars(ctx, tmp_path, ["dgx01"])  # type: ignore[arg-type]
    doc = yaml.safe_load((tmp_path / "inventory" / ansible_step.RUN_VARS).read_text())
    assert doc == {"all": {"vars": got}}
