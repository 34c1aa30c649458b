"""Secrets: resolved from references at run time, held in a type that will not print itself.

A `Secret` never shows its value in repr/str/format, cannot be pickled, and the only way to
read it is `reveal()`, called at the edge that hands it to a protocol library. What leaks
past that anyway is caught on the way out: `errors.redact` on every message, and
`RedactingStream` under the console.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, NoReturn

from provisioner.errors import SecretError, redact
from provisioner.inventory.models import SecretRef

VAULT_PASSWORD_FILE_ENV = "PROVISION_VAULT_PASSWORD_FILE"  # noqa: S105 - a variable name


class Secret:
    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)

    def __reduce__(self) -> NoReturn:
        raise TypeError("a Secret cannot be pickled")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


def _check_private(path: Path, what: str) -> None:
    try:
        st = path.stat()
    except OSError as exc:
        raise SecretError(f"{what}: cannot read {path}: {exc.strerror}",
                          hint="create the file, readable by you only (chmod 600)") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SecretError(
            f"{what}: {path} has mode {stat.S_IMODE(st.st_mode):04o}; others can read it",
            hint=f"chmod 600 {path}")


def _read_private(path: Path, what: str) -> str:
    _check_private(path, what)
    return path.read_text().rstrip("\n")


def resolve(ref: SecretRef, env: Mapping[str, str], base_dir: Path) -> Secret:
    """The secret a reference points at. `env` is passed in: the core never reads os.environ."""
    if ref.env:
        value = env.get(ref.env)
        if not value:
            raise SecretError(f"environment variable {ref.env} is not set",
                              hint=f"export {ref.env}=... before running, or use a 0600 file")
        return Secret(value)
    if ref.file:
        path = Path(ref.file)
        if not path.is_absolute():
            path = base_dir / path
        return Secret(_read_private(path, f"secret file {ref.file}"))
    assert ref.vault is not None
    return Secret(_vault(ref.vault, env, base_dir))


def _vault(spec: str, env: Mapping[str, str], base_dir: Path) -> str:
    """`vault: FILE#KEY`: KEY of an ansible-vault encrypted YAML mapping in FILE."""
    file_part, _, key = spec.partition("#")
    if not key:
        raise SecretError(f"vault reference '{spec}' has no key",
                          hint="write vault: secrets.yml#bmc_password")
    pw_file = env.get(VAULT_PASSWORD_FILE_ENV)
    if not pw_file:
        raise SecretError(f"vault reference '{spec}' needs ${VAULT_PASSWORD_FILE_ENV}",
                          hint="point it at a 0600 file holding the vault password")
    # Imported here: ansible is heavy and only vault users need it.
    import yaml
    from ansible.parsing.vault import VaultLib, VaultSecret

    password = _read_private(Path(pw_file), "vault password file").encode()
    path = Path(file_part)
    if not path.is_absolute():
        path = base_dir / path
    try:
        plain = VaultLib([("default", VaultSecret(password))]).decrypt(path.read_bytes())
    except OSError as exc:
        raise SecretError(f"vault file {file_part}: {exc.strerror}") from None
    except Exception:  # ansible raises AnsibleError subclasses; hide any detail
        raise SecretError(f"vault file {file_part} could not be decrypted",
                          hint="check the vault password file") from None
    try:
        data = yaml.safe_load(plain)
    except yaml.YAMLError:  # its message quotes the offending line: the secret itself
        raise SecretError(f"vault file {file_part}: the decrypted text is not YAML",
                          hint="quote the value in the vault (ansible-vault edit), e.g. "
                          "key: 'value'") from None
    if not isinstance(data, dict) or key not in data:
        raise SecretError(f"vault file {file_part} has no key '{key}'")
    return str(data[key])


def write_private(path: Path, text: str) -> None:
    """Write a file readable by its owner only, never briefly wider: the text goes to a new
    0600 file in the same directory, which then replaces `path` in one rename. (Opening an
    existing file keeps its mode: a 0644 file would be readable while it is rewritten.)"""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:  # mkstemp creates the file 0600
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class RedactingStream(io.TextIOBase):
    """A text stream that redacts what it writes, to the current sys.stdout or sys.stderr
    (looked up on each write, as rich does, so a replaced stream is followed)."""

    def __init__(self, stream: Callable[[], IO[str]]) -> None:
        super().__init__()
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream().write(redact(text))
        return len(text)

    def flush(self) -> None:
        self._stream().flush()

    def isatty(self) -> bool:
        return self._stream().isatty()

    def fileno(self) -> int:
        return self._stream().fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._stream(), "encoding", None) or "utf-8"
