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
                       hosts={"dgx01": HostStats(ok=9, failed=1)}, events=[APT, WHY])
    assert result.failure_of("dgx01") == WHY
    assert "at 'Stop with what to do about the missing headers'" in str(
        _per_host(result, ["dgx01"])["dgx01"])


def test_without_stats_every_failure_counts():
    """A canceled run has no stats: its failure events are all there is to go by."""
    result = RunResult("site.yml", "canceled", 1, events=[APT])
    assert result.failure_of("dgx01") == APT
    assert result.failure_of("dgx02") is None
