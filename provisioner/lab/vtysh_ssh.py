"""An SSH server on 127.0.0.1 whose shell is FRRouting's vtysh (a real router CLI for netmiko):
the lab's stand-in switch (lab/switch.py) and the FRR integration test's peer.

usage: python -m provisioner.lab.vtysh_ssh PORT VTY_SOCKET_DIR CONFIG_DIR PASSWORD_FILE
Login admin with the password in PASSWORD_FILE (a 0600 file; never on the command line).
Each session runs `vtysh --vty_socket DIR --config_dir DIR` on a pty, so it talks to the
FRR daemons started for it (in their own network namespace). Twisted conch is used because
the lab has no sshd of its own for this; nothing here listens beyond 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import fcntl
import struct
import sys
import termios
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import rsa
from twisted.conch import avatar
from twisted.conch.checkers import InMemorySSHKeyDB  # noqa: F401 - conch registers adapters
from twisted.conch.ssh import connection, factory, keys, session, userauth
from twisted.cred import checkers, portal
from twisted.internet import reactor
from twisted.python import components
from zope.interface import implementer

ARGV: list[str] = []


class Avatar(avatar.ConchUser):
    def __init__(self, username: bytes) -> None:
        super().__init__()
        self.username = username
        self.channelLookup[b"session"] = session.SSHSession


@implementer(session.ISession)
class Session:
    def __init__(self, av: Avatar) -> None:
        self.proc: Any = None
        self.window: Any = None

    def getPty(self, term: bytes, window: Any, modes: Any) -> None:
        self.window = window  # (rows, cols, xpixel, ypixel), as a real sshd honours it

    def openShell(self, proto: Any) -> None:
        self.proc = reactor.spawnProcess(  # type: ignore[attr-defined]
            proto, ARGV[0], ARGV, {"TERM": "vt100", "PATH": "/usr/bin:/bin"}, usePTY=True)
        if self.window is not None:
            self.windowChanged(self.window)

    def execCommand(self, proto: Any, cmd: bytes) -> None:
        raise NotImplementedError("shell only")

    def windowChanged(self, size: Any) -> None:
        # netmiko asks for 511 columns; without this the pty stays at 80 and a long command
        # echoes wrapped, which a real switch's sshd would not do
        rows, cols = int(size[0]), int(size[1])
        with contextlib.suppress(OSError, AttributeError):
            fcntl.ioctl(self.proc.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def eofReceived(self) -> None:
        if self.proc is not None:
            self.proc.closeStdin()

    def closed(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(Exception):  # already gone
                self.proc.signalProcess("HUP")


components.registerAdapter(Session, Avatar, session.ISession)


@implementer(portal.IRealm)
class Realm:
    def requestAvatar(self, avatar_id: bytes, mind: Any, *interfaces: Any) -> Any:
        return interfaces[0], Avatar(avatar_id), lambda: None


def main(port: int, vty_dir: str, config_dir: str, password_file: str) -> None:
    serve(port, ["/usr/bin/vtysh", "--vty_socket", vty_dir, "--config_dir", config_dir],
          password_file)


def serve(port: int, argv: list[str], password_file: str) -> None:
    """Serve `argv` as the login shell on 127.0.0.1:port (tests reuse it with bash)."""
    ARGV[:] = argv
    key = keys.Key(rsa.generate_private_key(public_exponent=65537, key_size=2048))
    f = factory.SSHFactory()
    f.publicKeys = {b"ssh-rsa": key.public()}
    f.privateKeys = {b"ssh-rsa": key}
    f.services = {b"ssh-userauth": userauth.SSHUserAuthServer,
                  b"ssh-connection": connection.SSHConnection}
    f.portal = portal.Portal(Realm(), [
        checkers.InMemoryUsernamePasswordDatabaseDontUse(
            admin=Path(password_file).read_text().strip().encode())])
    reactor.listenTCP(port, f, interface="127.0.0.1")  # type: ignore[attr-defined]
    print(f"ready {port}", flush=True)
    reactor.run()  # type: ignore[attr-defined]


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4])
