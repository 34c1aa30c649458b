"""Which task failed a host: a block's task that its rescue handled is reported by Ansible
as failed, but did not fail the host (its stats count no failure); a rescue that fails
itself is the reason, not the task it rescued."""

from __future__ import annotations

from provisioner.runner import HostStats, RunResult, TaskEvent
from provisioner.upgrade.host import _per_host

APT = TaskEvent("dgx01", "Install the running kernel's headers for DKMS", "nvidia_driver",
                "failed", "No package matching 'linux-headers-5.15.0-1-old' is available")
WHY = TaskEvent("dgx01", "Stop with what to do about the missing headers", "nvidia_driver",
                "failed", "linux-headers-5.15.0-1-old could not be installed (...)")


def test_a_rescued_failure_does_not_fail_the_host():
    result = RunResult("site.yml", "successful", 0,
                       hosts={"dgx01": HostStats(ok=9, rescued=1)}, events=[APT])
    assert result.failures == [APT]  # still shown as what happened
    assert result.failure_of("dgx01") is None
    assert _per_host(result, ["dgx01"]) == {"dgx01": None}


def test_a_failed_rescue_is_the_reason():
    result = RunResult("site.yml", "failed", 2,
                       hosts={"dgx01": HostStats(ok=9, failed=1, rescued=1)},
                       events=[APT, WHY])
    assert result.failure_of("dgx01") == WHY
    assert "at 'Stop with what to do about the missing headers'" in str(
        _per_host(result, ["dgx01"])["dgx01"])


def test_a_failed_cleanup_does_not_hide_the_first_failure():
    """A block's `always:` cleanup that fails too (no rescue ran): the first failure is
    the reason."""
    join = TaskEvent("cp02", "Join further control planes, one at a time", "kubernetes",
                     "failed", "kubeadm join: preflight failed")
    cleanup = TaskEvent("cp02", "Remove the join configuration", "kubernetes", "failed",
                        "permission denied")
    result = RunResult("site.yml", "failed", 2, hosts={"cp02": HostStats(ok=3, failed=2)},
                       events=[join, cleanup])
    assert result.failure_of("cp02") == join


def test_a_node_stopped_by_another_nodes_failure_did_not_finish_its_roles():
    """any_errors_fatal: the batch's other nodes stop with no failure of their own; the
    upgrade must not gate and uncordon them as if their roles had run."""
    result = RunResult("upgrade.yml", "failed", 2, events=[APT, WHY], aborted=True,
                       hosts={"dgx01": HostStats(ok=9, failed=1, rescued=1),
                              "dgx02": HostStats(ok=5)})
    out = _per_host(result, ["dgx01", "dgx02"])
    assert "stopped after another node of the batch failed" in str(out["dgx02"])
    assert "missing headers" in str(out["dgx01"])


def test_a_rescued_failure_is_not_a_failed_run_for_the_other_hosts():
    """A run that failed without any host failing (rc 2, only a rescued failure): every
    host gets the run's end, not a pass."""
    result = RunResult("upgrade.yml", "failed", 2, events=[APT],
                       hosts={"dgx01": HostStats(ok=9, rescued=1), "dgx02": HostStats(ok=5)})
    assert not result.any_host_failed
    assert _per_host(result, ["dgx02"]) == {"dgx02": "upgrade.yml ended failed (rc 2)"}


def test_without_stats_every_failure_counts():
    """A canceled run has no stats: its failure events are all there is to go by."""
    result = RunResult("site.yml", "canceled", 1, events=[APT])
    assert result.failure_of("dgx01") == APT
    assert result.failure_of("dgx02") is None
