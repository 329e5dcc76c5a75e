"""Where nettrail keeps its state, and the secret key generated there once.

The data directory (``NETTRAIL_DATA``) holds the SQLite database and ``secret_key``.
Default: ``/var/lib/nettrail`` for root (the appliance install), otherwise
``$XDG_DATA_HOME/nettrail`` (``~/.local/share/nettrail``). ``nettrail up`` hands the
directory to the unprivileged webapp user. Keep in sync with docs/webapp.md.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

SYSTEM_DATA_DIR = Path("/var/lib/nettrail")
SECRET_KEY_FILE = "secret_key"
DB_FILE = "nettrail.sqlite3"


def default_data_dir() -> Path:
    if os.geteuid() == 0:
        return SYSTEM_DATA_DIR
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "nettrail"


def data_dir() -> Path:
    given = os.environ.get("NETTRAIL_DATA")
    return Path(given).expanduser().absolute() if given else default_data_dir()


def ensure_data_dir(path: Path) -> Path:
    # 0750: the database and key are nobody else's business.
    path.mkdir(mode=0o750, parents=True, exist_ok=True)
    return path


def load_or_create_secret_key(path: Path) -> str:
    """Read the key, or create it once with mode 0600.

    Written to a private temporary file then hard-linked into place, so a second
    process starting at the same moment sees either no key or the whole key.
    """
    key_path = path / SECRET_KEY_FILE
    if key_path.exists():
        return key_path.read_text().strip()
    tmp = path / f".{SECRET_KEY_FILE}.{os.getpid()}"
    tmp.unlink(missing_ok=True)  # one a killed start left (unlink never follows a symlink)
    # O_EXCL|O_NOFOLLOW: a symlink planted under that name is refused, never written through
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_urlsafe(50) + "\n")
    try:
        os.link(tmp, key_path)
    except FileExistsError:
        pass  # another process won the race; use its key
    finally:
        tmp.unlink()
    return key_path.read_text().strip()
