"""Live record sources of the agent: the scapy capture (live.py); the kernel source is collector/bpf/source.py, capture files are read by analysis/capture/."""
