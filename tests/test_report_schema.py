"""docs/schema/report.schema.json and report.xsd: in sync with the record schema, and strict.

Real reports are validated in tests/test_report_command.py and test_report_endpoints.py;
here the schemas must match what analysis/export/schema.py generates from describe(),
and must reject reports that break the shape (wrong enum, unknown member, bad order).
"""

from __future__ import annotations

import io
import json

import jsonschema
import pytest
import xmlschema
from report_schemas import SCHEMA_DIR, validate_json, validate_xml

from analysis.export.schema import json_text, main, xsd
from translators import records as r
from xo import Writer, command_options


def test_the_committed_schemas_are_the_generated_ones() -> None:
    assert (SCHEMA_DIR / "report.schema.json").read_text() == json_text()
    assert (SCHEMA_DIR / "report.xsd").read_text() == xsd()
    assert main(["--check"]) == 0


def minimal_report(style: str) -> str:
    """The smallest report render.py can write: empty header lists, one connection, one record."""
    out = io.StringIO()
    w = Writer(out, command_options(style))
    w.open_container("nettrail-report")
    w.open_container("header")
    w.emit("{:generated-at/%.6f}", generated_at=1.5)
    w.open_container("filter")
    w.emit("{:kinds/%s}", kinds="tcp_state")
    w.close_container("filter")
    for name in ("host", "kind", "provider"):
        w.open_list(name)
        w.close_list(name)
    w.open_container("loss")
    w.open_list("event")
    w.close_list("event")
    w.emit("{:lost-total/%d}", lost_total=0)
    w.close_container("loss")
    for name in ("drop", "rule"):
        w.open_list(name)
        w.close_list(name)
    w.close_container("header")
    w.open_list("connection")
    w.open_instance("connection")
    w.emit("{k:conn-uuid/%s}", conn_uuid="6f2d7a1e-0000-4c1e-9f51-000000000000")
    w.record(r.TcpStateChange(host_id="h", boot_id="b", seq=1, ts_ns=1, ts_wall=1.0, provider="tcp",
                              probe="state-change", prev_state="CLOSED", state="SYN_SENT"))  # fmt: skip
    w.close_instance("connection")
    w.close_list("connection")
    w.finish()
    return out.getvalue()


def test_the_json_schema_accepts_a_minimal_report_and_rejects_broken_ones() -> None:
    doc = json.loads(minimal_report("json"))
    validate_json(doc)
    record = doc["nettrail_report"]["connection"][0]["tcp_state"][0]
    for field, bad in (("state", "BOGUS"), ("seq", "1"), ("surprise", 1)):
        broken = json.loads(json.dumps(doc))
        broken["nettrail_report"]["connection"][0]["tcp_state"][0] = {**record, field: bad}
        with pytest.raises(jsonschema.ValidationError):
            validate_json(broken)
    del doc["nettrail_report"]["header"]["loss"]
    with pytest.raises(jsonschema.ValidationError, match="'loss' is a required property"):
        validate_json(doc)


def test_the_xsd_accepts_a_minimal_report_and_rejects_broken_ones() -> None:
    text = minimal_report("xml")
    validate_xml(text)
    for old, new in (
        ("<state>SYN_SENT</state>", "<state>BOGUS</state>"),
        ("<seq>1</seq>", "<seq>one</seq>"),
        ("<kind>tcp_state</kind>", "<kind>tcp_reset</kind>"),
        ("<probe>state-change</probe>", "<probe>state-change</probe><surprise/>"),
    ):
        assert old in text
        with pytest.raises(xmlschema.XMLSchemaValidationError):
            validate_xml(text.replace(old, new))
