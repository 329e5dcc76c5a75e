"""skb lifecycle records (the mbuf provider) and the kernel's per-flow counters.

Buffer events and drops with their lifecycle identity, per-reason drop counts, socket
events, and the per-flow counters the kernel aggregates for TCP/UDP and IP flows.

Keep in sync with: ``../shared/docs/providers.md`` §7-8 (skb, Linux-only events),
translators/skb.py, translators/ip_flows.py, translators/kernel.py,
docs/records/ (python -m translators.docgen).
"""

from __future__ import annotations

from typing import Annotated

from translators.records_envelope import FlowRecord, Record
from translators.records_fields import Bool, Int, Str, doc


class SkbRecord(FlowRecord, kw_only=True):
    """The mbufinfo equivalent (providers.md 7.2)."""

    len: Annotated[Int, doc("skb->len", unit="bytes", brief=True)] = None
    linear_len: Annotated[Int, doc("bytes in the linear part", unit="bytes")] = None
    data_off: Annotated[Int, doc("skb->data - skb->head", unit="bytes")] = None
    truesize: Annotated[Int, doc("memory charged for the buffer", unit="bytes")] = None
    nr_frags: Annotated[Int, doc("paged fragments")] = None
    gso_segs: Annotated[Int, doc("GSO/GRO segments")] = None
    gso_size: Annotated[Int, doc("GSO segment size", unit="bytes")] = None
    pkt_type: Annotated[Int, doc("0 HOST 1 BROADCAST 2 MULTICAST 3 OTHERHOST 4 OUTGOING 5 LOOPBACK")] = None
    cloned: Annotated[Bool, doc("the data is shared with a clone")] = None
    protocol: Annotated[Int, doc("ethertype (skb->protocol)", hexa=True)] = None
    l4_proto: Annotated[Str, doc("transport protocol parsed from the headers (tcp, udp, icmp, ...)", brief=True)] = None
    if_index: Annotated[Int, doc("interface index")] = None
    if_name: Annotated[Str, doc("interface name", brief=True)] = None
    mark: Annotated[Int, doc("skb->mark", hexa=True)] = None
    m_flags_compat: Annotated[Int, doc("synthesized FreeBSD M_* flags", hexa=True)] = None


class SkbEvent(SkbRecord, tag="skb_event", kw_only=True):
    """One stage of a buffer's life: first seen, queued, transmitted, delivered, copied, consumed."""

    stage: Annotated[str, doc("stage: rx-first, tx-first, queue, xmit, rx-deliver, copy, retransmit, consume, last-seen", brief=True)]
    rc: Annotated[Int, doc("driver return code at net_dev_xmit (0 ok)")] = None
    since_prev_ns: Annotated[Int, doc("time since the previous stage of this buffer", unit="ns", brief=True)] = None
    since_first_ns: Annotated[Int, doc("time since the buffer was first seen", unit="ns")] = None
    end: Annotated[Str, doc("how the lifecycle ended, on terminal stages", choices=("consumed", "dropped", "last_seen"))] = None


class SkbDrop(SkbRecord, tag="skb_drop", kw_only=True):
    """m-free (drop): kfree_skb with its reason and kernel location."""

    drop_reason: Annotated[int, doc("enum skb_drop_reason value on this kernel")]
    drop_reason_str: Annotated[str, doc("drop reason name from the kernel's BTF, e.g. NO_SOCKET", brief=True, index=True)]
    drop_location: Annotated[Str, doc("kernel function and offset that dropped it, e.g. udp_queue_rcv_one_skb+0x1f4", brief=True)] = None
    since_first_ns: Annotated[Int, doc("time since the buffer was first seen", unit="ns")] = None


class DropCount(Record, tag="drop_count", kw_only=True):
    """Exact drops per (reason, location, protocol) from the in-kernel map, even when events are rate-limited."""

    drop_reason_str: Annotated[str, doc("drop reason name", key=True, brief=True, index=True)]
    drop_location: Annotated[Str, doc("kernel function and offset", key=True, brief=True)] = None
    protocol: Annotated[Int, doc("ethertype", key=True, hexa=True)] = None
    count: Annotated[int, doc("drops counted since the collector started", brief=True)]
    delta: Annotated[int, doc("drops since the previous report", brief=True)] = 0


class SockEvent(FlowRecord, tag="sock_event", kw_only=True):
    """Linux socket-level events: rcvqueue-full, exceed-buf-limit, udp-fail-queue, error-report,
    send-error/receive-error (a UDP send or receive call that failed, e.g. ECONNREFUSED after an ICMP error),
    and listen-overflow (a TCP listener whose accept queue was full when its namespace's ListenOverflows moved,
    read by the collector through sock_diag: src/sport the listener, queue and backlog as `ss -ltn` shows them)."""

    proto: Annotated[Str, doc("socket protocol (tcp, udp, ...)", brief=True)] = None
    rc: Annotated[Int, doc("return code or negative errno", brief=True)] = None
    rmem_alloc: Annotated[Int, doc("receive memory allocated to the socket", unit="bytes")] = None
    truesize: Annotated[Int, doc("truesize of the buffer that did not fit", unit="bytes")] = None
    rcvbuf: Annotated[Int, doc("socket receive buffer limit", unit="bytes")] = None
    sk_err: Annotated[Int, doc("socket error (errno)")] = None
    queue: Annotated[Int, doc("listen-overflow: connections waiting in the accept queue (ss -ltn's Recv-Q)", brief=True)] = None
    backlog: Annotated[Int, doc("listen-overflow: the accept queue's limit, the listen() backlog capped by net.core.somaxconn (ss -ltn's Send-Q)")] = None


class FlowCounters(FlowRecord, tag="flow_counters", kw_only=True):
    """Exact per-flow counters kept in the kernel regardless of sampling (ppl)."""

    proto: Annotated[str, doc("transport protocol", choices=("tcp", "udp", "udplite"), brief=True)]
    packets_in: Annotated[int, doc("packets received (tcp: segments, the socket's segs_in as ss -tin shows it)", brief=True)] = 0
    packets_out: Annotated[int, doc("packets sent (tcp: segments incl. retransmissions, ss's segs_out)", brief=True)] = 0
    bytes_in: Annotated[int, doc("payload bytes received (tcp: in-order bytes, a received FIN counts 1: ss's bytes_received)", unit="bytes", brief=True)] = 0
    bytes_out: Annotated[int, doc("payload bytes sent (tcp: retransmissions included, ss's bytes_sent)", unit="bytes", brief=True)] = 0
    samples: Annotated[int, doc("sample records emitted for this flow")] = 0
    skbs: Annotated[Int, doc("tcp: buffers siftr saw (tcp_probe in, net_dev_queue out), of which buffer k was sampled if k % ppl == 0")] = None


class IpFlowCounters(FlowRecord, tag="ip_flow_counters", kw_only=True):
    """ip-flows (the ip provider's always-on mode): exact packet and byte counts of one flow
    in one direction on one interface, kept in the kernel and reported periodically."""

    direction: Annotated[str, doc("send (net_dev_queue) or receive (netif_receive_skb)", choices=("send", "receive"), key=True, brief=True)]
    if_index: Annotated[int, doc("interface index", key=True)]
    protocol: Annotated[int, doc("IP protocol number (IPv4 protocol / IPv6 next header)", key=True)]
    protocol_name: Annotated[Str, doc("IP protocol name (TCP, UDP, ICMP, ...)", brief=True)] = None
    packets: Annotated[int, doc("packets (skbs at the device, as tcpdump counts them) since the entry was created", brief=True)]
    bytes: Annotated[int, doc("IP bytes (header and payload) since the entry was created", unit="bytes", brief=True)]
    packets_delta: Annotated[int, doc("packets since the previous report of this entry")]
    bytes_delta: Annotated[int, doc("IP bytes since the previous report of this entry", unit="bytes")]
    samples: Annotated[int, doc("ip_packet records emitted for this entry (--ip-sample)")] = 0
    sampling: Annotated[Int, doc("one ip_packet record per this many packets of the entry (--ip-sample); none: counters only")] = None
    start_ts_ns: Annotated[Int, doc("kernel time the entry was created (a new value: the entry was evicted and recreated)", unit="ns")] = None
    end_ts_ns: Annotated[Int, doc("kernel time of the entry's last packet", unit="ns")] = None
