"""The privileged agent: the BPF loader and ring reader (bpf/), the live capture source,
the sinks, the spool, host identity and self-health. The only package that runs as root;
it may import analysis/, xo/ and translators/, never the webapp or the CLI
(docs/architecture.md)."""
