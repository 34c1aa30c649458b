"""The inventory's fast IPv4 parse (fields.parse_ipv4) reads exactly what ipaddress reads,
and an address it does not take still gets pydantic's own error at its line."""

from __future__ import annotations

import random
from ipaddress import IPv4Address

import pytest

from provisioner.errors import InventoryError
from provisioner.inventory import load
from provisioner.inventory.fields import parse_ipv4

EDGES = ["1.2.3.4", "0.0.0.0", "255.255.255.255", "01.2.3.4", "1.2.3.04", "1.2.3",
         "1.2.3.4.5", "256.1.1.1", " 1.2.3.4", "1.2.3.4 ", "1.2.3.4\n", "0x1.2.3.4",
         "1.2.3.4\x00", "\uff11.2.3.4", "1..2.3", "", "::1", "10.0.0.1/24", "1.2.3.-4"]


def slow(text: str) -> IPv4Address | None:
    try:
        return IPv4Address(text)
    except ValueError:
        return None


def test_fast_parse_agrees_with_ipaddress_on_edges_and_random_text():
    rng = random.Random(16)
    texts = EDGES + ["".join(rng.choice("0123456789.. x-") for _ in range(rng.randint(1, 17)))
                     for _ in range(50_000)]
    accepted = 0
    for t in texts:
        fast = parse_ipv4(t)
        if fast is not None:  # never accepts what ipaddress refuses, never a different value
            assert fast == slow(t), repr(t)
            accepted += 1
        elif slow(t) is not None:  # what it leaves to ipaddress: non-canonical forms only
            assert str(slow(t)) != t, repr(t)
    assert accepted >= 3  # the edges' canonical addresses at least


@pytest.mark.parametrize("bad", ["10.0.0.256", "010.0.0.1"])
def test_an_address_the_fast_path_leaves_gets_pydantics_error(write_site, bad):
    path = write_site(
        "site: {name: x}\nnetworks:\n  - {name: mgmt, kind: management, cidr: 10.0.0.0/24}\n"
        "racks: []\nplacements:\n  - rack: r1\n    u: 1\n    block: dgx-h100\n    nodes:\n"
        f"      - hostname: a\n        addresses: {{mgmt: '{bad}'}}\n")
    with pytest.raises(InventoryError) as exc:
        load(path)
    f = next(f for f in exc.value.findings if "addresses" in (f.location.key_path or ""))
    assert "valid IPv4 address" in f.message and f.location.line == 11
