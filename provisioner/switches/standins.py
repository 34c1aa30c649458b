"""What the lab's switch stand-ins can and cannot show, in words for the fabric commands.

The lab (lab/switch.py) stands FRRouting's vtysh in for each managed switch, driven in
netmiko's cisco_ios dialect; the site's own OS for that switch (Cumulus NVUE, Onyx, SONiC,
EOS) is not what answers. Its IOS-style rendering carries port descriptions only
(templates/switch/cisco_ios), so a lab run that pushes or reads it has compared or sent
none of the switch's RoCE settings: the commands say so, once per switch, in their notes.
Pure: reads the loaded site only.
"""

from __future__ import annotations

from collections.abc import Iterable

from provisioner import fabric
from provisioner.inventory.loader import LoadedSite
from provisioner.profile import Profile

# the dialect a stand-in speaks -> what answers, as the operator knows it
STAND_INS = {"cisco_ios": "FRRouting's vtysh (IOS-style CLI)"}
# a switch OS (management.os) -> its name in words
OS_NAMES = {"cumulus": "Cumulus Linux (NVUE)", "onyx": "NVIDIA Onyx", "sonic": "SONiC",
            "eos": "Arista EOS", "cisco_ios": "an IOS-style CLI"}
# what a RoCE switch's own rendering sets and the IOS-style stand-in's does not
ROCE_SETTINGS = "PFC, ECN, the DSCP map, DSCP trust and the port MTU"


def notes(loaded: LoadedSite, names: Iterable[str], prof: Profile, *, live: bool
          ) -> list[str]:
    """One line per switch of `names` that a stand-in answers for (or, in the lab, that
    none does): what it is, and what `fabric check --live` (live) or diff/push cannot
    compare or send on it."""
    specs = {s.hostname: s.nos for s in fabric.switch_specs(loaded)}
    out = []
    for name in sorted(set(names)):
        stand_in = prof.stand_ins.get(name)
        own = specs.get(name)
        if not stand_in:
            if prof.lab:
                out.append(f"lab: {name} has no stand-in (`provision lab up --ssh-hosts` "
                           "starts them): it cannot be reached from the lab")
            continue
        what = STAND_INS.get(stand_in, f"a stand-in speaking {stand_in}")
        if own is None or own == stand_in:
            out.append(f"lab: {name} is stood in by {what}, its own dialect: "
                       + ("it carries no RoCE QoS to compare" if live else
                          "its port descriptions are diffed and pushed as on the switch"))
            continue
        head = f"lab: {name} is stood in by {what}, not {OS_NAMES.get(own, own)}: "
        out.append(head + (
            f"{ROCE_SETTINGS} cannot be compared live; `fabric check` without --live "
            f"compares its rendered {own} config with the hosts" if live else
            f"its {own} config ({ROCE_SETTINGS}) is rendered and checked, not pushed; "
            "only port descriptions are diffed and pushed"))
    return out
