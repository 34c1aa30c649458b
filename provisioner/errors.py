"""One exception hierarchy; each class carries the process exit code the CLI maps it to.

The core raises these and never exits; the CLI turns them into one clear line and the code.
Messages must never contain secrets: callers pass names and references, not values.
"""

from __future__ import annotations

import re
from enum import IntEnum
from typing import Any

# The last line of defence: whatever a message was built from, these never leave the tool.
# A login in a URL or an address (scheme://user:password@host, user:password@host,
# scheme://token@host) keeps its host; a key=value or "key": "value" pair whose key names a
# secret keeps its key. The value classes stop at quotes and backslashes, so a redacted JSON
# document is still JSON. Each match starts where a token starts (the lookbehinds) and a
# login is at most 256 characters a side, so a long line costs linear time.
_URL_LOGIN_RE = re.compile(
    r"(?P<scheme>(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://)[^\s/@\"'\\]+@")
_ADDRESS_LOGIN_RE = re.compile(
    r"(?<![^\s/@\"'\\:=(\[<,;])[^\s/@\"'\\:=(\[<,;]{1,256}"
    r":[^\s/@\"'\\]{1,256}@(?=[\w\[])")
_SECRET_PAIR_RE = re.compile(
    r"(?P<key>(?<![A-Za-z0-9_-])(?:[A-Za-z0-9_-]*[_-])?"
    r"(?:password|passwd|passphrase|pass|pwd|secret|token|api[_-]?key|access[_-]?key"
    r"|private[_-]?key|auth|authorization)\b\\?[\"']?\s*(?:=|:(?!//))\s*)"
    r"(?:(?P<quote>\\?[\"'])(?P<quoted>(?:(?!(?P=quote))(?:[^\\\n]|\\.))*)"
    r"|(?P<value>(?:(?:bearer|basic)\s+)?[^\s\"'\\,;&{}\[\]]+))", re.IGNORECASE)
_SECRET_FLAG_RE = re.compile(
    r"(?P<flag>--(?:password|passwd|token|secret|api-key)[= ])(?P<value>[^\s\"'\\]+)",
    re.IGNORECASE)
REDACTED = "***"


def redact(text: str) -> str:
    """`text` without credentials: URL and address logins, secret-named key=value pairs and
    --password-style options. Applied where messages leave the tool (terminal, JSON, the
    state store, --debug logs), whatever built them."""
    if not text:
        return text
    text = _URL_LOGIN_RE.sub(rf"\g<scheme>{REDACTED}@", text)
    text = _ADDRESS_LOGIN_RE.sub(f"{REDACTED}@", text)
    text = _SECRET_FLAG_RE.sub(rf"\g<flag>{REDACTED}", text)
    return _SECRET_PAIR_RE.sub(_pair, text)


def _pair(m: re.Match[str]) -> str:
    """One secret-named pair, its value redacted ("..." and "***" are placeholders, kept)."""
    value = m["quoted"] if m["quote"] else m["value"]
    kept = value if value.strip(".") == "" or value == REDACTED else REDACTED
    return m["key"] + (f"{m['quote']}{kept}" if m["quote"] else kept)


class ExitCode(IntEnum):
    """Documented exit codes (README "Exit codes")."""

    OK = 0
    INTERNAL = 1
    CONFIG = 2
    INVENTORY = 3
    BUDGET = 4
    BMC = 5
    RENDER = 6
    PLAYBOOK = 7
    STATE = 8
    NODES_FAILED = 9  # `provision up` finished, and at least one node failed (others went on)
    FABRIC = 10  # hosts and switches disagree on RoCE QoS, or a switch push failed
    UPGRADE_REFUSED = 11  # `upgrade plan/apply`: the bundle breaks a rule; nothing was touched
    FAILURE_BUDGET = 12  # `upgrade apply` stopped: --max-failures nodes failed their upgrade
    KUBE = 13  # the Kubernetes API refused or did not answer
    EXECUTION = 14  # an execution node is unreachable or unfit (`provision doctor`)
    INTERRUPTED = 130


class ProvisionerError(Exception):
    """Root of every error the tool reports to a user."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(self, message: str, *, hint: str | None = None, **context: Any) -> None:
        message, hint = redact(message), (redact(hint) if hint else hint)
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.context = context

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} (hint: {self.hint})"


class ConfigError(ProvisionerError):
    """Wrong command-line usage or tool configuration (not the inventory)."""

    exit_code = ExitCode.CONFIG


class InventoryError(ProvisionerError):
    """The site inventory cannot be loaded or is invalid; carries the findings."""

    exit_code = ExitCode.INVENTORY

    def __init__(self, message: str, *, findings: list[Any] | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.findings = findings or []


class BudgetError(ProvisionerError):
    """A rack is over its power, cooling or space budget."""

    exit_code = ExitCode.BUDGET


class BmcError(ProvisionerError):
    """A BMC operation failed; subclasses say how. `transient` errors are worth a retry."""

    exit_code = ExitCode.BMC
    transient: bool = False


class RenderError(ProvisionerError):
    exit_code = ExitCode.RENDER


class PlaybookError(ProvisionerError):
    exit_code = ExitCode.PLAYBOOK


class ExecutionError(ProvisionerError):
    """An execution node could not run (or finish) its share: unreachable, died, unfit."""

    exit_code = ExitCode.EXECUTION


class StateError(ProvisionerError):
    exit_code = ExitCode.STATE


class FabricError(ProvisionerError):
    """The RoCE fabric is inconsistent (host vs switch) or a switch operation failed."""

    exit_code = ExitCode.FABRIC


class UpgradeRefused(ProvisionerError):
    """`upgrade plan` found a rule the bundle breaks (CUDA release notes, Fabric Manager user
    guide, Kubernetes version-skew policy: upgrade/plan.py names them); carries them."""

    exit_code = ExitCode.UPGRADE_REFUSED

    def __init__(self, message: str, *, refusals: list[Any] | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.refusals = refusals or []


class KubeError(ProvisionerError):
    """The Kubernetes API answered with an error or not at all (never with a token)."""

    exit_code = ExitCode.KUBE

    def __init__(self, message: str, *, status: int | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.status = status


class Interrupted(ProvisionerError):
    exit_code = ExitCode.INTERRUPTED


class BmcUnreachable(BmcError):
    """No answer: connection refused, no route, DNS. Transient: BMCs reboot."""

    transient = True


class BmcTimeout(BmcError):
    """The BMC did not answer in time, or never reached the requested state."""

    transient = True


class BmcAuthError(BmcError):
    """Wrong user name or password, or not enough privilege. Never retried."""

    transient = False


class BmcUnsupported(BmcError):
    """The BMC cannot do what was asked (not in its allowable values, no such resource)."""

    transient = False


class BmcProtocolError(BmcError):
    """The BMC answered, but not in Redfish: not JSON, or JSON of the wrong shape. The
    endpoint is probably something else (a web UI, a proxy page). Never retried."""

    transient = False

    def __init__(self, message: str, *, status: int | None = None,
                 content_type: str | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.status = status
        self.content_type = content_type


class BmcRefused(BmcError):
    """The BMC answered with an error. Transient for 409 and 5xx, permanent otherwise."""

    def __init__(self, message: str, *, status: int | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.status = status
        self.transient = status is not None and (status == 409 or status >= 500)


class SecretError(ConfigError):
    """A credential reference cannot be resolved; the message names the reference only."""
