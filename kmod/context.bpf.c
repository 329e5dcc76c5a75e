// SPDX-License-Identifier: GPL-2.0
/* context.bpf.c: when each CPU serves a softirq (softirq_entry, softirq_exit), loaded
 * only on a kernel where in_task() cannot read the preempt count (core_fixes.bpf.h; the
 * loader's context_source()). Attribution trusts `current` only in task context: these
 * two programs keep this CPU's word in `softirq_cpus` at 1 from the moment
 * handle_softirqs() enters a softirq handler until it leaves it, which is exactly when
 * the kernel's in_serving_softirq() is true. Softirqs do not nest on one CPU, so one word
 * per CPU is the whole state. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "nettrail.h"
#include "maps.bpf.h"

static __always_inline void serving_softirq(__u32 on)
{
	__u32 zero = 0, *serving = bpf_map_lookup_elem(&softirq_cpus, &zero);

	if (serving)
		*serving = on;
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(softirq_entry, unsigned int vec_nr)
{
	serving_softirq(1);
	return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(softirq_exit, unsigned int vec_nr)
{
	serving_softirq(0);
	return 0;
}
