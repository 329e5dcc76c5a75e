"""What a host traces, chosen on the dashboard (webapp/dashboard/tracing.py): staff only,
CSRF-checked, checked values only, and answered to that host's token alone
(webapp/traces/ingest.py's "tracing" member).

Uses the fixed cast of webapp_cast.py: `admin` (staff), `viewer` (a plain login), host A
(token_a) and host B (token_b).
"""

# ruff: noqa: F811 -- pytest fixtures imported from webapp_cast are redefined as test arguments
from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from django.test import Client
from webapp_cast import Cast, cast, post, retransmit  # noqa: F401 (cast is a fixture)

from translators.tracing_request import TracingRequest
from webapp.traces import tracing
from webapp.traces.models import Host

pytestmark = pytest.mark.django_db
URL = "/status/tracing/"


def logged_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def answer_for(token: str, host: str, seq: int) -> Any:
    return post(Client(), token, [retransmit(host, seq, conn=f"conn-{host}")]).json()["tracing"]


def test_anonymous_users_are_sent_to_the_login_page(cast: Cast) -> None:
    for method in ("get", "post"):
        response = getattr(Client(), method)(URL, {"host": "host-a"})
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_staff_set_a_hosts_providers_and_only_that_hosts_collector_is_told(cast: Cast) -> None:
    assert answer_for(cast.token_a, "host-a", 1) is None  # nothing asked yet: the collector's own set
    response = logged_in(cast.admin).post(
        f"{URL}?host=host-a", {"providers": ["skb", "tcp", "skb-lifecycle"], "skb_sample": "64"}
    )
    assert response.status_code == 302 and response["Location"] == f"{URL}?host=host-a&saved=1"
    host = Host.objects.get(name="host-a")
    assert (host.tracing_providers, host.tracing_skb_sample, host.tracing_set_by) == (
        "tcp,skb,skb-lifecycle",
        64,
        "admin",
    )
    assert answer_for(cast.token_a, "host-a", 2) == {"providers": ["tcp", "skb", "skb-lifecycle"], "skb_sample": 64}
    assert answer_for(cast.token_b, "host-b", 1) is None  # another host's token never sees it
    page = logged_in(cast.admin).get(URL, {"host": "host-a", "saved": "1"}).content.decode()
    assert "tcp, skb, skb-lifecycle (skb-lifecycle: one buffer in 64)" in page and "set by admin" in page
    # back to the collector's own choice
    assert logged_in(cast.admin).post(f"{URL}?host=host-a", {"own": ""}).status_code == 302
    assert answer_for(cast.token_a, "host-a", 3) is None
    assert Host.objects.get(name="host-a").tracing_providers == ""


def test_staff_choose_the_lifecycle_windows_or_none_and_the_collector_is_told(cast: Cast) -> None:
    admin = logged_in(cast.admin)
    form = {"providers": ["tcp", "skb", "udp-calls", "skb-lifecycle"], "skb_sample": "64", "skb_window": " 0.20/2.0 "}
    assert admin.post(f"{URL}?host=host-a", form).status_code == 302
    assert Host.objects.get(name="host-a").tracing_skb_window == "0.2/2"  # its short form
    assert answer_for(cast.token_a, "host-a", 1) == {
        "providers": ["tcp", "skb", "skb-lifecycle", "udp-calls"], "skb_sample": 64, "skb_window": "0.2/2",
    }  # fmt: skip
    page = admin.get(URL, {"host": "host-a"}).content.decode()
    assert "(skb-lifecycle: one buffer in 64, in windows 0.2/2 s)" in page and 'value="0.2/2"' in page
    # 0: every moment (the full tracing switch, with skb_sample 1)
    assert admin.post(f"{URL}?host=host-a", {**form, "skb_sample": "1", "skb_window": "0"}).status_code == 302
    assert answer_for(cast.token_a, "host-a", 2) == {
        "providers": ["tcp", "skb", "skb-lifecycle", "udp-calls"], "skb_sample": 1, "skb_window": "0",
    }  # fmt: skip
    assert "(skb-lifecycle: one buffer in 1, all the time)" in admin.get(URL, {"host": "host-a"}).content.decode()
    # empty: the collector's own windows, and the answer does not name them
    assert admin.post(f"{URL}?host=host-a", {**form, "skb_window": ""}).status_code == 302
    assert "skb_window" not in answer_for(cast.token_a, "host-a", 3)


def test_a_plain_login_may_look_but_not_change(cast: Cast) -> None:
    tracing.set_request(cast.host_a, TracingRequest(("tcp", "skb")), "admin")
    viewer = logged_in(cast.viewer)
    page = viewer.get(URL, {"host": "host-a"}).content.decode()
    assert "Only staff may change" in page and "tcp, skb" in page and 'id="tracing-form"' not in page
    response = viewer.post(f"{URL}?host=host-a", {"own": ""})
    assert response.status_code == 403
    assert answer_for(cast.token_a, "host-a", 1) == {"providers": ["tcp", "skb"], "skb_sample": None}


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({}, "Choose at least one provider, or the collector"),
        ({"providers": ["tcp", "kprobe-everything"]}, "Select a valid choice. kprobe-everything"),
        ({"providers": ["tcp"], "skb_sample": "0"}, "greater than or equal to 1"),
        ({"providers": ["tcp"], "skb_sample": str(2**40)}, "less than or equal to"),
        ({"providers": ["tcp"], "skb_sample": "many"}, "Enter a whole number"),
        ({"providers": ["tcp"], "skb_window": "5/1"}, "skb_window: 0 (all the time) or --skb-window &#x27;5/1&#x27;"),
        ({"providers": ["tcp"], "skb_window": "often"}, "use OPEN/EVERY in seconds"),
        ({"providers": ["tcp"], "skb_window": "0.2/" + "2" * 40}, "at most 32 characters"),
        ({"providers": ["tcp"], "skb_window": "nan/inf"}, "OPEN/EVERY in seconds with 0.05"),
    ],
)
def test_absurd_values_are_refused_with_a_message_and_change_nothing(
    cast: Cast, data: dict[str, Any], error: str
) -> None:
    response = logged_in(cast.admin).post(f"{URL}?host=host-a", data)
    assert response.status_code == 200 and error in response.content.decode()
    assert answer_for(cast.token_a, "host-a", 1) is None


def test_a_post_without_the_csrf_token_is_refused(cast: Cast) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(cast.admin)
    assert client.post(f"{URL}?host=host-a", {"providers": ["tcp"]}).status_code == 403
    assert answer_for(cast.token_a, "host-a", 1) is None


def test_an_unknown_host_is_not_found(cast: Cast) -> None:
    assert logged_in(cast.admin).get(URL, {"host": "no-such-host"}).status_code == 404
    assert logged_in(cast.admin).post(f"{URL}?host=no-such-host", {"providers": ["tcp"]}).status_code == 404


def test_a_row_edited_to_nonsense_asks_for_nothing(cast: Cast) -> None:
    Host.objects.filter(name="host-a").update(tracing_providers="tcp,bogus")
    assert answer_for(cast.token_a, "host-a", 1) is None


def json_schema(openapi: Any) -> Any:
    """An OpenAPI 3.0 schema as JSON Schema: `nullable` becomes a null type."""
    if isinstance(openapi, list):
        return [json_schema(v) for v in openapi]
    if not isinstance(openapi, dict):
        return openapi
    out = {k: json_schema(v) for k, v in openapi.items() if k != "nullable"}
    if openapi.get("nullable"):
        out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    return out


def test_ingest_answers_match_the_published_schema(cast: Cast) -> None:
    schema = logged_in(cast.viewer).get("/api/schema").json()
    answer = schema["paths"]["/api/ingest"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    validator = jsonschema.Draft202012Validator(json_schema(answer))
    validator.validate(post(Client(), cast.token_a, [retransmit("host-a", 1)]).json())  # tracing: null
    tracing.set_request(cast.host_a, TracingRequest(("tcp", "skb-lifecycle"), 64), "admin")
    validator.validate(post(Client(), cast.token_a, [retransmit("host-a", 2)]).json())
    with pytest.raises(jsonschema.ValidationError):  # the check can fail
        validator.validate({"stored": 1, "duplicates": 0, "tracing": {"providers": ["kprobes"], "skb_sample": 0}})


def test_the_django_admin_shows_the_request_but_cannot_change_it(cast: Cast) -> None:
    """Unchecked edits would bypass the form's checks and its record of who set it."""
    tracing.set_request(cast.host_a, TracingRequest(("tcp",)), "admin")
    client = logged_in(cast.admin)
    url = f"/admin/traces/host/{cast.host_a.pk}/change/"
    page = client.get(url).content.decode()
    assert 'name="tracing_providers"' not in page and '<div class="readonly">tcp</div>' in page
    assert client.post(url, {"name": "host-a", "tracing_providers": "ip,tcpdebug"}).status_code == 302
    assert Host.objects.get(pk=cast.host_a.pk).tracing_providers == "tcp"
