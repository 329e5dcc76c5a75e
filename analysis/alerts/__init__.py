"""Stream analysis of records: TCP analysis flags, connection summaries, anomaly rules.

Modules here never do I/O on their own except notify.py; they consume records from
``translators.records`` and produce records of the same schema (Alert, Connection).
"""

from __future__ import annotations
