"""Settings for the test suite: the real settings with a throw-away data directory.

pytest-django imports settings before any conftest runs, so the temporary
``NETTRAIL_DATA`` must be chosen here (never the user's or /var/lib/nettrail).
A ``NETTRAIL_DATA`` or ``DATABASE_URL`` already in the environment is kept, so the
PostgreSQL pass of scripts/test works unchanged. Keep in sync with webapp/settings.py.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

if "NETTRAIL_DATA" not in os.environ:
    _tmp = tempfile.mkdtemp(prefix="nettrail-test-data-")
    os.environ["NETTRAIL_DATA"] = _tmp
    atexit.register(shutil.rmtree, _tmp, True)

from webapp.settings import *  # noqa: E402,F403

# The default PBKDF2 costs ~0.5 s per password: the cast's two users would dominate the
# suite's run time. Test users need no brute-force resistance.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
