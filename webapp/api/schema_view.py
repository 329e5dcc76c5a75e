"""`/api/schema`: the OpenAPI document (login required, like every API URL)."""

from __future__ import annotations

from django.http import HttpResponse, JsonResponse

from webapp.api.decorators import ApiRequest, api_view
from webapp.api.openapi import build_schema


@api_view("This OpenAPI 3 document", returns="OpenAPI 3 JSON")
def schema(request: ApiRequest) -> HttpResponse:
    return JsonResponse(build_schema())
