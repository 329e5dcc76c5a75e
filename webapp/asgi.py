"""ASGI entry point: Django for HTTP, Channels for websockets.

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

from webapp.traces.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
