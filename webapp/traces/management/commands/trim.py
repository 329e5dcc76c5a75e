"""``manage.py trim``: apply the retention policy now (the server also does it periodically)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from webapp.traces.retention import Policy, trim


class Command(BaseCommand):
    help = "Delete records older than NETTRAIL_RETENTION_DAYS and beyond NETTRAIL_RETENTION_ROWS per table."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--days", type=int, help="override NETTRAIL_RETENTION_DAYS (0: no age limit)")
        parser.add_argument("--rows", type=int, help="override NETTRAIL_RETENTION_ROWS (0: no row limit)")

    def handle(self, *args: Any, **options: Any) -> None:
        base = Policy.from_settings()
        policy = Policy(
            days=base.days if options["days"] is None else options["days"],
            rows=base.rows if options["rows"] is None else options["rows"],
            batch=base.batch,
        )
        deleted = trim(policy)
        for table, count in sorted(deleted.items()):
            self.stdout.write(f"{table}: {count} deleted")
        self.stdout.write(f"trim: {sum(deleted.values())} rows deleted")
