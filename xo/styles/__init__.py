"""One renderer per output style (text, xml, json, html) behind one small interface.

The Writer (xo/writer.py) calls open/close/emit/record/error/message/finish; a renderer
writes its style's form of each event straight to the stream.

Records go through jinja2: their shape is fixed per record kind, so each style compiles
one template per (kind, options) from the field descriptions (xo/records.py) and
streams it. emit() is plain code on purpose: a format string yields a few pieces whose
shape depends on writer state (first sibling or not, an open HTML line, units moving to
the preceding value), so a jinja2 render per call or per field would cost more than the
text it produces and express nothing a template could keep. Keep in sync with:
xo/writer.py (the caller) and ../shared/docs/libxo.md §4-§7 (what each style writes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xo.styles.base import Renderer

if TYPE_CHECKING:
    from xo.writer import Writer


def make_renderer(writer: Writer) -> Renderer:
    from xo.styles.html import HtmlRenderer
    from xo.styles.json import JsonRenderer
    from xo.styles.text import TextRenderer
    from xo.styles.xml import XmlRenderer

    classes: dict[str, type[Renderer]] = {
        "text": TextRenderer,
        "xml": XmlRenderer,
        "json": JsonRenderer,
        "html": HtmlRenderer,
    }
    return classes[writer.options.style](writer)
