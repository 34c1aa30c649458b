"""What an OS install of ours leaves and what it refuses to wipe: the install marker, the
boot token that ties an install to the run that booted it, and the installer's disk guard.

The guard runs as the first autoinstall early-command, before the installer probes or
touches a disk (Subiquity autoinstall reference: early-commands run "as soon as the
installer starts, in particular before probing for block and network devices", and "any
command exiting with a non-zero return code is considered an error and aborts the
install"). It reads every disk with `wipefs --no-act` (util-linux: lists signatures,
writes nothing): a partition table, a filesystem, an md or LVM member, swap. A disk that
holds any of them is an installed system; unless this node was named with --reinstall for
this run, the guard reports why to the boot server (POST /callback/<host>, recorded as an
event in the state store) and exits 1, which aborts the install with the disks untouched.

The grant and the boot token are not in the rendered files: `pxe serve` puts them into a
node's user-data when the node fetches it, from the state store's last boot intent for
that node (workflows/steps/bmc.py records it before the BMC is asked for anything). A grant
is served only while the run that named the node is running; without a state store the
guard refuses every disk that holds something.
"""

from __future__ import annotations

import secrets

MARKER = "/etc/provisioner-installed"  # written by the install's late-commands, and the lab
GRANT = "@@PROVISIONER_REINSTALL_GRANT@@"  # -> the boot token when --reinstall names the node
TOKEN = "@@PROVISIONER_BOOT_TOKEN@@"  # noqa: S105 - a placeholder: the last intent's token
REFUSED = "disk holds an installed system"  # how the guard's reason starts
CALLBACK = "/callback/"  # the boot server's path a node reports to: /callback/<host>
INTENT = "boot_intent"  # the state store's event kind: a boot about to be asked of the BMC
REPORTED = "install_refused"  # the event kind of a guard's report


def new_token() -> str:
    """A boot token: names one boot of one node (not a secret: it grants nothing alone)."""
    return secrets.token_hex(12)


def marker_line(hostname: str) -> str:
    """The marker's one line: the node and the boot that installed it."""
    return f"{hostname} boot={TOKEN}"


def token_of(marker: str) -> str | None:
    """The boot token a marker's first line carries (None: an older marker, or the lab's)."""
    for word in marker.split():
        if word.startswith("boot=") and len(word) > 5:
            return word[5:]
    return None


def refusal(held: str) -> str:
    """The reason a node ends failed with when the guard found something on its disks."""
    return f"{REFUSED} ({held}); name it with --reinstall or adopt it"


# POSIX sh, run by `sh -c` in the live installer (util-linux, python3: cloud-init's own).
# A disk the running system has mounted at / or /cdrom (a USB stick the installer runs
# from) is its medium, not a target. Nothing here writes to a disk.
_GUARD = r"""set -u
grant='@GRANT@'
report() {
  python3 -c 'import sys, urllib.request as u
u.urlopen(u.Request(sys.argv[1], data=sys.argv[2].encode(), method="POST"), timeout=15)' \
    '@URL@' "$1" || echo "provisioner: could not report to the boot server" >&2
}
held=''
for disk in $(lsblk -dnpo NAME,TYPE | awk '$2 == "disk" {print $1}'); do
  if lsblk -nlpo MOUNTPOINT "$disk" | grep -qx -e / -e /cdrom; then continue; fi
  for dev in $(lsblk -nlpo NAME "$disk"); do
    for sig in $(wipefs --no-act --noheadings --output TYPE "$dev" 2>/dev/null); do
      held="$held${held:+, }$dev: $sig"
    done
  done
done
if [ -z "$held" ]; then echo 'provisioner: every disk is blank'; exit 0; fi
if [ -n "$grant" ]; then
  echo "provisioner: named with --reinstall for this run: $held will be wiped"
  exit 0
fi
reason="@REFUSED@ ($held); name it with --reinstall or adopt it"
echo "provisioner: $reason" >&2
report "$reason"
exit 1
"""


def disk_guard(callback_url: str) -> str:
    """The early-command that refuses to install over a disk holding something."""
    if "'" in callback_url:
        raise ValueError("the callback URL cannot carry a quote")
    return (_GUARD.replace("@GRANT@", GRANT).replace("@URL@", callback_url)
            .replace("@REFUSED@", REFUSED))
