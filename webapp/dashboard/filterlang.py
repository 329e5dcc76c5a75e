"""The connections search box's filter language: text -> syntax tree -> Django ``Q``.

Example: ``port 443 and comm nginx and retrans > 0``. Grammar (``and`` binds tighter
than ``or``; words are case-insensitive; an operator may be left out and means ``=``)::

    expr  := and ("or" and)*
    and   := unary ("and" unary)*
    unary := "not" unary | "(" expr ")" | "anomaly" [rule] | field [op] value
    op    := = | == | != | > | >= | < | <= | ~        (~ = contains, text fields)

The field list below is the documentation shown in the page's help
(``templates/dashboard/connections.html`` renders :data:`FIELDS`), so the help and
the parser cannot disagree. Parsing is pure (no Django); :func:`to_q` turns the tree
into ORM filters through :class:`Columns`, the one place naming model columns.
Keep in sync with: ``webapp/dashboard/queries.py`` (the Columns for the Connection model).
"""

from __future__ import annotations

import difflib
import ipaddress
import math
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from translators.records import TCP_STATES
from translators.records_fields import TRANSPORTS

MAX_LENGTH = 500  # longer expressions are refused: the box is for people, not programs


class FilterError(ValueError):
    """A bad expression; ``pos`` is the 0-based character offset of the problem."""

    def __init__(self, message: str, pos: int) -> None:
        super().__init__(f"{message} (at character {pos + 1})")
        self.pos = pos


@dataclass(frozen=True)
class Field:
    name: str
    type: str  # "int", "bytes", "duration", "text", "addr", "state", "proto"
    help: str


FIELDS: tuple[Field, ...] = (
    Field("host", "text", "host id, e.g. host web1"),
    Field("comm", "text", "process command name, e.g. comm nginx or comm ~ ngi"),
    Field("pid", "int", "process (thread-group) id"),
    Field("uid", "int", "user id of the owner"),
    Field("src", "addr", "local / originator address, or a prefix: src 10.0.0.0/8, src fd00::/64"),
    Field("dst", "addr", "remote / responder address, or a prefix: dst 10.99.7.0/24"),
    Field("addr", "addr", "either address (or prefix)"),
    Field("sport", "int", "local / originator port"),
    Field("dport", "int", "remote / responder port"),
    Field("port", "int", "either port, e.g. port 443"),
    Field("state", "state", "TCP state, e.g. state ESTABLISHED (also: state open / state closed)"),
    Field("proto", "proto", "tcp, udp, icmp, icmp6, gre, ... (a connection's proto)"),
    Field("duration", "duration", "seconds, or with a unit: 250ms, 2s, 5m, 1h"),
    Field("bytes", "bytes", "payload bytes both ways; units k, M, G (powers of 1000)"),
    Field("retrans", "int", "segments retransmitted"),
    Field("resets", "int", "TCP resets seen on the connection, e.g. resets > 0"),
    Field("anomaly", "text", "has an alert: anomaly, or anomaly K1 for one rule"),
)
FIELD_BY_NAME = {f.name: f for f in FIELDS}
OPS = ("=", "!=", ">", ">=", "<", "<=", "~")
_ORDERED_TYPES = ("int", "bytes", "duration")
_UNITS: dict[str, dict[str, float]] = {
    "bytes": {"": 1, "k": 1000, "m": 1000**2, "g": 1000**3},
    "duration": {"": 1.0, "s": 1.0, "ms": 0.001, "us": 1e-6, "m": 60.0, "h": 3600.0},
}

# --- tokens ---------------------------------------------------------------------

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<op>==|!=|>=|<=|=|>|<|~)
      | (?P<paren>[()])
      | "(?P<quoted>[^"]*)"
      | (?P<unclosed>"[^"]*$)
      | (?P<word>[^\s()=!<>~"&|]+)
      | (?P<bad>\S)
    )""",
    re.VERBOSE,
)


@dataclass(frozen=True)
class Token:
    kind: str  # "op", "paren", "word", "end"
    text: str
    pos: int
    quoted: bool = False


def tokenize(text: str) -> list[Token]:
    if len(text) > MAX_LENGTH:
        raise FilterError(f"expression longer than {MAX_LENGTH} characters", MAX_LENGTH)
    tokens: list[Token] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:  # only trailing blanks are left
            break
        start = m.start(m.lastgroup or 0)
        if m.lastgroup == "bad":
            raise FilterError(f"unexpected character {m.group('bad')!r} (combine with and, or, not)", start)
        if m.lastgroup == "unclosed":
            raise FilterError('unclosed quote: add the closing "', start)
        if m.lastgroup == "quoted":
            tokens.append(Token("word", m.group("quoted"), start - 1, quoted=True))
        else:
            tokens.append(Token(m.lastgroup or "", m.group(m.lastgroup or 0), start))
        pos = m.end()
    tokens.append(Token("end", "", len(text)))
    return tokens


# --- syntax tree ------------------------------------------------------------------


@dataclass(frozen=True)
class Cond:
    field: str
    op: str
    value: Any  # int, float, str or an ip_network, already converted for the field's type


@dataclass(frozen=True)
class Not:
    child: Node


@dataclass(frozen=True)
class BoolOp:
    op: str  # "and" | "or"
    children: tuple[Node, ...]


Node = Cond | Not | BoolOp


def _did_you_mean(word: str, choices: Collection[str]) -> str:
    """A nearest-name suggestion ("did you mean 'port'? ") or nothing, ignoring case."""
    by_lower = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return f"did you mean {by_lower[close[0]]!r}? " if close else ""


class _Parser:
    def __init__(self, tokens: list[Token], rules: Collection[str] | None) -> None:
        self.tokens = tokens
        self.i = 0
        self.rules = rules

    def peek(self) -> Token:
        return self.tokens[self.i]

    def take(self) -> Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def is_word(self, *words: str) -> bool:
        tok = self.peek()
        return tok.kind == "word" and not tok.quoted and tok.text.lower() in words

    def parse(self) -> Node:
        node = self.parse_or()
        tok = self.peek()
        if tok.kind != "end":
            raise FilterError(f"expected 'and', 'or' or the end, got {tok.text!r}", tok.pos)
        return node

    def parse_or(self) -> Node:
        children = [self.parse_and()]
        while self.is_word("or"):
            self.take()
            children.append(self.parse_and())
        return children[0] if len(children) == 1 else BoolOp("or", tuple(children))

    def parse_and(self) -> Node:
        children = [self.parse_unary()]
        while self.is_word("and"):
            self.take()
            children.append(self.parse_unary())
        return children[0] if len(children) == 1 else BoolOp("and", tuple(children))

    def parse_unary(self) -> Node:
        tok = self.peek()
        if self.is_word("not"):
            self.take()
            return Not(self.parse_unary())
        if tok.kind == "paren" and tok.text == "(":
            self.take()
            node = self.parse_or()
            close = self.take()
            if close.kind != "paren" or close.text != ")":
                raise FilterError("missing ')'", close.pos)
            return node
        return self.parse_cond()

    def parse_cond(self) -> Cond:
        tok = self.take()
        if tok.kind != "word" or tok.quoted:
            what = "the end" if tok.kind == "end" else repr(tok.text)
            raise FilterError(f"expected a field name, got {what}", tok.pos)
        name = tok.text.lower()
        field = FIELD_BY_NAME.get(name)
        if field is None:
            hint = _did_you_mean(name, FIELD_BY_NAME)
            raise FilterError(f"no such field {tok.text!r}; {hint}fields: {', '.join(FIELD_BY_NAME)}", tok.pos)
        if name == "anomaly":
            return self.parse_anomaly()
        op = "="
        if self.peek().kind == "op":
            op = self.take().text
            op = "=" if op == "==" else op
        value_tok = self.take()
        if value_tok.kind != "word" or (not value_tok.quoted and value_tok.text.lower() in ("and", "or", "not")):
            raise FilterError(f"expected a value after {name!r}", value_tok.pos)
        return Cond(name, op, _convert(field, op, value_tok))

    def parse_anomaly(self) -> Cond:
        tok = self.peek()
        if tok.kind == "op" and tok.text in ("=", "=="):
            self.take()
            tok = self.peek()
            if tok.kind != "word":
                raise FilterError("expected a rule id after 'anomaly ='", tok.pos)
        if tok.kind == "word" and (tok.quoted or tok.text.lower() not in ("and", "or", "not")):
            self.take()
            rule = tok.text.upper()
            if self.rules is not None and rule not in self.rules:
                known = sorted(self.rules, key=_rule_order)
                hint = _did_you_mean(rule, known)
                raise FilterError(f"no such rule {tok.text!r}; {hint}rules: {', '.join(known)}", tok.pos)
            return Cond("anomaly", "=", rule)
        return Cond("anomaly", "=", "")  # any rule


def _rule_order(rule: str) -> tuple[str, int]:
    """K2 before K10: the letter, then the number."""
    m = re.fullmatch(r"([A-Z]+)(\d+)", rule)
    return (m.group(1), int(m.group(2))) if m else (rule, 0)


def _network(field: Field, op: str, tok: Token) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """A CIDR prefix value (``10.99.7.0/24``, ``fd00::/64``); host bits may be set."""
    if op not in ("=", "!="):
        raise FilterError(f"a prefix takes = or != (in / not in), not {op!r}", tok.pos)
    try:
        return ipaddress.ip_network(tok.text, strict=False)
    except ValueError:
        raise FilterError(f"{field.name} needs an address prefix like 10.0.0.0/8, got {tok.text!r}", tok.pos) from None


def _convert(field: Field, op: str, tok: Token) -> Any:
    text = tok.text
    if op in (">", ">=", "<", "<=") and field.type not in _ORDERED_TYPES:
        raise FilterError(f"{op!r} needs a number field; {field.name!r} is {field.type}", tok.pos)
    if op == "~" and field.type not in ("text", "addr"):
        raise FilterError(f"'~' (contains) works on text fields, not on {field.name!r}", tok.pos)
    if field.type == "int":
        if not re.fullmatch(r"\d+", text):
            raise FilterError(f"{field.name} needs a whole number, got {text!r}", tok.pos)
        return _in_range(field, int(text), tok)
    if field.type in _UNITS:
        m = re.fullmatch(r"(\d+(?:\.\d+)?)([a-zA-Z]*)", text)
        units = _UNITS[field.type]
        unit = m.group(2).lower() if m else ""
        if m is None or unit not in units:
            allowed = ", ".join(u for u in units if u)
            raise FilterError(f"{field.name} needs a number with an optional unit ({allowed}), got {text!r}", tok.pos)
        value = float(m.group(1)) * units[unit]
        if not math.isfinite(value):  # 400 nines overflow the float: out of range as well
            raise FilterError(f"{field.name} is out of range (at most {INT64_MAX})", tok.pos)
        return _in_range(field, int(value), tok) if field.type == "bytes" else value
    if field.type == "state":
        upper = text.upper()
        if upper == "OPEN" or upper in TCP_STATES:
            return upper
        raise FilterError(f"unknown state {text!r}; states: {', '.join(TCP_STATES)}, open", tok.pos)
    if field.type == "proto":
        if text.lower() not in TRANSPORTS:  # every proto a connection may have (analysis/flows/ip_flows.py)
            raise FilterError(
                f"proto is tcp, udp, udplite, icmp, icmp6 or an IP protocol (gre, ip-N), got {text!r}", tok.pos
            )
        return text.lower()
    if field.type == "addr" and "/" in text and op != "~":
        return _network(field, op, tok)
    return text


INT64_MAX = 2**63 - 1  # the database's integer columns are signed 64-bit


def _in_range(field: Field, value: int, tok: Token) -> int:
    if value > INT64_MAX:
        raise FilterError(f"{field.name} is out of range (at most {INT64_MAX})", tok.pos)
    return value


def parse(text: str, rules: Collection[str] | None = None) -> Node | None:
    """The syntax tree of ``text``; None for a blank expression. Raises FilterError.

    ``rules``: the alert rule ids ``anomaly RULE`` may name (None: any); another id is
    "no such rule" rather than a filter that silently matches nothing.
    """
    tokens = tokenize(text)
    if tokens[0].kind == "end":
        return None
    return _Parser(tokens, rules).parse()


def conditions(node: Node | None) -> list[Cond]:
    """The conditions of a tree that must hold for a row to match (not under ``not``/``or``)."""
    if isinstance(node, Cond):
        return [node]
    if isinstance(node, BoolOp) and node.op == "and":
        return [c for child in node.children for c in conditions(child)]
    return []


# --- to the ORM ----------------------------------------------------------------------

QFactory = Callable[[str, Any], Any]  # (op, value) -> Q


@dataclass(frozen=True)
class Columns:
    """How each field maps to the model: a callable per field returning a Q."""

    factories: dict[str, QFactory]


def compare(column: str) -> QFactory:
    """A factory comparing one column with any operator."""
    from django.db.models import Q

    lookups = {"=": "exact", ">": "gt", ">=": "gte", "<": "lt", "<=": "lte", "~": "icontains"}

    def make(op: str, value: Any) -> Q:
        if op == "!=":
            return ~Q(**{f"{column}__exact": value})
        return Q(**{f"{column}__{lookups[op]}": value})

    return make


def either(*columns: str) -> QFactory:
    """A factory matching when any of the columns matches (port = sport or dport)."""
    from django.db.models import Q

    parts = [compare(c) for c in columns]

    def make(op: str, value: Any) -> Q:
        if op == "!=":  # neither side equals the value
            out = Q()
            for c in columns:
                out &= ~Q(**{c: value})
            return out
        out = Q()
        for part in parts:
            out |= part(op, value)
        return out

    return make


def to_q(node: Node | None, columns: Columns) -> Any:
    """The Django Q for a syntax tree (an empty Q for None)."""
    from django.db.models import Q

    if node is None:
        return Q()
    if isinstance(node, Not):
        return ~to_q(node.child, columns)
    if isinstance(node, BoolOp):
        out = to_q(node.children[0], columns)
        for child in node.children[1:]:
            out = (out & to_q(child, columns)) if node.op == "and" else (out | to_q(child, columns))
        return out
    return columns.factories[node.field](node.op, node.value)
