"""Login required for every view, unless the view is marked ``login_not_required``.

Django's LoginRequiredMiddleware redirects to the login page; API paths answer a
JSON 401 instead, since a program cannot follow a redirect to a form. Views that
authenticate otherwise (ingest's bearer token, the login page) opt out with
``django.contrib.auth.decorators.login_not_required``.
Keep in sync with tests/test_webapp_security.py (walks every URL anonymously).
"""

from __future__ import annotations

from django.contrib.auth import middleware
from django.http import HttpRequest, HttpResponseBase

from webapp.http import json_error

API_PREFIX = "/api/"


class LoginRequiredMiddleware(middleware.LoginRequiredMiddleware):
    def handle_no_permission(self, request: HttpRequest, view_func: object) -> HttpResponseBase:
        if request.path.startswith(API_PREFIX):
            return json_error(401, "login required")
        return super().handle_no_permission(request, view_func)
