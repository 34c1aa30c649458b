"""Discovery's pure parts: the catalog fingerprint and the dnsmasq lease file."""

from __future__ import annotations

import pytest

from provisioner.bmc.base import Gpu, HardwareFacts, NicFact, PsuFact
from provisioner.discover import addresses
from provisioner.discover.fingerprint import fingerprint
from provisioner.discover.leases import parse
from provisioner.errors import ConfigError
from provisioner.inventory.loader import shipped_catalog


def _facts(model: str, gpu: str, gpus: int, psu_w: float, *, nvswitch: int | None = 4,
           ports: int = 8) -> HardwareFacts:
    nics = tuple(NicFact(f"p{i}", f"7c:c2:55:00:00:{i:02x}", 400_000) for i in range(ports))
    return HardwareFacts(vendor="NVIDIA", model=model, serial="S1",
                         gpus=(Gpu(gpu, gpus),), nics=(NicFact("mgmt", "52:54:00:00:00:01",
                                                                1000), *nics),
                         psus=tuple(PsuFact(f"PSU{i}", psu_w) for i in range(6)),
                         nvswitch_count=nvswitch)


def test_look_alikes_are_told_apart_by_chassis_model_and_psus() -> None:
    cat = shipped_catalog()
    dgx = fingerprint(_facts("DGX H100", "NVIDIA H100 80GB HBM3", 8, 3300), cat)
    assert dgx.block == "dgx-h100" and dgx.confidence == 1.0
    hgx = fingerprint(_facts("HGX 8GPU", "NVIDIA H100 SXM5", 8, 3000), cat)
    assert hgx.block == "hgx-8gpu"
    h200 = fingerprint(_facts("DGX H200", "NVIDIA H200", 8, 3300), cat)
    assert h200.block == "dgx-h200"  # H100 ruled out by the GPU model


def test_unknown_shape_is_reported_not_guessed() -> None:
    cat = shipped_catalog()
    odd = fingerprint(_facts("R760xa", "NVIDIA L4", 3, 1400, nvswitch=0, ports=2), cat)
    assert odd.block is None
    assert any("3x NVIDIA L4" in r or "L4" in r for r in odd.reasons)
    # no chassis model, GPUs only: two blocks match equally -> ambiguous, not a pick
    bare = HardwareFacts(gpus=(Gpu("NVIDIA H100", 8),), nvswitch_count=4)
    amb = fingerprint(bare, cat)
    assert amb.block is None and amb.reasons[0].startswith("ambiguous")


def test_leases_parse_v4_skip_v6_and_name_the_bad_line() -> None:
    text = ("1732300000 7c:c2:55:00:00:40 10.250.1.40 bmc-40 01:7c:c2:55:00:00:40\n"
            "0 7C:C2:55:00:00:41 10.250.1.41 * *\n"
            "duid 00:01:00:01:2c:00:00:00:52:54:00:00:00:01\n"
            "1732300000 1234 fd00::5 host6 00:01\n")
    leases = parse(text, "dnsmasq.leases")
    assert [(x.mac, x.address, x.hostname) for x in leases] == [
        ("7c:c2:55:00:00:40", "10.250.1.40", "bmc-40"),
        ("7c:c2:55:00:00:41", "10.250.1.41", None)]
    with pytest.raises(ConfigError, match=r"dnsmasq.leases:2: bad expiry or MAC"):
        parse("1 aa:bb:cc:dd:ee:ff 10.0.0.1 a *\n1 zz 10.0.0.2 b *\n", "dnsmasq.leases")
    assert addresses(["10.250.1.40/31"], leases) == ("10.250.1.40", "10.250.1.41")
    with pytest.raises(ConfigError, match="at most 4096"):
        addresses(["10.0.0.0/16"], [])


def test_plain_http_beyond_loopback_is_warned():
    """--scheme http sends the shared BMC login in clear to whatever answers: said unless
    every address probed is on loopback (the lab's emulators)."""
    from provisioner.discover import ProbePlan, plain_http_warning

    lab = ProbePlan(addresses=("127.0.0.1", "127.0.0.2"), scheme="http")
    assert plain_http_warning(lab) is None
    assert plain_http_warning(ProbePlan(addresses=("10.250.1.40",), scheme="https")) is None
    site = ProbePlan(addresses=("127.0.0.1", "10.250.1.40", "bmc41.site"), scheme="http")
    assert "unencrypted (HTTP Basic auth) to each BMC found at 2 address(es)" in str(
        plain_http_warning(site))
