"""Prepares a scale-out database for tests/test_scale_out.py: migrate, N host tokens, a logged-in session.

Run as a script in the environment of the cluster under test (DATABASE_URL,
REDIS_URL, NETTRAIL_DATA); prints JSON: {"tokens": {host: token}, "session": key}.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")


def main(hosts: list[str]) -> None:
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    from webapp.traces.tokens import create_token

    call_command("migrate", verbosity=0, interactive=False)
    tokens = {host: create_token(host)[1] for host in hosts}
    user = get_user_model().objects.create_user("watcher", password="not-used-here")
    client = Client()
    client.force_login(user)
    print(json.dumps({"tokens": tokens, "session": client.cookies[settings.SESSION_COOKIE_NAME].value}))


if __name__ == "__main__":
    main(sys.argv[1:])
