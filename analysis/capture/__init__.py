"""Capture files as record sources: pcap/pcapng (bulk, numpy) and SIFTR logs, read and
decoded without Django or privileges, for ``nettrail analyze``, the agent's live capture
(which shares the ``Batch`` layout) and the webapp's upload."""
