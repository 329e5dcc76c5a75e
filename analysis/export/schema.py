"""JSON Schema and XSD of the trace report, generated from the record schema.

`python -m analysis.export.schema` rewrites docs/schema/report.schema.json and
docs/schema/report.xsd; tests/test_report_schema.py fails when the committed files
differ from what this module generates, and validates real reports against them.
Record elements follow the xo encodings (xo/styles/json.py, xml.py): key fields
first, then ``kind``, then the other fields in schema order; JSON carries every
field (null when unknown), XML omits unknown ones.
Keep in sync with: webapp/reports/render.py (the report's containers and fields),
translators/records.py (describe), docs/reports.md.
"""

from __future__ import annotations

import json
import sys
import typing
from pathlib import Path
from typing import Any
from xml.sax.saxutils import quoteattr

import msgspec

from translators.records import BY_KIND, FieldDesc, describe

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "docs" / "schema"
REPORT = "nettrail-report"
# Per-connection columns of the report (webapp/reports/render.py): (name, display format, type).
CONNECTION_FIELDS: tuple[tuple[str, str, type], ...] = (
    ("host_id", "%s", str), ("boot_id", "%s", str), ("proto", "%s", str), ("ip_ver", "%d", int),
    ("src", "%s", str), ("sport", "%d", int), ("dst", "%s", str), ("dport", "%d", int), ("state", "%s", str),
    ("first_seen", "%.6f", float), ("last_seen", "%.6f", float), ("bytes_orig", "%d", int),
    ("bytes_resp", "%d", int), ("bytes_out", "%d", int), ("bytes_in", "%d", int), ("packets_out", "%d", int),
    ("packets_in", "%d", int), ("retransmits", "%d", int), ("resets", "%d", int), ("alerts", "%d", int),
    ("srtt_us", "%d", int), ("snd_cwnd", "%d", int), ("pid", "%d", int), ("comm", "%s", str), ("closed", "%s", bool),
)  # fmt: skip
JSON_TYPES = {int: "integer", float: "number", str: "string", bool: "boolean", bytes: "string"}
XSD_TYPES = {int: "xs:long", float: "xs:double", str: "xs:string", bool: "xs:boolean", bytes: "xs:base64Binary"}


def xo(name: str) -> str:
    return name.replace("_", "-")


def list_name(kind: str) -> str:
    """The report's list name for a kind: `connection` summaries are listed as `summary`, so a
    connection instance never holds a list named like itself."""
    return "summary" if kind == "connection" else xo(kind)


def ordered_fields(kind: str) -> tuple[list[FieldDesc], list[FieldDesc]]:
    descs = describe(BY_KIND[kind])
    return [d for d in descs if d.key], [d for d in descs if not d.key]


# --- JSON Schema --------------------------------------------------------------------------------------


def is_struct(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, msgspec.Struct)


def _json_field(d: FieldDesc) -> dict[str, Any]:
    if d.type is list:
        item = d.item_type
        inner: dict[str, Any]
        if is_struct(item):  # a list of objects (a connection's findings)
            props = {xo(sub.name): _json_field(sub) for sub in describe(item)}
            inner = _obj(props, [xo(sub.name) for sub in describe(item) if sub.required])
        elif getattr(item, "__origin__", None) is list:
            inner = {"type": "array", "items": {"type": "integer"}}
        else:
            inner = {"type": JSON_TYPES.get(item, "string")}
        out: dict[str, Any] = {"type": "array", "items": inner}
    elif d.type is dict or (isinstance(d.type, type) and issubclass(d.type, msgspec.Struct)):
        out = {"type": "object"}
    else:
        out = {"type": JSON_TYPES[d.type]}
        if d.choices:
            out["enum"] = list(d.choices)
    if d.nullable:
        out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    return out


def _json_record(kind: str) -> dict[str, Any]:
    keys, rest = ordered_fields(kind)
    props: dict[str, Any] = {xo(d.name): _json_field(d) for d in keys}
    props["kind"] = {"const": kind}
    props.update({xo(d.name): _json_field(d) for d in rest})
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def _obj(props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required or [], "additionalProperties": False}


def _list_of(ref: str) -> dict[str, Any]:
    return {"type": "array", "items": {"$ref": f"#/$defs/{ref}"}}


def _json_header() -> dict[str, Any]:
    integer, number, string = {"type": "integer"}, {"type": "number"}, {"type": "string"}
    named_count = _obj({"name": string, "records": integer}, ["name", "records"])
    return _obj(
        {
            "generated-at": number,
            "filter": _obj(
                {
                    "since": number,
                    "until": number,
                    "connection": string,
                    "host": {"type": "array", "items": string},
                    "kinds": string,
                },
                ["kinds"],
            ),  # fmt: skip
            "host": {
                "type": "array",
                "items": _obj(
                    {"name": string, "connections": integer, "first-seen": number, "last-seen": number},
                    ["name", "connections"],
                ),
            },  # fmt: skip
            "kind": {"type": "array", "items": named_count},
            "provider": {"type": "array", "items": named_count},
            "loss": _obj(
                {
                    "event": {
                        "type": "array",
                        "items": _obj(
                            {"host": string, "event-type": string, "lost": integer}, ["host", "event-type", "lost"]
                        ),
                    },
                    "lost-total": integer,
                },
                ["event", "lost-total"],
            ),  # fmt: skip
            "drop": {"type": "array", "items": _obj({"reason": string, "drops": integer}, ["reason", "drops"])},
            "rule": {
                "type": "array",
                "items": _obj(
                    {
                        "rule-id": string,
                        "threshold": {
                            "type": "array",
                            "items": _obj(
                                {"name": string, "value": {"type": ["number", "string", "boolean"]}}, ["name", "value"]
                            ),
                        },
                    },
                    ["rule-id"],
                ),
            },  # fmt: skip
        },
        ["generated-at", "filter", "host", "kind", "provider", "loss", "drop", "rule"],
    )


def json_schema() -> dict[str, Any]:
    kinds = {list_name(kind): _list_of(kind) for kind in BY_KIND}
    conn: dict[str, Any] = {"conn-uuid": {"type": "string", "format": "uuid"}}
    conn.update({xo(name): {"type": JSON_TYPES[tp]} for name, _, tp in CONNECTION_FIELDS})
    conn.update(kinds)
    report = _obj(
        {"header": _json_header(), "connection": {"type": "array", "items": _obj(conn, ["conn-uuid"])},
         "unattributed": _obj(dict(kinds))},
        ["header", "connection"],
    )  # fmt: skip
    return _underscored(
        {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "https://nettrail.invalid/schema/report.schema.json",
            "title": "nettrail trace report (nettrail report --libxo json)",
            "type": "object",
            "properties": {REPORT: report},
            "required": [REPORT],
            "additionalProperties": False,
            "$defs": {kind: _json_record(kind) for kind in BY_KIND},
        }
    )


def _underscored(node: dict[str, Any]) -> dict[str, Any]:
    return typing.cast(dict[str, Any], _underscored_node(node))


def _underscored_node(node: Any) -> Any:
    """JSON member names as the commands write them (xo.COMMAND_DEFAULTS: underscores)."""
    if isinstance(node, list):
        return [_underscored_node(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "properties":
            value = {name.replace("-", "_"): _underscored_node(v) for name, v in value.items()}
        elif key == "required":
            value = [name.replace("-", "_") for name in value]
        else:
            value = _underscored_node(value)
        out[key] = value
    return out


# --- XSD -------------------------------------------------------------------------------------------------


def _el(name: str, tp: str, optional: bool = True, many: bool = False) -> str:
    occurs = (' minOccurs="0"' if optional else "") + (' maxOccurs="unbounded"' if many else "")
    return f'<xs:element name="{name}" type="{tp}"{occurs}/>'


def _xsd_field(d: FieldDesc) -> str:
    name = xo(d.name)
    if d.type is list:
        if is_struct(d.item_type):  # one element per item, its fields as child elements
            return _el(name, _struct_type(d.item_type), many=True)
        nested = getattr(d.item_type, "__origin__", None) is list
        return _el(name, "valueList" if nested else XSD_TYPES.get(d.item_type, "xs:string"), many=True)
    if d.type is dict or (isinstance(d.type, type) and issubclass(d.type, msgspec.Struct)):
        return _el(name, "anyElements", optional=True)
    if d.choices:
        return _el(name, _choice_type(d.choices), d.nullable)
    return _el(name, XSD_TYPES[d.type], d.nullable)


def _choice_type(choices: tuple[str, ...]) -> str:
    """One named enumeration type per distinct choice tuple (TCP states, severities ...)."""
    return _CHOICES.setdefault(tuple(choices), f"choice{len(_CHOICES)}")


_CHOICES: dict[tuple[str, ...], str] = {}
_STRUCTS: dict[type[msgspec.Struct], str] = {}


def _struct_type(cls: type[msgspec.Struct]) -> str:
    """One named complex type per struct listed in a record (Finding -> struct-Finding)."""
    return _STRUCTS.setdefault(cls, f"struct-{cls.__name__}")


def _xsd_struct(cls: type[msgspec.Struct], name: str) -> str:
    fields = [_xsd_field(d) if d.nullable or d.type is list else _el(xo(d.name), _xsd_type(d), optional=False)
              for d in describe(cls)]  # fmt: skip
    return _seq(name, fields)


def _xsd_type(d: FieldDesc) -> str:
    return _choice_type(d.choices) if d.choices else XSD_TYPES[d.type]


def _xsd_record(kind: str) -> str:
    keys, rest = ordered_fields(kind)
    parts = [_xsd_field(d) for d in keys]
    parts.append(f'<xs:element name="kind" type="xs:string" fixed="{kind}"/>')
    parts += [_xsd_field(d) for d in rest]
    body = "\n      ".join(parts)
    return f'  <xs:complexType name="record-{kind}">\n    <xs:sequence>\n      {body}\n    </xs:sequence>\n  </xs:complexType>'


def _seq(name: str, elements: list[str], indent: str = "  ") -> str:
    body = f"\n{indent}    ".join(elements)
    return f'{indent}<xs:complexType name="{name}">\n{indent}  <xs:sequence>\n{indent}    {body}\n{indent}  </xs:sequence>\n{indent}</xs:complexType>'


def xsd() -> str:
    _CHOICES.clear()
    _STRUCTS.clear()
    records = [_xsd_record(kind) for kind in BY_KIND]
    records += [_xsd_struct(cls, name) for cls, name in list(_STRUCTS.items())]
    kind_lists = [_el(list_name(kind), f"record-{kind}", many=True) for kind in BY_KIND]
    conn = [_el("conn-uuid", "xs:string", optional=False)]
    conn += [_el(xo(name), XSD_TYPES[tp]) for name, _, tp in CONNECTION_FIELDS]
    types = [
        _seq(
            "report",
            [
                _el("header", "header", optional=False),
                _el("connection", "connection", many=True),
                _el("unattributed", "unattributed"),
            ],
        ),  # fmt: skip
        _seq(
            "header",
            [
                _el("generated-at", "xs:double", optional=False),
                _el("filter", "filter", optional=False),
                _el("host", "host", many=True),
                _el("kind", "namedCount", many=True),
                _el("provider", "namedCount", many=True),
                _el("loss", "loss", optional=False),
                _el("drop", "drop", many=True),
                _el("rule", "rule", many=True),
            ],
        ),  # fmt: skip
        _seq(
            "filter",
            [
                _el("since", "xs:double"),
                _el("until", "xs:double"),
                _el("connection", "xs:string"),
                _el("host", "xs:string", many=True),
                _el("kinds", "xs:string", optional=False),
            ],
        ),  # fmt: skip
        _seq(
            "host",
            [
                _el("name", "xs:string", optional=False),
                _el("connections", "xs:long", optional=False),
                _el("first-seen", "xs:double"),
                _el("last-seen", "xs:double"),
            ],
        ),  # fmt: skip
        _seq("namedCount", [_el("name", "xs:string", optional=False), _el("records", "xs:long", optional=False)]),
        _seq("loss", [_el("event", "lossEvent", many=True), _el("lost-total", "xs:long", optional=False)]),
        _seq(
            "lossEvent",
            [
                _el("host", "xs:string", optional=False),
                _el("event-type", "xs:string", optional=False),
                _el("lost", "xs:long", optional=False),
            ],
        ),  # fmt: skip
        _seq("drop", [_el("reason", "xs:string", optional=False), _el("drops", "xs:long", optional=False)]),
        _seq("rule", [_el("rule-id", "xs:string", optional=False), _el("threshold", "threshold", many=True)]),
        _seq("threshold", [_el("name", "xs:string", optional=False), _el("value", "xs:string", optional=False)]),
        _seq("connection", conn + kind_lists),
        _seq("unattributed", kind_lists),
        _seq("valueList", [_el("value", "xs:long", many=True)]),
        '  <xs:complexType name="anyElements">\n    <xs:sequence>\n'
        '      <xs:any processContents="skip" minOccurs="0" maxOccurs="unbounded"/>\n'
        "    </xs:sequence>\n  </xs:complexType>",
        *records,
    ]
    choices = [
        f'  <xs:simpleType name="{name}">\n    <xs:restriction base="xs:string">\n'
        + "".join(f"      <xs:enumeration value={quoteattr(v)}/>\n" for v in values)
        + "    </xs:restriction>\n  </xs:simpleType>"
        for values, name in _CHOICES.items()
    ]
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        "<!-- nettrail trace report in the xo XML style. Generated by analysis/export/schema.py. -->\n"
        '<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema" elementFormDefault="unqualified">\n'
        f'  <xs:element name="{REPORT}" type="report"/>\n' + "\n".join(types + choices) + "\n</xs:schema>\n"
    )


def json_text() -> str:
    return json.dumps(json_schema(), indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Writes both schema files (or checks them with --check: exit 1 when stale)."""
    check = "--check" in (argv if argv is not None else sys.argv[1:])
    stale = []
    for name, text in (("report.schema.json", json_text()), ("report.xsd", xsd())):
        path = SCHEMA_DIR / name
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
            continue
        SCHEMA_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if stale:
        print(f"stale: {', '.join(stale)} (run python -m analysis.export.schema)", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
