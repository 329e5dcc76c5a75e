"""``nettrail up``'s database step, run as the webapp's account: migrate, admin, local token.

Run by ``nettrail up`` as root in a child switched to the ``nettrail`` user (as the
webapp will run), so that the database files (SQLite's, with its journal and WAL) are
created and opened by that account alone: root never opens a file in the data
directory, where that account could have put a symlink to one of root's. Prints one
JSON line on stdout: ``{"password": NEW OR null, "token": T}`` (the pipe is root's).
Keep in sync with nettrail/commands/up.py.
"""

from __future__ import annotations

import json
import sys

MARK = "nettrail-up-prepared "  # starts the answer's line: migrations may print before it


def main() -> int:
    from nettrail.commands.up import prepare_database

    password, token = prepare_database()
    print(MARK + json.dumps({"password": password, "token": token}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
