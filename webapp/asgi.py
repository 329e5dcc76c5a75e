"""ASGI entry point: Django for HTTP, Channels for websockets.

HTTP: an oversized ingest body is refused before Django spools it (bodylimit.py).
The websocket stack, outside in: origin check (AllowedHostsOriginValidator, so
another site's page cannot open a socket with the user's cookie), session auth,
URL router. Websocket routes live in webapp/traces/routing.py; the consumers check
``scope["user"]`` themselves. Served by daphne (webapp/serve.py).
"""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
# Django must be set up before anything imports models (the routing's consumers do).
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402

from webapp.bodylimit import IngestBodyLimit  # noqa: E402
from webapp.traces.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": IngestBodyLimit(django_asgi_app, lambda: int(settings.NETTRAIL_INGEST_MAX_BYTES)),
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
