"""Boot services for network installs: dnsmasq (DHCP by MAC, TFTP) and a small HTTP server
for the iPXE scripts and autoinstall data that `render.pxe` wrote.

dnsmasq runs as a child in the foreground with its own pid file and log; the HTTP server
is the standard library's, serving only the rendered boot files (read-only, GET/HEAD).
"""

from __future__ import annotations

import functools
import os
import pwd
import shutil
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

from provisioner.errors import ConfigError

# Debian's ipxe package: the loaders firmware without iPXE fetches over TFTP.
IPXE_DIRS = (Path("/usr/lib/ipxe"), Path("/usr/share/ipxe"))
IPXE_LOADERS = ("ipxe.efi", "undionly.kpxe")
SERVED = ("/ipxe/", "/autoinstall/")

LogFn = Callable[[str], None]


class _Handler(SimpleHTTPRequestHandler):
    """Serve the boot files only; one log line per request to the caller."""

    log_fn: LogFn = staticmethod(lambda _line: None)

    def send_head(self) -> Any:
        """GET and HEAD both come here: refuse anything but the boot files."""
        if not self.path.startswith(SERVED) or ".." in self.path:
            self.send_error(404)
            return None
        return super().send_head()

    def log_message(self, format: str, *args: Any) -> None:
        self.log_fn(f"http {self.client_address[0]} " + format % args)


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


def serve(root: Path, address: IPv4Address, http_port: int, *, dhcp: bool = True,
          log: LogFn | None = None) -> BootServer:
    """Start the HTTP server (and dnsmasq with root/dnsmasq.conf unless dhcp is False)."""
    conf = root / "dnsmasq.conf"
    if not conf.is_file():
        raise ConfigError(f"no {conf}", hint="run `provision pxe render` first")
    handler = functools.partial(type("Handler", (_Handler,), {
        "log_fn": staticmethod(log or (lambda _line: None))}), directory=str(root))
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
