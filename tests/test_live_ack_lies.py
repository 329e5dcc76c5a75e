"""The live websocket closes a client that acknowledges what it was never sent (4400):
records message ids are unguessable, so a client that does not read cannot keep the
server sending to it by acknowledging blindly (issue #33 item 4). Real Channels stack."""

from __future__ import annotations

import pytest
from django.test import override_settings
from live_ws import BIG_LAYER, batch, connect, login_cookie, members, records

from webapp.traces.consumers import CLOSE_BAD_ACK, host_group

pytestmark = pytest.mark.django_db(transaction=True)
LIE = {"type": "error", "error": "ack names no records message sent on this socket"}


async def assert_closed_as_liar(comm) -> None:
    assert await comm.receive_json_from(timeout=10) == LIE
    assert await comm.receive_output(timeout=10) == {"type": "websocket.close", "code": CLOSE_BAD_ACK}
    assert members(host_group("alpha")) == 0  # it left its groups at once: nothing more is kept for it


async def test_an_ack_far_beyond_what_was_sent_closes_the_socket_with_4400() -> None:
    comm = await connect(await login_cookie("liar"), {"host": "alpha"})
    await batch(host_group("alpha"), records("alpha", 0, 3))
    message = await comm.receive_json_from(timeout=10)
    assert message["type"] == "records"
    await comm.send_json_to({"ack": 10**12})
    await assert_closed_as_liar(comm)


async def test_an_ack_before_any_records_message_closes_the_socket_with_4400() -> None:
    comm = await connect(await login_cookie("liar"), {"host": "alpha"})
    await comm.send_json_to({"ack": 1})
    await assert_closed_as_liar(comm)


async def test_acknowledging_the_next_id_before_it_was_sent_closes_the_socket_with_4400() -> None:
    comm = await connect(await login_cookie("liar"), {"host": "alpha"})
    await batch(host_group("alpha"), records("alpha", 0, 3))
    message = await comm.receive_json_from(timeout=10)
    await comm.send_json_to({"ack": message["id"] + 1})
    await assert_closed_as_liar(comm)


async def test_after_the_lie_further_records_and_messages_get_nothing() -> None:
    comm = await connect(await login_cookie("liar"), {"host": "alpha"})
    await comm.send_json_to({"ack": 7})
    await assert_closed_as_liar(comm)
    await comm.send_json_to({"subscribe": {"host": "alpha"}})
    await comm.send_json_to({"ack": 10**12})
    await batch(host_group("alpha"), records("alpha", 0, 3))
    assert await comm.receive_nothing(timeout=0.3)
    await comm.disconnect()


@override_settings(CHANNEL_LAYERS=BIG_LAYER)
async def test_acknowledging_an_id_again_changes_nothing_and_records_keep_coming() -> None:
    comm = await connect(await login_cookie("reader"), {"host": "alpha"})
    await batch(host_group("alpha"), records("alpha", 0, 3))
    first = await comm.receive_json_from(timeout=10)
    await comm.send_json_to({"ack": first["id"]})
    await comm.send_json_to({"ack": first["id"]})
    await comm.send_json_to({"ack": 0})
    await batch(host_group("alpha"), records("alpha", 3, 3))
    second = await comm.receive_json_from(timeout=10)
    assert [r["seq"] for r in second["records"]] == [3, 4, 5]
    await comm.send_json_to({"ack": second["id"]})
    assert await comm.receive_nothing(timeout=0.3)
    await comm.disconnect()


@override_settings(CHANNEL_LAYERS=BIG_LAYER)
async def test_records_message_ids_increase_by_steps_a_client_cannot_predict() -> None:
    comm = await connect(await login_cookie("reader"), {"host": "alpha"})
    ids = []
    for start in range(0, 8, 2):
        await batch(host_group("alpha"), records("alpha", start, 2))
        message = await comm.receive_json_from(timeout=10)
        assert [r["seq"] for r in message["records"]] == [start, start + 1]
        ids.append(message["id"])
        await comm.send_json_to({"ack": message["id"]})
    assert ids == sorted(set(ids))  # increasing: an ack stays cumulative
    assert [b - a for a, b in zip(ids, ids[1:], strict=False)] != [1, 1, 1]  # 1 in 2**60 to fail by chance
    assert all(i < 2**53 for i in ids)  # exact in a JavaScript number
    await comm.disconnect()
