// SPDX-License-Identifier: GPL-2.0
/* A program that runs for milliseconds: tests/test_collect_detach.py's settle test
 * detaches it while a run is under way and checks that settling waits for that run. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

/* [0] the thread whose system calls run the program, [1] runs begun, [2] runs ended */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 3);
	__type(key, __u32);
	__type(value, __u64);
} state SEC(".maps");

static long spin(__u64 index, void *count)
{
	(*(__u64 *)count)++;
	return 0;
}

SEC("tp_btf/sys_enter")
int slow(void *ctx)
{
	__u32 thread = 0, begun = 1, ended = 2;
	__u64 *tid = bpf_map_lookup_elem(&state, &thread), *b, *e, count = 0;

	if (!tid || *tid != (__u32)bpf_get_current_pid_tgid())
		return 0;
	b = bpf_map_lookup_elem(&state, &begun);
	e = bpf_map_lookup_elem(&state, &ended);
	if (!b || !e)
		return 0;
	__sync_fetch_and_add(b, 1);
	bpf_loop(1 << 23, spin, &count, 0); /* the most one call may loop: about 8 ms here */
	__sync_fetch_and_add(e, 1);
	return 0;
}
