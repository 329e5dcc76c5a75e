"""``nettrail token create|list|revoke``: the per-host ingest tokens of the local webapp.

``create HOSTNAME`` prints a new token once (only its sha256 is stored); collectors
send it as ``--token``. ``list`` shows prefixes, never tokens. ``revoke PREFIX``
deletes the tokens starting with PREFIX. Works on the database of NETTRAIL_DATA /
DATABASE_URL, like the server. Keep in sync with webapp/traces/tokens.py, docs/webapp.md.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("token", help="create, list or revoke per-host ingest tokens")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="create a token for HOSTNAME and print it once")
    create.add_argument("hostname", help="host the token may write records for (its records' host_id)")
    create.add_argument("--label", default="", help="a note shown by `token list`")
    actions.add_parser("list", help="list tokens (prefix, host, created, last used)")
    revoke = actions.add_parser("revoke", help="delete the tokens whose prefix starts with PREFIX")
    revoke.add_argument("prefix", help="token prefix as shown by `token list` (at least 6 characters)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from nettrail.commands._django import migrate, setup_django

    setup_django()
    migrate()
    action: int = {"create": _create, "list": _list, "revoke": _revoke}[args.action](args)
    return action


def _create(args: argparse.Namespace) -> int:
    from webapp.traces.tokens import create_token

    name = args.hostname.strip()
    if not name or len(name) > 255:
        print("nettrail token: HOSTNAME must be 1 to 255 characters", file=sys.stderr)
        return 2
    try:
        _, raw = create_token(name, label=args.label)
    except ValueError as exc:
        print(f"nettrail token: {exc}", file=sys.stderr)
        return 2
    print(raw)
    print(f"nettrail token: created for host {name!r}; shown once, store it now", file=sys.stderr)
    return 0


def _list(args: argparse.Namespace) -> int:
    from webapp.traces.models import IngestToken

    print(f"{'PREFIX':<14}{'HOST':<24}{'CREATED':<22}{'LAST USED':<22}LABEL")
    for row in IngestToken.objects.select_related("host").order_by("host__name", "created"):
        used = row.last_used.strftime("%Y-%m-%d %H:%M:%S") if row.last_used else "never"
        print(f"{row.prefix:<14}{row.host.name:<24}{row.created:%Y-%m-%d %H:%M:%S}   {used:<22}{row.label}")
    return 0


def _revoke(args: argparse.Namespace) -> int:
    from webapp.traces.tokens import revoke

    if len(args.prefix) < 6:
        print("nettrail token revoke: give at least 6 characters of the prefix", file=sys.stderr)
        return 2
    count = revoke(args.prefix)
    if count == 0:
        print(f"nettrail token revoke: no token starts with {args.prefix!r}", file=sys.stderr)
        return 1
    print(f"revoked {count} token(s)")
    return 0
