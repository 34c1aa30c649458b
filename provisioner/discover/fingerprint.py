"""Which catalog block a discovered node is, from what its BMC reports: GPU model and
count, NVSwitch, chassis model, NIC set, PSUs. Pure (no I/O).

Each block is scored on the facts the BMC gave; a fact the BMC does not report neither
helps nor hurts, and a fact that contradicts the block rules it out. The best block is
chosen only when it is clearly ahead; an unknown or ambiguous shape is reported as such,
with the reasons, never guessed.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from provisioner.bmc.base import HardwareFacts
from provisioner.inventory.block_models import BlockKind, BlockType

# Below this share of the possible evidence a match is not trusted.
MIN_CONFIDENCE = 0.6
# Weights: GPUs decide most; the chassis model name separates look-alike blocks (DGX H100
# vs an OEM HGX H100); NICs and PSUs are weaker (BMCs often list only some NICs).
WEIGHTS = {"gpu_model": 3.0, "gpu_count": 3.0, "nvswitch": 1.0, "model": 2.0,
           "nics": 1.0, "psus": 1.0}


@dataclass(frozen=True)
class Fingerprint:
    block: str | None  # None: unknown or ambiguous shape
    confidence: float  # 0..1: share of the weighted evidence that matched
    reasons: tuple[str, ...]
    candidates: tuple[tuple[str, float], ...] = field(default=())  # (block, confidence)


def _norm(text: str | None) -> str:
    return re.sub(r"[^a-z0-9]", "", (text or "").lower())


def _data_port_speeds_gbps(facts: HardwareFacts) -> Counter[float]:
    """Ports above 1 Gbit/s (the management NIC is left out), by speed."""
    return Counter(n.speed_mbps / 1000 for n in facts.nics
                   if n.speed_mbps is not None and n.speed_mbps > 1000)


def score(block: BlockType, facts: HardwareFacts) -> tuple[float, float, list[str], bool]:
    """(matched weight, possible weight, reasons, ruled_out) of one block."""
    got = possible = 0.0
    reasons: list[str] = []
    ruled_out = False

    def check(key: str, ok: bool, why: str) -> None:
        nonlocal got, possible, ruled_out
        possible += WEIGHTS[key]
        if ok:
            got += WEIGHTS[key]
        else:
            ruled_out = ruled_out or key in ("gpu_model", "gpu_count", "nvswitch")
        reasons.append(("match: " if ok else "differs: ") + why)

    want_gpus = block.gpu.count if block.gpu else 0
    if facts.gpus or want_gpus == 0:
        check("gpu_count", facts.gpu_count == want_gpus,
              f"{facts.gpu_count} GPU(s), block has {want_gpus}")
        if block.gpu and facts.gpus:
            models = [g.model for g in facts.gpus]
            ok = all(_norm(block.gpu.model) in _norm(m) for m in models)
            check("gpu_model", ok, f"GPU model {', '.join(models)} vs {block.gpu.model}")
    else:
        reasons.append("unknown: the BMC reports no GPUs")
    if facts.nvswitch_count is not None:
        check("nvswitch", (facts.nvswitch_count > 0) == block.nvswitch,
              f"{facts.nvswitch_count} NVSwitch(es), block "
              f"{'has' if block.nvswitch else 'has no'} NVSwitch")
    if facts.model:
        name = _norm(block.name)
        ok = name in _norm(facts.model) or _norm(facts.model) in name
        check("model", ok, f"chassis model {facts.model!r} vs block {block.name}")
    speeds = _data_port_speeds_gbps(facts)
    if speeds:
        want: Counter[float] = Counter()
        for nic in block.nics:
            want[float(nic.speed_gbps)] += nic.ports
        check("nics", speeds == want, "data ports " + _ports(speeds) + " vs block "
              + (_ports(want) or "none"))
    psus = [p for p in facts.psus if p.capacity_w]
    if psus and block.psu:
        ok = len(psus) == block.psu.count and all(
            abs((p.capacity_w or 0) - block.psu.rating_w) < 1 for p in psus)
        check("psus", ok, f"{len(psus)} PSU(s) of {psus[0].capacity_w:g} W vs "
              f"{block.psu.count} x {block.psu.rating_w:g} W")
    return got, possible, reasons, ruled_out


def _ports(c: Mapping[float, int]) -> str:
    return ", ".join(f"{n}x{s:g}G" for s, n in sorted(c.items()))


def fingerprint(facts: HardwareFacts, catalog: Mapping[str, BlockType]) -> Fingerprint:
    """The block these facts belong to, with a confidence and the reasons, or None."""
    ranked: list[tuple[float, str, list[str]]] = []
    for block in catalog.values():
        if block.kind is BlockKind.SWITCH:
            continue
        got, possible, reasons, ruled_out = score(block, facts)
        if ruled_out or possible == 0:
            continue
        ranked.append((got / possible, block.name, reasons))
    ranked.sort(key=lambda r: (-r[0], r[1]))
    candidates = tuple((name, round(conf, 2)) for conf, name, _ in ranked[:3])
    if not ranked:
        return Fingerprint(None, 0.0, ("no catalog block has this shape: "
                                       + describe(facts),), candidates)
    best_conf, best, reasons = ranked[0]
    if best_conf < MIN_CONFIDENCE:
        return Fingerprint(None, round(best_conf, 2),
                           (f"best match {best} only {best_conf:.0%}", *reasons), candidates)
    if len(ranked) > 1 and ranked[1][0] == best_conf:
        return Fingerprint(None, round(best_conf, 2),
                           (f"ambiguous: {best} and {ranked[1][1]} match equally "
                            f"({best_conf:.0%}); place it with --block", *reasons), candidates)
    return Fingerprint(best, round(best_conf, 2), tuple(reasons), candidates)


def describe(facts: HardwareFacts) -> str:
    gpus = ", ".join(f"{g.count}x {g.model}" for g in facts.gpus) or "no GPUs reported"
    return (f"{facts.vendor or '?'} {facts.model or '?'}, {gpus}, "
            f"{len(facts.nics)} NIC port(s), {len(facts.psus)} PSU(s)")
