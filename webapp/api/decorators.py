"""`api_view`: the one decorator of the read API (login, method, declared parameters, JSON errors).

A decorated view receives its parsed parameters as ``request.params`` and declares
what the OpenAPI schema says about it (summary, parameters, response description)
on ``view.api_spec``, which webapp/api/openapi.py reads. Keep in sync with docs/api.md.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.http import HttpRequest, HttpResponse

from webapp.api.params import BadParam, Param, parse
from webapp.http import json_error


class ApiRequest(HttpRequest):
    """What api_view adds to the request."""

    params: dict[str, Any]


@dataclass(frozen=True)
class ApiSpec:
    summary: str
    params: tuple[Param, ...] = ()
    returns: str = ""
    path_params: dict[str, str] = field(default_factory=dict)  # name -> description
    tag: str = "read"


View = Callable[..., HttpResponse]


def api_view(
    summary: str,
    params: Sequence[Param] = (),
    returns: str = "",
    path_params: dict[str, str] | None = None,
) -> Callable[[Callable[..., HttpResponse]], View]:
    spec = ApiSpec(summary, tuple(params), returns, dict(path_params or {}))

    def wrap(view: Callable[..., HttpResponse]) -> View:
        @functools.wraps(view)
        def inner(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                return json_error(401, "login required")
            if request.method not in ("GET", "HEAD"):
                return json_error(405, "use GET")
            try:
                request.params = parse(spec.params, request.GET)
                return view(request, *args, **kwargs)
            except BadParam as exc:
                return json_error(400, str(exc))

        inner.api_spec = spec  # type: ignore[attr-defined]
        return inner

    return wrap
