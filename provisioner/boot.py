"""Boot services for network installs: dnsmasq (DHCP by MAC, TFTP) and a small HTTP server
for the iPXE scripts and autoinstall data that `render.pxe` wrote, and the installer that
`stage_iso` took from an Ubuntu live-server ISO (casper/vmlinuz, casper/initrd, the ISO).

dnsmasq runs as a child in the foreground with its own pid file and log; the HTTP server
is the standard library's, serving only the boot files (read-only, GET/HEAD), and a node's
autoinstall data (its private host key) only to that node's reserved address.
"""

from __future__ import annotations

import functools
import io
import os
import pwd
import re
import shutil
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from provisioner.errors import ConfigError

# Debian's ipxe package: the loaders firmware without iPXE fetches over TFTP.
IPXE_DIRS = (Path("/usr/lib/ipxe"), Path("/usr/share/ipxe"))
IPXE_LOADERS = ("ipxe.efi", "undionly.kpxe")
SERVED = ("/ipxe/", "/autoinstall/", "/ubuntu/")  # the URL prefixes the operator is told

# The allow-list: every file the HTTP server may hand out, relative to the boot root, as
# render.pxe and stage_iso write them. `owner` names the node a file belongs to: served to
# that node's reserved address only (its user-data carries its private SSH host key).
# cloud-init's NoCloud source fetches user-data, meta-data and vendor-data (and
# network-config) under the ds=nocloud-net;s= URL; a name that was not written is a 404.
_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}"
ALLOWED = (
    re.compile(rf"ipxe/{_NAME}\.ipxe"),
    re.compile(rf"autoinstall/(?P<owner>{_NAME})/(?:user-data|meta-data|vendor-data|"
               r"network-config)"),
    re.compile(r"ubuntu/[a-z]+/(?:vmlinuz|initrd|installer\.iso)"),
)
ISO_LINK = "installer.iso"  # the one served link: stage_iso links the operator's ISO
# A node's report from its installer's disk guard (install.py): POST /callback/<host>,
# from that node's address only, a short text.
CALLBACK = re.compile(rf"/callback/(?P<host>{_NAME})")
REPORT_MAX_BYTES = 4096

LogFn = Callable[[str], None]
# host -> the values of the placeholders its user-data carries (install.GRANT, TOKEN)
FillFn = Callable[[str], dict[str, str]]
ReportFn = Callable[[str, str], None]  # (host, the installer's report)


@dataclass(frozen=True)
class Served:
    """A request's file, decoded and checked: relative to the boot root, and its owner."""

    rel: str
    owner: str | None


def served(raw: str) -> Served | None:
    """The boot file a request target names, or None when it names anything else.

    The target is decoded first and every decoded segment checked before the allow-list
    is matched, so the ownership check and the file served read one and the same path: a
    `..` or `.` segment, encoded or not (%2e%2e), an empty segment, a backslash or a NUL
    never reaches a match."""
    path = urlsplit(raw).path
    try:
        decoded = unquote(path, errors="strict")
    except UnicodeDecodeError:
        return None
    if not decoded.startswith("/"):
        return None
    rel = decoded[1:]
    if any(seg in ("", ".", "..") or "\\" in seg or "\0" in seg for seg in rel.split("/")):
        return None
    for pattern in ALLOWED:
        match = pattern.fullmatch(rel)
        if match:
            return Served(rel, match.groupdict().get("owner"))
    return None


def _printable(text: str) -> str:
    """A request line as one harmless log line: no terminal escapes from a hostile client."""
    return "".join(c if c.isprintable() else "?" for c in text)


class _Handler(SimpleHTTPRequestHandler):
    """Serve the allow-listed boot files only; one log line per request to the caller."""

    log_fn: LogFn = staticmethod(lambda _line: None)
    owners: dict[str, str] = {}  # noqa: RUF012 - per server class: host -> its address
    fill: FillFn | None = None
    on_report: ReportFn | None = None

    def send_head(self) -> Any:
        """GET and HEAD both come here. The ownership check and the file served are both
        taken from the one decoded path `served` returns; anything off the allow-list, a
        directory, or a link out of the boot root (but the ISO's) is a 404."""
        found = served(self.path)
        if found is None:
            self.send_error(404)
            return None
        if found.owner is not None and self.owners.get(found.owner) != self.client_address[0]:
            self.send_error(403, "autoinstall data is served to its node only")
            return None
        root = Path(self.directory).resolve()
        file = root / found.rel
        inside = file.parent.resolve().is_relative_to(root) and (
            file.resolve().is_relative_to(root) or file.name == ISO_LINK)
        if not inside or not file.is_file():
            self.send_error(404)
            return None
        self.path = "/" + found.rel  # the checked path is the one the parent opens
        if found.owner is not None and file.name == "user-data":
            return self._user_data(found.owner, file)
        return super().send_head()

    def _user_data(self, host: str, file: Path) -> Any:
        """A node's user-data with its grant and boot token filled in as of now (nothing
        filled: no grant, which the disk guard reads as "refuse")."""
        text = file.read_text()
        values: dict[str, str] = {}
        if self.fill is not None:
            try:
                values = self.fill(host)
            except Exception as exc:  # the state store unreadable: serve without a grant
                self.log_fn(_printable(f"http {host}: no grant or boot token served ({exc})"))
        for placeholder, value in values.items():
            text = text.replace(placeholder, value)
        body = text.encode()
        self.send_response(200)
        self.send_header("Content-type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        return io.BytesIO(body)

    def do_POST(self) -> None:
        """A node's installer reports (its disk guard refused): recorded by on_report."""
        match = CALLBACK.fullmatch(urlsplit(self.path).path)
        if match is None or self.on_report is None:
            self.send_error(404)
            return
        host = match["host"]
        if self.owners.get(host) != self.client_address[0]:
            self.send_error(403, "a node reports for itself only")
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self.send_error(411)
            return
        if not 0 <= length <= REPORT_MAX_BYTES:
            self.send_error(413)
            return
        text = _printable(self.rfile.read(length).decode(errors="replace")).strip()
        self.on_report(host, text)
        self.log_fn(_printable(f"http {self.client_address[0]} {host} reported: {text}"))
        self.send_response(204)
        self.end_headers()

    def list_directory(self, path: Any) -> Any:
        """No directory is ever listed (send_head never reaches one; this is the backstop)."""
        self.send_error(404)
        return None

    def log_message(self, format: str, *args: Any) -> None:
        self.log_fn(_printable(f"http {self.client_address[0]} " + format % args))


@dataclass
class BootServer:
    root: Path
    address: IPv4Address
    http_port: int
    http: ThreadingHTTPServer
    dnsmasq: subprocess.Popen[bytes] | None = None
    missing_loaders: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.http.server_address[1]}"

    def stop(self) -> int | None:
        """Stop the HTTP server and dnsmasq (ours, by PID); dnsmasq's exit code."""
        self.http.shutdown()
        self.http.server_close()
        if self.dnsmasq is None:
            return None
        if self.dnsmasq.poll() is None:
            self.dnsmasq.terminate()
            try:
                self.dnsmasq.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.dnsmasq.kill()
                self.dnsmasq.wait(timeout=10)
        return self.dnsmasq.returncode


def _loaders(root: Path) -> list[str]:
    """Put the iPXE loaders under tftp/; the names not found."""
    tftp = root / "tftp"
    tftp.mkdir(parents=True, exist_ok=True)
    missing = []
    for name in IPXE_LOADERS:
        if (tftp / name).exists():
            continue
        src = next((d / name for d in IPXE_DIRS if (d / name).is_file()), None)
        if src is None:
            missing.append(name)
        else:
            shutil.copy(src, tftp / name)
    return missing


def _iso_file(iso: Any, name: str, dest: Path) -> None:
    """Copy one file out of an open pycdlib image (Rock Ridge, Joliet or plain ISO 9660
    names, whichever the image has) to dest, 0644."""
    tmp = dest.with_name(f".{dest.name}.tmp")
    for kind, path in (("rr_path", f"/{name}"), ("joliet_path", f"/{name}"),
                       ("iso_path", "/" + name.upper() + ";1")):
        try:
            with open(tmp, "wb") as fh:
                iso.get_file_from_iso_fp(fh, **{kind: path})
        except Exception:  # noqa: S112 - pycdlib raises its own for a missing name
            continue
        tmp.chmod(0o644)
        os.replace(tmp, dest)
        return
    tmp.unlink(missing_ok=True)
    raise ConfigError(f"the ISO has no {name}", hint="name an Ubuntu live-server ISO "
                      "(ubuntu-XX.04.N-live-server-amd64.iso)")


def stage_iso(iso_path: Path, dest: Path, version: str) -> str:
    """Take the installer from an Ubuntu live-server ISO into dest: casper/vmlinuz and
    casper/initrd extracted (a Python ISO 9660 reader, pycdlib), the ISO itself linked as
    installer.iso (served, not copied). The ISO must be the release `version` (22.04):
    checked against its .disk/info. Returns that line."""
    import pycdlib  # imported here: only `pxe serve --iso` reads an ISO

    if not iso_path.is_file():
        raise ConfigError(f"--iso {iso_path}: no such file")
    dest.mkdir(parents=True, exist_ok=True)
    iso = pycdlib.PyCdlib()
    try:
        iso.open(str(iso_path))
    except Exception as exc:
        raise ConfigError(f"--iso {iso_path}: not an ISO 9660 image ({exc})") from None
    try:
        _iso_file(iso, ".disk/info", dest / "disk-info")
        info = (dest / "disk-info").read_text(errors="replace").strip()
        if f" {version}" not in f" {info}":
            raise ConfigError(f"--iso {iso_path} is {info!r}, not Ubuntu {version}",
                              hint="software.os decides the release; name the ISO of it")
        for name in ("vmlinuz", "initrd"):
            _iso_file(iso, f"casper/{name}", dest / name)
    finally:
        iso.close()
    link = dest / "installer.iso"
    link.unlink(missing_ok=True)
    link.symlink_to(iso_path.resolve())
    return info


def serve(root: Path, address: IPv4Address, http_port: int, *, dhcp: bool = True,
          log: LogFn | None = None, owners: dict[str, str] | None = None,
          fill: FillFn | None = None, on_report: ReportFn | None = None) -> BootServer:
    """Start the HTTP server (and dnsmasq with root/dnsmasq.conf unless dhcp is False).
    `owners` (host -> address): who may fetch each node's autoinstall data; `fill`: what a
    node's user-data is given when fetched; `on_report`: where a node's report goes."""
    conf = root / "dnsmasq.conf"
    if not conf.is_file():
        raise ConfigError(f"no {conf}", hint="run `provision pxe render` first")
    handler = functools.partial(type("Handler", (_Handler,), {
        "log_fn": staticmethod(log or (lambda _line: None)),
        "owners": dict(owners or {}), "fill": staticmethod(fill) if fill else None,
        "on_report": staticmethod(on_report) if on_report else None}), directory=str(root))
    try:
        http = ThreadingHTTPServer((str(address), http_port), handler)
    except OSError as exc:
        raise ConfigError(f"cannot serve HTTP on {address}:{http_port}: {exc.strerror}",
                          hint="--server must be an address of this machine on the boot "
                          "network; pick a free --http-port") from None
    threading.Thread(target=http.serve_forever, daemon=True, name="pxe-http").start()
    server = BootServer(root=root, address=address, http_port=http_port, http=http,
                        missing_loaders=_loaders(root))
    if not dhcp:
        return server
    binary = shutil.which("dnsmasq")
    if binary is None:
        server.stop()
        raise ConfigError("dnsmasq is not installed", hint="apt-get install dnsmasq-base")
    logf = open(root / "dnsmasq.log", "ab")  # noqa: SIM115 - handed to the child
    try:
        server.dnsmasq = subprocess.Popen(
            # As the user who rendered the files: the state directory is 0700, and dnsmasq's
            # default (nobody) could not read the TFTP root under it.
            [binary, "--keep-in-foreground", f"--conf-file={conf}",
             f"--user={pwd.getpwuid(os.getuid()).pw_name}",
             f"--pid-file={root / 'dnsmasq.pid'}", "--log-facility=-"],
            stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    finally:
        logf.close()
    try:
        code = server.dnsmasq.wait(timeout=1.0)
    except subprocess.TimeoutExpired:
        return server  # still running after a second: it started
    server.stop()
    tail = (root / "dnsmasq.log").read_text(errors="replace").strip().splitlines()[-3:]
    raise ConfigError(f"dnsmasq exited at start ({code}): {' | '.join(tail)}",
                      hint="check --interface and that no other DHCP server runs there")
