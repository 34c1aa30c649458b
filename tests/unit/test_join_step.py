"""The join step's place in `up` (workflows/steps/join.py): the configure batch hands the
hosts that passed site.yml to it before they move, and a host it fails stays out of
`configured`. The check-mode run itself is real Ansible against the lab
(tests/integration/add_flow.py)."""

from __future__ import annotations

import threading
from pathlib import Path

from provisioner import runner as runner_mod
from provisioner.inventory import load
from provisioner.inventory.topology import servers
from provisioner.lifecycle import Phase
from provisioner.profile import for_site
from provisioner.state import StateStore
from provisioner.workflows.engine import Journal
from provisioner.workflows.steps import Context
from provisioner.workflows.steps import join as join_step
from provisioner.workflows.steps.ansible import Playbook
from tests.conftest import EXAMPLE, moved_to


def _context(tmp_path: Path, hosts: list[str]) -> Context:
    loaded = load(EXAMPLE)
    store = StateStore(tmp_path / "state.db")
    moved_to(store, hosts, Phase.OS_READY)
    journal = Journal(store, store.start_run("test"), None)
    journal.load(hosts)
    return Context(loaded, {}, journal, threading.Event(),
                   {s.hostname: s for s in servers(loaded)}, for_site(loaded, lab=True))


def test_a_host_the_join_fails_stays_out_of_configured_the_others_move(tmp_path: Path) -> None:
    ctx = _context(tmp_path, ["dgx01", "dgx02", "stor01"])
    handed: list[list[str]] = []

    def join(batch: list[str]) -> dict[str, str]:
        handed.append(batch)
        return {"dgx02": "join (check mode): failed at 'Write the join configuration'"}

    failed = runner_mod.TaskEvent("stor01", "Install", "base_os", "failed", "no package")
    result = runner_mod.RunResult(playbook="site.yml", status="failed", rc=2,
                                  events=[failed], artifact_dir="/nowhere")
    Playbook(ctx, "site.yml", "configure", Phase.OS_READY, Phase.CONFIGURED, 5,
             then=join).apply(result, ["dgx01", "dgx02", "stor01"])
    assert handed == [["dgx01", "dgx02"]]  # only the hosts site.yml left in good shape
    out = ctx.journal.outcomes
    assert out["dgx01"].phase is Phase.CONFIGURED
    assert out["dgx02"].phase is Phase.FAILED and out["dgx02"].failed_phase is Phase.OS_READY
    assert "join (check mode)" in (out["dgx02"].reason or "")
    assert out["stor01"].phase is Phase.FAILED and "no package" in (out["stor01"].reason or "")


def test_the_join_goes_through_the_role_s_first_control_plane(tmp_path: Path) -> None:
    ctx = _context(tmp_path, ["dgx01"])
    # groups['kube_control_plane'] | first, as topology.groups sorts it
    assert join_step.first_control_plane(ctx) == "cp01"
    assert "check mode" in join_step.LAB_JOIN_NOTE
