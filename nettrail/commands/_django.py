"""Django set-up for the commands that manage the webapp's database (token, up).

The collector library never imports webapp code at module level; these commands
load Django only when they run, with the same settings as the server.
"""

from __future__ import annotations

import os


def setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    import django

    django.setup()


def migrate() -> None:
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
