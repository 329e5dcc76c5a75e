"""Per-connection analysis of decoded packets: Wireshark-semantics TCP analysis flags,
Zeek-style connection summaries, and the capture pipeline that turns batches into
Connection records and pcap alerts."""
