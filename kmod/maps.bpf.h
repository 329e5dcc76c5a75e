/* SPDX-License-Identifier: GPL-2.0 */
/* maps.bpf.h: every map and global variable of nettrail's BPF object. All providers
 * share them: one ring buffer (`events`), one set of loss counters, one socket-owner
 * map, one `cfg`. attribution.bpf.c defines NT_MAPS_DEFINE before including this
 * header and so holds the one definition of each; every other .bpf.c declares them
 * extern, and `bpftool gen object` (kmod/Makefile) links the references to that
 * definition, so the linked nettrail.bpf.o has each map once, as before the split.
 *
 * Filters fixed at start are in `cfg` (struct nt_config, nettrail.h), written by the
 * loader between open and load (collector/bpf/loader.py), so disabled paths are
 * removed by the verifier's dead-code elimination. The loader may resize `events`
 * and `ip_flows` before load.
 */
#ifndef __NT_MAPS_BPF_H
#define __NT_MAPS_BPF_H

#ifdef NT_MAPS_DEFINE
#define NT_MAP
#define NT_GLOBAL(decl, init) decl = init
#else
#define NT_MAP extern
#define NT_GLOBAL(decl, init) extern decl
#endif

NT_GLOBAL(const volatile struct nt_config cfg, {});

NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 * 1024 * 1024); /* the loader may resize it before load */
} events SEC(".maps");

NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nt_counters);
} counters SEC(".maps");

/* Per CPU: 1 while the CPU serves a softirq (softirq_entry .. softirq_exit, context.bpf.c),
 * for in_task() (core_fixes.bpf.h) */
NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} softirq_cpus SEC(".maps");

NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct nt_owner);
} owners SEC(".maps");

NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct nt_listen_key);
	__type(value, struct nt_owner);
} listeners SEC(".maps");

NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct nt_flow);
} flows SEC(".maps");

/* SIFTR flows' counters, one 64-byte slot per flow at its cookie's low bits: the
 * per-packet path's one cache line (an array lookup is inlined; a hash lookup is a call,
 * a hash, a bucket and an element over two lines). Cookies are handed out in sequence
 * (per CPU, in batches), so live flows rarely share a slot; a flow that finds its slot
 * taken is counted in `flows` instead. The collector reads the slots through mmap. */
#define NT_FLOW_SLOTS 32768
NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NT_FLOW_SLOTS);
	__uint(map_flags, BPF_F_MMAPABLE); /* and so page-aligned: a slot is a cache line */
	__type(key, __u32);
	__type(value, struct nt_flow);
} flow_slots SEC(".maps");

/* SIFTR flows the filters rejected (see flow_admit): cookie -> 1 */
NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u8);
} flows_out SEC(".maps");

/* siftr-poll's sockets: cookie -> what its last sample showed (siftr_poll.bpf.c), made
 * when the socket reaches ESTABLISHED (tcp.bpf.c) or at its first poll, deleted at
 * tcp_destroy_sock (the LRU bounds what a socket destroyed while siftr-poll was not
 * chosen leaves). */
NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct nt_polled);
} polled SEC(".maps");

/* The owner map's version: bumped on every change to it, so a hint below is trusted
 * only while no owner changed anywhere. */
NT_GLOBAL(__u64 owner_epoch, 0);

/* Per CPU, in slots by socket address: the last TCP socket of that slot a send/recv
 * found its caller owning, and owner_epoch then. The same thread on the same socket
 * with nothing changed since is the steady state of every busy connection; the hint
 * answers it without the owner-map lookup (a hash, its bucket and its element: cache
 * misses after each bulk copy to or from user space). Slots, not one
 * entry: both ends of a loopback connection often share a CPU and would evict each
 * other's hint on every call. */
#define NT_OWNER_HINTS 64
struct nt_owner_hint {
	__u64 sk;
	__u64 pid_tgid;
	__u64 epoch;
};

NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NT_OWNER_HINTS);
	__type(key, __u32);
	__type(value, struct nt_owner_hint);
} owner_hints SEC(".maps");

NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct nt_drop_key);
	__type(value, __u64);
} drops SEC(".maps");

NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nt_drop_budget);
} drop_budget SEC(".maps");

/* What a TCP socket held at its change to CLOSE (struct nt_closed), for the records that
 * follow a tcp_disconnect(), which zeroes it. Deleted at tcp_destroy_sock. */
NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct nt_closed);
} closed SEC(".maps");

/* The address an unconnected UDP socket's call sends to or received from, by thread
 * (pid_tgid), as the cgroup sock_addr programs saw it (udp_peer.bpf.c), until the call's
 * sock_send_length / sock_recv_length takes it (udp_call, udp.bpf.h). */
struct nt_udp_peer {
	__u64 cookie; /* the socket's: a stale entry of another socket is not taken */
	__u8 addr[NT_ADDR_LEN];
	__u16 port; /* host order */
	__u16 family;
	__u32 _pad;
};

NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64);
	__type(value, struct nt_udp_peer);
} udp_peers SEC(".maps");

/* UDP senders by (netns, local port): a datagram dropped at the receiver has no
 * socket, but its source port names the sending socket on this host. */
NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct nt_listen_key);
	__type(value, struct nt_owner);
} port_owners SEC(".maps");

NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384); /* the collector may resize it before load (--ip-flows-max) */
	__type(key, struct nt_ip_flow_key);
	__type(value, struct nt_ip_flow);
} ip_flows SEC(".maps");

/* ip_packet's flow key and a new entry's first value, per CPU: off its stack frame, which
 * a verifier before 6.14 adds to the hook's (512 bytes for the chain of calls; 6.1 and
 * 6.12 refused the frame with them). Used within one run of a packet hook: nothing on
 * the same CPU runs either hook inside the other (bottom halves are off at both). */
struct nt_ip_scratch {
	struct nt_ip_flow_key key;
	struct nt_ip_flow init;
};

NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nt_ip_scratch);
} ip_scratch SEC(".maps");

/* ip-flows' per-CPU slots (nettrail.h, nt_ip_slot); the collector sizes it to
 * NT_IP_SLOTS per possible CPU before load (a CPU past the end counts in ip_flows) and
 * reads it through mmap, as flow_slots. */
NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NT_IP_SLOTS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct nt_ip_slot);
} ip_slots SEC(".maps");

NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct nt_udp_flow_key);
	__type(value, struct nt_udp_flow);
} udp_flows SEC(".maps");

/* Ports of IPv4 datagrams whose first fragment was seen, for their later fragments
 * (ip.bpf.c); the last fragment deletes the entry, the LRU drops those never completed. */
NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct nt_frag_key);
	__type(value, __u32);
} frag_ports SEC(".maps");

/* skb lifecycles: identity by address (providers.md 9.2) */
NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct nt_skb_id);
} skbs SEC(".maps");

NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u32);
} skb_gens SEC(".maps");

NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} skb_uids SEC(".maps");

/* Which addresses may hold a followed lifetime (the cheap question every skb hook asks
 * first, nettrail.h) */
NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_ARRAY); /* one value of 4 KiB: one inlined lookup, then an index */
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nt_skb_follow);
} skb_follow SEC(".maps");

/* --skb-sample N: the buffers not followed (so their later sightings are not new
 * lifetimes), and the exact per-CPU counts of lifetimes seen and followed */
NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_ARRAY); /* an inlined index, no lock: this runs for every buffer */
	__uint(max_entries, NT_SKB_SKIP_SLOTS);
	__type(key, __u32);
	__type(value, struct nt_skb_skip);
} skb_skip_slots SEC(".maps");

NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nt_skb_sampling);
} skb_sampling SEC(".maps");

/* --skb-window: whether a window is open, written by the collector (nettrail.h) */
NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nt_skb_window);
} skb_window SEC(".maps");

/* inferred consumes (no tracepoint where TCP/UDP free a read buffer): per-task reads
 * awaiting their recvmsg's sock_recv_length, and per-port UDP arrival queues */
NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct nt_skb_reads);
} skb_reads SEC(".maps");

NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nt_skb_reads);
} skb_reads_zero SEC(".maps"); /* never written: the zero value new entries copy */

NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct nt_udp_rxq_key);
	__type(value, struct nt_udp_rxq_val);
} udp_rxq SEC(".maps");

NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct nt_udp_rxq_key);
	__type(value, struct nt_udp_rxq_ends);
} udp_rxq_ends SEC(".maps");

#ifdef NT_LEGACY
/* Before 5.12 a tracing program cannot ask for a socket's cookie (attribution.bpf.h,
 * cookie_of): a socket the kernel gave none yet gets a substitute, kept here by its
 * address (sock_key) until that address is a new socket's (sock_create) or the LRU
 * evicts it; cookie_next numbers the substitutes per CPU. */
NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u64);
} cookie_subs SEC(".maps");

NT_MAP struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} cookie_next SEC(".maps");
#endif

#endif /* __NT_MAPS_BPF_H */
