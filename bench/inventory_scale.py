"""How much does checking an inventory cost, relative to just parsing its YAML?

For sites of 100, 1,000 and 10,000 nodes this prints the time of load + validate + power
report (the whole `provision validate` core) divided by the time of only parsing the same
YAML with PyYAML's C loader, both measured here in the same run (best of N repeats).
Goal: <= 3x at 10,000 nodes.

    python bench/inventory_scale.py [--repeat 5] [--sizes 100,1000,10000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import yaml

from provisioner import power
from provisioner.inventory import check, load
from provisioner.inventory.findings import errors

HEADER = """\
site: {name: scale-%(n)d}
credentials:
  bmc: {username: admin, password: {env: BMC_PASSWORD}}
networks:
  - {name: mgmt, kind: management, cidr: 10.0.0.0/16}
  - {name: oob, kind: oob, cidr: 10.1.0.0/16}
  - {name: roce, kind: roce, cidr: 10.2.0.0/16, mtu: 9000}
software:
  nvidia_driver: {branch: "570", version: "570.124.06"}
  cuda: "12.8"
  kubernetes: {version: "1.31.4"}
"""


def generate(n_nodes: int) -> str:
    """Racks of 2x DGX H100 + 4x compute 2U4N (18 nodes a rack), 2N feeds."""
    racks, placements = ["racks:"], ["placements:"]
    node = 0
    rack = 0

    def node_yaml(role: str | None) -> str:
        nonlocal node
        i = node
        node += 1
        hi, lo = divmod(i + 10, 250)
        roles = f", roles: [{role}]" if role else ""
        return (f"      - {{hostname: n{i:05d}{roles}, "
                f"bmc: {{protocol: redfish, address: 10.1.{hi}.{lo}, credentials: bmc}}, "
                f"addresses: {{mgmt: 10.0.{hi}.{lo}, roce: 10.2.{hi}.{lo}}}, "
                f"macs: {{mgmt: '52:54:00:{(i >> 16) & 255:02x}:"
                f"{(i >> 8) & 255:02x}:{i & 255:02x}'}}}}")

    while node < n_nodes:
        rack += 1
        name = f"r{rack:04d}"
        racks.append(f"  - name: {name}\n    redundancy: 2N\n    cooling_kw: 40\n    feeds:\n"
                     "      - {name: A, phase: three, voltage_v: 415, breaker_a: 63}\n"
                     "      - {name: B, phase: three, voltage_v: 415, breaker_a: 63}")
        u = 1
        for block, units, per in (("dgx-h100", 8, 1), ("dgx-h100", 8, 1),
                                  ("compute-2u4n", 2, 4), ("compute-2u4n", 2, 4),
                                  ("compute-2u4n", 2, 4), ("compute-2u4n", 2, 4)):
            if node >= n_nodes:
                break
            count = min(per, n_nodes - node)
            role = "control-plane" if node < 3 else None
            nodes = "\n".join(node_yaml(role) for _ in range(count))
            placements.append(f"  - rack: {name}\n    u: {u}\n    block: {block}\n"
                              f"    nodes:\n{nodes}")
            u += units
    return HEADER % {"n": n_nodes} + "\n".join(racks) + "\n" + "\n".join(placements) + "\n"


def best_of(repeat: int, fn) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--sizes", default="100,1000,10000")
    args = ap.parse_args()
    print(f"{'nodes':>7} {'racks':>6} {'yaml KB':>8} {'parse s':>9} {'check s':>9} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(s) for s in args.sizes.split(",")):
            text = generate(n)
            path = Path(tmp) / f"site-{n}.yaml"
            path.write_text(text)
            raw = path.read_bytes()

            def parse_only(raw: bytes = raw) -> None:
                yaml.load(raw, Loader=yaml.CSafeLoader)

            def whole_check(path: Path = path) -> None:
                loaded = load(path)
                findings = check(loaded)
                assert not errors(findings), errors(findings)[:3]
                power.budget(loaded.site, loaded.catalog)

            whole_check()  # warm caches (shipped catalog) outside the timing
            t_parse = best_of(args.repeat, parse_only)
            t_check = best_of(args.repeat, whole_check)
            racks = sum(1 for line in text.splitlines() if line.startswith("  - name: r"))
            print(f"{n:>7} {racks:>6} {len(raw) / 1024:>8.0f} {t_parse:>9.3f} {t_check:>9.3f} "
                  f"{t_check / t_parse:>5.2f}x")


if __name__ == "__main__":
    main()
