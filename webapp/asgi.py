"""ASGI entry point: Django for HTTP, Channels for websockets.

HTTP: ``RefuseEarly`` answers from the request head, before Django reads a body:
anonymous requests with a body (everything but the login forms and token-authenticated
ingest), bodies over the path's limit by Content-Length, and bodies sent without a
length cut at the limit (webapp/gate.py, webapp/refuse_early.py; under daphne,
webapp/daphne_gate.py applies the same policy below this layer).
The websocket stack, outside in: exact origin check (scheme, host and port of the
page that opens the socket, webapp/ws_origin.py), session auth, URL router.
Websocket routes live in webapp/traces/routing.py; the consumers check
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

from webapp.refuse_early import RefuseEarly  # noqa: E402
from webapp.traces.routing import websocket_urlpatterns  # noqa: E402
from webapp.ws_origin import SameOriginValidator  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": RefuseEarly(django_asgi_app),
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
