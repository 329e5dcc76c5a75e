"""One renderer per output style (text, xml, json, html) behind one small interface.

The Writer (xo/writer.py) calls open/close/emit/record/error/message/finish; a renderer
writes its style's form of each event straight to the stream.

XML and HTML records go through jinja2: their shape is fixed per record kind, so each
style compiles one template per (kind, options) from the field descriptions
(xo/records.py) and streams it. JSON builds plain functions the same way (no jinja2 to
load: start-up time), and text records are tables (table.py). emit() is plain code on purpose: a format string yields a few pieces whose
shape depends on writer state (first sibling or not, an open HTML line, units moving to
the preceding value), so a jinja2 render per call or per field would cost more than the
text it produces and express nothing a template could keep. Keep in sync with:
xo/writer.py (the caller) and ../shared/docs/libxo.md §4-§7 (what each style writes).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from xo.styles.base import Renderer

if TYPE_CHECKING:
    from xo.writer import Writer


# style -> (module, class): only the chosen style's module is imported (start-up time).
RENDERERS = {
    "text": ("xo.styles.text", "TextRenderer"),
    "xml": ("xo.styles.xml", "XmlRenderer"),
    "json": ("xo.styles.json", "JsonRenderer"),
    "html": ("xo.styles.html", "HtmlRenderer"),
}


def make_renderer(writer: Writer) -> Renderer:
    module, name = RENDERERS[writer.options.style]
    cls: type[Renderer] = getattr(importlib.import_module(module), name)
    return cls(writer)
