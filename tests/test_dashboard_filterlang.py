"""The connections search box's filter language (webapp/dashboard/filterlang.py): parse and errors."""

from __future__ import annotations

import ipaddress

import pytest
from django.db.models import Q

from webapp.dashboard.filterlang import (
    BoolOp,
    Columns,
    Cond,
    FilterError,
    Not,
    compare,
    conditions,
    either,
    parse,
    to_q,
)


def test_it_parses_the_documented_example_into_three_conditions() -> None:
    assert parse("port 443 and comm nginx and retrans > 0") == BoolOp(
        "and", (Cond("port", "=", 443), Cond("comm", "=", "nginx"), Cond("retrans", ">", 0))
    )


def test_it_returns_none_for_a_blank_expression() -> None:
    assert parse("   ") is None


def test_and_binds_tighter_than_or() -> None:
    assert parse("port 22 or port 80 and comm sshd") == BoolOp(
        "or", (Cond("port", "=", 22), BoolOp("and", (Cond("port", "=", 80), Cond("comm", "=", "sshd"))))
    )


def test_parentheses_and_not_group_as_written() -> None:
    assert parse("not (state open or proto udp)") == Not(
        BoolOp("or", (Cond("state", "=", "OPEN"), Cond("proto", "=", "udp")))
    )


def test_it_reads_units_on_bytes_and_duration() -> None:
    assert parse("bytes >= 1.5M") == Cond("bytes", ">=", 1_500_000)
    assert parse("duration < 250ms") == Cond("duration", "<", 0.25)
    assert parse("duration > 2m") == Cond("duration", ">", 120.0)


def test_it_accepts_quoted_values_and_case_insensitive_words() -> None:
    assert parse('COMM "my app" AND State established') == BoolOp(
        "and", (Cond("comm", "=", "my app"), Cond("state", "=", "ESTABLISHED"))
    )


def test_anomaly_alone_means_any_rule_and_takes_an_optional_rule() -> None:
    assert parse("anomaly") == Cond("anomaly", "=", "")
    assert parse("anomaly k1 and port 80") == BoolOp("and", (Cond("anomaly", "=", "K1"), Cond("port", "=", 80)))


@pytest.mark.parametrize(
    ("text", "message", "pos"),
    [
        ("port abc", "port needs a whole number, got 'abc'", 5),
        ("prot 80", "no such field 'prot'; did you mean 'proto'?", 0),
        ("reset > 0", "no such field 'reset'; did you mean 'resets'?", 0),
        ('comm "my app', 'unclosed quote: add the closing "', 5),
        ("dst 10.99.7.0/33", "dst needs an address prefix like 10.0.0.0/8, got '10.99.7.0/33'", 4),
        ("dst > 10.0.0.0/8", "'>' needs a number field; 'dst' is addr", 6),
        ("port", "expected a value after 'port'", 4),
        ("(port 80", "missing ')'", 8),
        ("comm > 3", "'>' needs a number field; 'comm' is text", 7),
        ("port 80 port 81", "expected 'and', 'or' or the end, got 'port'", 8),
        ("state NOPE", "unknown state 'NOPE'", 6),
        ("bytes > 3X", "bytes needs a number with an optional unit (k, m, g), got '3X'", 8),
        ("port ~ 8", "'~' (contains) works on text fields, not on 'port'", 7),
        ("port 80 and", "expected a field name, got the end", 11),
        ("port 80 & comm x", "unexpected character '&'", 8),
    ],
)
def test_it_rejects_bad_expressions_with_a_clear_message_and_position(text: str, message: str, pos: int) -> None:
    with pytest.raises(FilterError) as err:
        parse(text)
    assert str(err.value).startswith(message)
    assert err.value.pos == pos


def test_it_refuses_overlong_expressions() -> None:
    with pytest.raises(FilterError, match="longer than 500"):
        parse("port 1 and " * 60 + "port 2")


def test_it_builds_orm_filters_through_the_column_map() -> None:
    columns = Columns({"port": either("sport", "dport"), "comm": compare("comm"), "retrans": compare("total_retrans")})
    q = to_q(parse("port 443 and comm ~ ngi and retrans > 0"), columns)
    assert q == (Q(sport__exact=443) | Q(dport__exact=443)) & Q(comm__icontains="ngi") & Q(total_retrans__gt=0)


def test_not_equal_on_either_column_means_neither_equals() -> None:
    columns = Columns({"port": either("sport", "dport")})
    assert to_q(parse("port != 22"), columns) == ~Q(sport=22) & ~Q(dport=22)


def test_address_fields_take_cidr_prefixes_of_both_families() -> None:
    assert parse("dst 10.99.7.0/24") == Cond("dst", "=", ipaddress.ip_network("10.99.7.0/24"))
    assert parse("addr != fd00:1::/64") == Cond("addr", "!=", ipaddress.ip_network("fd00:1::/64"))
    # host bits set: the prefix the user meant, as ip route would read it
    assert parse("src 10.99.7.9/24") == Cond("src", "=", ipaddress.ip_network("10.99.7.0/24"))
    assert parse("dst 10.99.7.1") == Cond("dst", "=", "10.99.7.1")


def test_resets_is_a_number_field() -> None:
    assert parse("resets >= 1") == Cond("resets", ">=", 1)


def test_an_unknown_rule_is_refused_with_the_known_ones_and_the_nearest() -> None:
    rules = {"K1", "K2", "K10", "K14", "H1"}
    assert parse("anomaly k14", rules=rules) == Cond("anomaly", "=", "K14")
    with pytest.raises(FilterError) as err:
        parse("port 80 and anomaly K15", rules=rules)
    assert str(err.value) == "no such rule 'K15'; did you mean 'K1'? rules: H1, K1, K2, K10, K14 (at character 21)"
    assert err.value.pos == 20
    with pytest.raises(FilterError) as err:
        parse("anomaly K99", rules=rules)  # nothing near it: the list alone
    assert str(err.value) == "no such rule 'K99'; rules: H1, K1, K2, K10, K14 (at character 9)"


def test_conditions_lists_only_those_every_match_must_meet() -> None:
    tree = parse("comm iperf and (port 1 or port 2) and not host a and dst x")
    assert conditions(tree) == [Cond("comm", "=", "iperf"), Cond("dst", "=", "x")]
    assert conditions(None) == []
