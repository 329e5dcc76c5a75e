"""URL configuration: login/logout, the home page, ingest, and the apps present.

Every URL here is login-protected by webapp.middleware unless its view is marked
login_not_required (tests/test_webapp_security.py walks them all anonymously).
Optional apps (dashboard, read API, live) add their `urls.py` when they exist.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.templatetags.static import static
from django.urls import URLPattern, URLResolver, include, path
from django.views.generic import RedirectView

from webapp import views

urlpatterns: list[URLPattern | URLResolver] = [
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    # Browsers ask for /favicon.ico on their own; it is a static file, public like the others.
    path(
        "favicon.ico",
        login_not_required(RedirectView.as_view(url=static("dashboard/favicon.svg"), permanent=True)),
        name="favicon",
    ),
    path("", include("webapp.traces.urls")),
]
for _app in settings.OPTIONAL_APPS:
    try:
        urlpatterns.append(path("", include(f"{_app}.urls")))
    except ModuleNotFoundError as exc:
        if exc.name != f"{_app}.urls":
            raise
urlpatterns.append(path("", views.home, name="home"))
