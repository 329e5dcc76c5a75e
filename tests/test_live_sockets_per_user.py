"""A user has at most NETTRAIL_LIVE_SOCKETS_PER_USER live websockets open in one server
process: one more is accepted, told why and closed with 4429 (issue #33 item 4), and a
place frees when a socket closes. Real Channels stack."""

from __future__ import annotations

import pytest
from django.test import override_settings
from live_ws import connect, login_cookie

from webapp.traces.consumers import CLOSE_TOO_MANY_SOCKETS

pytestmark = pytest.mark.django_db(transaction=True)


@override_settings(NETTRAIL_LIVE_SOCKETS_PER_USER=2)
async def test_a_users_socket_beyond_the_cap_is_closed_with_4429_and_others_are_not_affected() -> None:
    alice = await login_cookie("alice")
    first = await connect(alice, {"host": "alpha"})
    second = await connect(alice, {"host": "alpha"})
    third = await connect(alice)
    assert await third.receive_json_from(timeout=10) == {"type": "error", "error": "at most 2 live sockets per user"}
    assert await third.receive_output(timeout=10) == {"type": "websocket.close", "code": CLOSE_TOO_MANY_SOCKETS}
    await third.disconnect()

    # Another user has places of its own; another session of the same user does not.
    bob = await connect(await login_cookie("bob"), {"host": "alpha"})
    other_session = await connect(await login_cookie("alice"))
    assert await other_session.receive_json_from(timeout=10) == {
        "type": "error",
        "error": "at most 2 live sockets per user",
    }
    assert await other_session.receive_output(timeout=10) == {"type": "websocket.close", "code": CLOSE_TOO_MANY_SOCKETS}
    await other_session.disconnect()

    await first.disconnect()  # a place frees
    fourth = await connect(alice, {"host": "alpha"})
    for comm in (second, fourth, bob):
        await comm.send_json_to({"unsubscribe": {"host": "alpha"}})
        assert await comm.receive_json_from(timeout=10) == {"type": "subscribed", "groups": []}
        await comm.disconnect()


async def test_a_socket_the_server_cancels_without_a_disconnect_frees_its_place() -> None:
    from asgiref.sync import sync_to_async
    from django.contrib.auth import get_user_model

    from webapp.traces import live_sockets

    comm = await connect(await login_cookie("carol"), {"host": "alpha"})
    user = await sync_to_async(get_user_model().objects.get)(username="carol")
    assert live_sockets.open_sockets(user.pk) == 1
    comm.future.cancel()  # what daphne does to an instance whose connection is gone
    await comm.wait(timeout=10)
    assert live_sockets.open_sockets(user.pk) == 0
