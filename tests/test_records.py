"""The record schema: wire round trips, construction checks, batch errors, and a schema lint.

The lint walks describe() of every record kind (and nested Structs) in the spirit of
libxo's xolint and style.md: every field documented, lower-case snake_case names made of
full words or known protocol abbreviations, units in the names of sub-second times, no
"2" suffixes except FreeBSD's t_flags2, one type per name across kinds.
Keep in sync with: translators/records.py and tests/record_samples.py.
"""

from __future__ import annotations

import json
import re
import typing
from collections import defaultdict
from typing import Any

import msgspec
import pytest
from record_samples import full_record, kind_of, minimal_record

from translators.records import (
    RECORD_TYPES,
    FieldDesc,
    Record,
    decode_batch,
    describe,
    from_json,
    from_msgpack,
    to_builtins,
    to_json,
    to_msgpack,
)

# --- round trips -----------------------------------------------------------------------------


@pytest.mark.parametrize("cls", RECORD_TYPES, ids=kind_of)
def test_every_record_type_round_trips_through_json_and_msgpack(cls: type[Record]) -> None:
    for rec in (full_record(cls), minimal_record(cls)):
        assert from_json(to_json(rec)) == rec
        assert from_msgpack(to_msgpack(rec)) == rec
        assert type(from_json(to_json(rec))) is cls
        assert json.loads(to_json(rec))["kind"] == kind_of(cls)


@pytest.mark.parametrize("cls", RECORD_TYPES, ids=kind_of)
def test_the_full_sample_sets_every_optional_field(cls: type[Record]) -> None:
    rec = full_record(cls)
    unset = [d.name for d in describe(cls) if getattr(rec, d.name) is None]
    assert unset == []


def test_a_batch_of_every_kind_decodes_in_order() -> None:
    records = [full_record(cls) for cls in RECORD_TYPES]
    assert decode_batch(msgspec.json.encode(records), "json") == records
    assert decode_batch(msgspec.msgpack.encode(records), "msgpack") == records


# --- construction checks ---------------------------------------------------------------------


def wrong_value(d: FieldDesc) -> Any:
    """A value of the wrong type for the field."""
    if d.type is str or d.type is bytes:
        return 5
    if d.type is list:
        return "not a list"
    if d.type is dict:
        return ["not", "a", "dict"]
    return "not a number" if d.type in (int, float) else 1  # bool and Structs reject an int


@pytest.mark.parametrize("cls", RECORD_TYPES, ids=kind_of)
def test_construction_rejects_a_wrong_type_naming_the_field(cls: type[Record]) -> None:
    base = to_builtins_kwargs(full_record(cls))
    for d in describe(cls):
        with pytest.raises(TypeError) as info:
            cls(**{**base, d.name: wrong_value(d)})
        assert str(info.value).startswith(f"{kind_of(cls)}.{d.name}: expected "), d.name


def test_construction_rejects_a_bool_where_an_int_belongs() -> None:
    from translators.records import LossReport

    with pytest.raises(TypeError, match=r"^loss_report\.lost: expected int, got bool"):
        full_record(LossReport, lost=True)


@pytest.mark.parametrize("cls", RECORD_TYPES, ids=kind_of)
def test_construction_rejects_values_outside_the_choices(cls: type[Record]) -> None:
    base = to_builtins_kwargs(full_record(cls))
    checked = 0
    for d in describe(cls):
        if d.choices:
            with pytest.raises(ValueError, match=rf"^{kind_of(cls)}\.{d.name}: 'BOGUS' is not one of "):
                cls(**{**base, d.name: "BOGUS"})
            checked += 1
    assert checked >= 1  # every kind has at least `provider`


def to_builtins_kwargs(rec: Record) -> dict[str, Any]:
    return {f: getattr(rec, f) for f in rec.__struct_fields__}


@pytest.mark.parametrize("content_type", ["json", "msgpack"])
def test_decode_batch_names_the_index_and_field_of_a_bad_record(content_type: str) -> None:
    encode = msgspec.json.encode if content_type == "json" else msgspec.msgpack.encode
    decode = msgspec.json.decode if content_type == "json" else msgspec.msgpack.decode
    raw = decode(encode([full_record(cls) for cls in RECORD_TYPES[:4]]))
    raw[3]["seq"] = "four"
    with pytest.raises(msgspec.ValidationError, match=re.escape("Expected `int`, got `str` - at `$[3].seq`")):
        decode_batch(encode(raw), content_type)  # type: ignore[arg-type]
    raw[3]["seq"] = 4
    raw[2]["ctx"] = "BOGUS"
    with pytest.raises(msgspec.ValidationError) as info:
        decode_batch(encode(raw), content_type)  # type: ignore[arg-type]
    assert str(info.value).endswith("- at `$[2]`")
    assert f"{raw[2]['kind']}.ctx: 'BOGUS' is not one of task, softirq, unknown" in str(info.value)


def test_decode_batch_rejects_an_unknown_kind_and_unknown_fields() -> None:
    good = to_builtins(full_record(RECORD_TYPES[0]))
    with pytest.raises(msgspec.ValidationError, match=re.escape("at `$[1].kind`")):
        decode_batch(json.dumps([good, {**good, "kind": "nope"}]).encode(), "json")
    with pytest.raises(msgspec.ValidationError, match=re.escape("unknown field `surprise` - at `$[0]`")):
        decode_batch(json.dumps([{**good, "surprise": 1}]).encode(), "json")


# --- schema lint -------------------------------------------------------------------------------

# Words that are full English words (or standard terms like "ack", "id", "min", "max").
WORDS = set(
    """
    ack acked active alert alive analysis attribution backoff blocks boot by bytes caused checksum
    cloned completeness condition cookie count data delivered delta direction drop duplicate duration
    enabled end error errors event evidence fast first flags flight flow fragment frame full guessed
    handshake header history hook host id in incomplete index inferred is keep kind label length
    lifetime limited linear link linux local location lost mark max mean message metric min missed
    name of offset order out packets payload per permitted ports probe protocol provider reason
    received recent retransmission retransmits reused rule sacked samples scale scaled schema segment
    sender sent severity since size source spurious stage start state status stream thresholds total
    type update urgent value wall window wire zero counter sampling
    providers attached absent failed missing reasons rules unavailable degraded kernel release sample
    rate stack counters setting observed emitted ratio interval time percent events records findings
    stages from untraced stopped open poll agent children programs run member members
    partial path states born congestion changes after
    peer closed backlog queue retransmit last reset resets wait timewait
    """.split()
)
# Abbreviations kept because the kernel, FreeBSD, Zeek or tshark use them for the same data
# ("the same name for the same data everywhere" beats spelling them out).
ABBREVIATIONS: dict[str, str] = {
    **dict.fromkeys(
        "snd rcv una nxt wup wl1 wnd cwnd ssthresh srtt rttvar rto mss ws wscale t th".split(), "tcpcb / tcp_sock"
    ),
    **dict.fromkeys(
        "flags2 hiwater cc segqlen flowid flowtype sz prureq m compat".split(), "FreeBSD siftr / tcp_debug / mbuf"
    ),
    **dict.fromkeys(
        "skb skbs len truesize nr frags gso segs pkt sk rmem rcvbuf netns cgroup comm tgid pid uid gid".split(),
        "Linux kernel",
    ),
    **dict.fromkeys("ca algo app rc err inflight retrans ctx alloc".split(), "Linux kernel"),
    **dict.fromkeys("src dst sport dport orig resp conn proto".split(), "Zeek conn.log / BPF"),
    **dict.fromkeys(
        "ip tcp icmp l4 if ttl tos dscp ecn ident frag opt sack ecr val ts seq".split(), "protocol headers"
    ),
    **dict.fromkeys("rtt rel dup num str ver gen off".split(), "tshark / Wireshark field names"),
    **dict.fromkeys("cpu uuid uuids sock approx buf prev".split(), "common usage"),
    "mib": "SNMP MIB groups of /proc/net/netstat and /proc/net/snmp (TcpExt, Tcp)",
    "ppl": "FreeBSD siftr's ppl (packets per log line)",
    "rss": "resident set size (ps, /proc/PID/status VmRSS)",
    **dict.fromkeys("ns us ms s".split(), "units (style.md: units in the name)"),
}
# FreeBSD names that end in 2 (style.md: no "2" suffixes except where the FreeBSD name has it).
TWO_SUFFIX_ALLOWED = {"t_flags2"}
# siftr log columns keep FreeBSD's names without a unit suffix; their unit is in the docs.
UNIT_SUFFIX_EXEMPT = {"srtt", "rttvar", "rto"}
SUBSECOND_UNITS = ("ns", "us", "ms")
SIZE_WORDS = {"bytes", "len", "length", "size", "mss", "wnd", "cwnd", "ssthresh", "offset", "off", "hiwater", "cc",
              "sz", "truesize", "rcvbuf", "alloc", "scaled"}  # fmt: skip
# Same name, different type in different kinds: known, reported to the lead; do not add more.
KNOWN_TYPE_CONFLICTS = {"analysis", "conn_state", "drop_reason", "end"}
NAME = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*\Z")


def all_fields() -> list[tuple[str, FieldDesc]]:
    """(owner, field) for every record kind and every Struct nested in one."""
    out: list[tuple[str, FieldDesc]] = []
    seen: set[type] = set()

    def walk(cls: type[msgspec.Struct], owner: str) -> None:
        if cls in seen:
            return
        seen.add(cls)
        for d in describe(cls):
            out.append((owner, d))
            if isinstance(d.type, type) and issubclass(d.type, msgspec.Struct):
                walk(d.type, d.type.__name__)

    for cls in RECORD_TYPES:
        walk(cls, kind_of(cls))
    return out


def test_every_field_has_a_description() -> None:
    assert [f"{owner}.{d.name}" for owner, d in all_fields() if not d.description.strip()] == []


def test_field_names_are_lower_case_snake_case() -> None:
    assert [f"{owner}.{d.name}" for owner, d in all_fields() if not NAME.match(d.name)] == []


def test_field_names_are_made_of_full_words_or_known_abbreviations() -> None:
    unknown = sorted(
        {
            f"{owner}.{d.name}: {word!r}"
            for owner, d in all_fields()
            for word in d.name.split("_")
            if word not in WORDS and word not in ABBREVIATIONS
        }
    )
    assert unknown == [], "spell the word out, or add it to WORDS/ABBREVIATIONS with where the name comes from"


def test_no_field_name_has_a_2_suffix_except_freebsds_t_flags2() -> None:
    offenders = {d.name for _, d in all_fields() if d.name.endswith("2") or re.search(r"2_", d.name)}
    assert offenders == TWO_SUFFIX_ALLOWED


def test_sub_second_times_carry_their_unit_in_the_name() -> None:
    missing = [
        f"{owner}.{d.name} ({d.unit})"
        for owner, d in all_fields()
        if d.unit in SUBSECOND_UNITS and not d.name.endswith("_" + d.unit) and d.name not in UNIT_SUFFIX_EXEMPT
    ]
    assert missing == []


def test_a_unit_suffix_in_a_name_matches_the_declared_unit() -> None:
    wrong = [
        f"{owner}.{d.name} declares {d.unit}"
        for owner, d in all_fields()
        for unit in SUBSECOND_UNITS
        if d.name.endswith("_" + unit) and d.unit != unit
    ]
    assert wrong == []


def test_byte_counts_say_so_in_name_and_unit() -> None:
    problems = []
    for owner, d in all_fields():
        words = set(d.name.split("_"))
        if d.unit == "bytes" and not words & SIZE_WORDS:
            problems.append(f"{owner}.{d.name}: unit bytes but no size word in the name")
        if d.type is int and "bytes" in words and d.unit != "bytes":
            problems.append(f"{owner}.{d.name}: counts bytes but declares unit {d.unit}")
    assert problems == []


def test_the_same_name_has_the_same_type_in_every_kind() -> None:
    types: dict[str, set[str]] = defaultdict(set)
    for _, d in all_fields():
        types[d.name].add(f"{getattr(d.type, '__name__', d.type)}[{d.item_type}]")
    conflicts = {name for name, kinds in types.items() if len(kinds) > 1}
    assert conflicts == KNOWN_TYPE_CONFLICTS


def test_choices_and_presentation_hints_fit_the_field_type() -> None:
    problems = []
    for owner, d in all_fields():
        if d.choices and d.type is not str:
            problems.append(f"{owner}.{d.name}: choices on a {d.type}")
        if d.hexa and d.type is not int:
            problems.append(f"{owner}.{d.name}: hex display of a {d.type}")
        if d.fmt and d.type not in (int, float):
            problems.append(f"{owner}.{d.name}: printf format on a {d.type}")
        if d.type is list and d.item_type is None:
            problems.append(f"{owner}.{d.name}: list without an item type")
        if typing.get_origin(d.type) is typing.Union:
            problems.append(f"{owner}.{d.name}: union type {d.type}")
    assert problems == []
