"""Reports and exports of stored records: xo styles, SIFTR logs, pcap (issue 9)."""
