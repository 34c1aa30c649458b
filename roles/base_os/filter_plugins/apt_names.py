"""apt's own names for a source's files in /var/lib/apt/lists, so base_os can tell whether
apt holds an index of the site mirror."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import unquote_to_bytes, urlsplit

# URItoFileName in apt-pkg/contrib/strutl.cc: the URI without its scheme and login, each
# byte of this set, a control or space or a byte above 0x7E quoted as %xx, then '/' as '_'
# (apt's URI class has already decoded the path's %xx and dropped an IPv6 host's brackets).
_QUOTED = frozenset(b'\\|{}[]<>"^~_=!@#$%&*')


def apt_list_name(uri: str) -> str:
    """http://mirror.site.internal:8080/ubuntu/dists/jammy ->
    mirror.site.internal:8080_ubuntu_dists_jammy."""
    parts = urlsplit(uri)
    host = parts.netloc.rpartition("@")[2].replace("[", "").replace("]", "")
    raw = host.encode() + unquote_to_bytes(parts.path.rstrip("/"))
    quoted = "".join(f"%{b:02x}" if b in _QUOTED or b <= 0x20 or b >= 0x7F else chr(b)
                     for b in raw)
    return quoted.replace("/", "_")


class FilterModule:
    """Ansible's filter plugin entry point."""

    def filters(self) -> dict[str, Callable[[str], str]]:
        return {"apt_list_name": apt_list_name}
