"""The RoCE contract: values from NVIDIA's lossless RoCE defaults (Cumulus Linux 5.14 "RDMA
over Converged Ethernet - RoCE"; Onyx "RoCE Commands")."""

from __future__ import annotations

import pytest

from provisioner import roce
from provisioner.inventory.models import Roce


def test_nvidia_defaults() -> None:
    p = roce.policy(Roce())
    assert (p.roce_dscp, p.roce_priority, p.cnp_dscp, p.cnp_priority) == (26, 3, 48, 6)
    assert p.tos == 106
    assert p.pfc_vector == "0,0,0,1,0,0,0,0"
    assert p.dscp_map() == {26: 3, 48: 6}
    assert (p.ecn_min_bytes, p.ecn_max_bytes) == (150_000, 1_500_000)


@pytest.mark.parametrize(("dscp", "tos"), [(0, 2), (26, 106), (46, 186), (63, 254)])
def test_tos_is_dscp_shifted_with_ect0(dscp: int, tos: int) -> None:
    assert roce.tos(dscp) == tos


@pytest.mark.parametrize("prio", range(8))
def test_pfc_vector_enables_only_that_priority(prio: int) -> None:
    bits = roce.pfc_vector(prio).split(",")
    assert len(bits) == 8 and bits[prio] == "1" and bits.count("1") == 1


def test_out_of_range_refused() -> None:
    with pytest.raises(ValueError, match="0-63"):
        roce.tos(64)
    with pytest.raises(ValueError, match="0-7"):
        roce.pfc_vector(8)


def test_sonic_keeps_two_lossless_queues() -> None:
    assert roce.lossless_priorities(Roce(), "sonic") == (3, 4)
    assert roce.lossless_priorities(Roce(), "cumulus") == (3,)
    assert roce.lossless_priorities(Roce(priority=5, cnp_priority=6), "sonic") == (3, 4, 5)
    assert roce.lossless_priorities(Roce(mode="lossy"), "sonic") == ()


def test_host_vars_match_role_defaults() -> None:
    hv = roce.host_vars(roce.policy(Roce()))
    assert hv["roce_host_tos"] == 106 and hv["roce_host_pfc"] == "0,0,0,1,0,0,0,0"


def test_rendered_host_vars_are_the_policy(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The group_vars render writes for the roce_host role are roce.host_vars() of the site."""
    import yaml

    from provisioner import render
    from provisioner.inventory import load
    from tests.conftest import EXAMPLE

    loaded = load(EXAMPLE)
    render.render(loaded, tmp_path / "out")
    gv = yaml.safe_load((tmp_path / "out" / "inventory/group_vars/all.yml").read_text())
    want = roce.host_vars(roce.policy(loaded.site.software.roce))
    assert {k: gv[k] for k in want} == want
