"""Record sources: kernel (BPF), capture files (pcap/pcapng) and SIFTR logs."""
