"""Exports of stored or analysed records: reports (xo styles), SIFTR logs, pcap files."""
