"""URL configuration: login/logout, the home page, ingest, and the apps present.

Every URL here is login-protected by webapp.middleware unless its view is marked
login_not_required (tests/test_webapp_security.py walks them all anonymously).
Optional apps (dashboard, read API, live) add their `urls.py` when they exist.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import URLPattern, URLResolver, include, path

from webapp import views

urlpatterns: list[URLPattern | URLResolver] = [
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("", include("webapp.traces.urls")),
]
for _app in settings.OPTIONAL_APPS:
    try:
        urlpatterns.append(path("", include(f"{_app}.urls")))
    except ModuleNotFoundError as exc:
        if exc.name != f"{_app}.urls":
            raise
urlpatterns.append(path("", views.home, name="home"))
