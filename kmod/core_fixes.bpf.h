/* SPDX-License-Identifier: GPL-2.0 */
/* core_fixes.bpf.h: what nettrail needs from the kernel beyond the tracepoints'
 * arguments and vmlinux.h's types, in one place (as libbpf-tools keeps its CO-RE
 * fallbacks in a header of this name): the kconfig value CONFIG_HZ, the
 * bpf_rdonly_cast kfunc, and how a program tells task context from softirq
 * (in_task). Each fallback says which kernels it is for.
 */
#ifndef __NT_CORE_FIXES_BPF_H
#define __NT_CORE_FIXES_BPF_H

#include "maps.bpf.h"

extern unsigned int CONFIG_HZ __kconfig __weak;

/* A jiffy in nanoseconds and in microseconds (1e9 or 1e6 / CONFIG_HZ, rounded down as
 * the division does; callers check CONFIG_HZ first), without a division at run time for
 * the usual HZ values: CONFIG_HZ is known to the verifier (.kconfig is frozen), which
 * removes the branches not taken, and ip-flows scales jiffies for every packet. */
static __always_inline __u64 jiffy_ns(void)
{
	if (CONFIG_HZ == 1000)
		return 1000000;
	if (CONFIG_HZ == 250)
		return 4000000;
	if (CONFIG_HZ == 100)
		return 10000000;
	return 1000000000 / CONFIG_HZ;
}

static __always_inline __u32 jiffy_us(void)
{
	if (CONFIG_HZ == 1000)
		return 1000;
	if (CONFIG_HZ == 250)
		return 4000;
	if (CONFIG_HZ == 100)
		return 10000;
	return 1000000 / CONFIG_HZ;
}

/* The bpf_rdonly_cast kfunc. libbpf's static linker before libbpf 1.5 (commit
 * 4b146e95da87, "libbpf: Do not resolve size on duplicate FUNCs") fails when two
 * objects both declare one kfunc ("global 'bpf_rdonly_cast': failed to resolve size
 * of underlying type"), and Debian 12's bpftool links with libbpf 1.1. So only the
 * first object of the link, attribution.bpf.c (NT_MAPS_DEFINE; first in the
 * Makefile's SRCS, and it must call the kfunc), declares it a ksym; the others
 * declare a plain extern function, which the linker binds to that declaration.
 * Both may be made __weak (tried: links with bpftool 7.1, loads on 6.18) and tested by
 * address, but a kernel before 6.4 refuses the unresolved call even then (below). */
#ifndef NT_COMPAT
#ifdef NT_MAPS_DEFINE
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;
#else
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id);
#endif
#endif

/* Kernels before 6.2 have no bpf_rdonly_cast, and until 6.4 the verifier rejects a call
 * to an unresolved kfunc even on a path it would prune, so no __weak declaration with
 * bpf_ksym_exists() can serve both: the Makefile builds a second object,
 * nettrail-compat.bpf.o, with NT_COMPAT, where the cast is a plain C cast and every load
 * through it a probe read. The loader opens that one when the kernel's BTF has no
 * bpf_rdonly_cast (collector/bpf/variants.py). NT_RD(p, field) and NT_RD_BITFIELD read
 * a field of a pointer that NT_CAST made. */
#ifdef NT_COMPAT
#define NT_CAST(p, type) ((const type *)(p))
#define NT_RD(p, field) BPF_CORE_READ(p, field)
#define NT_RD_BITFIELD(p, field) BPF_CORE_READ_BITFIELD_PROBED(p, field)
#else
#define NT_CAST(p, type) ((const type *)bpf_rdonly_cast(p, bpf_core_type_id_kernel(type)))
#define NT_RD(p, field) ((p)->field)
#define NT_RD_BITFIELD(p, field) BPF_CORE_READ_BITFIELD(p, field)
#endif


/* Before 6.0 a buffer has no alloc_cpu (it came with the deferred frees of
 * skb_attempt_defer_free(), which hand a read buffer back to its allocating CPU): a read
 * buffer is freed where it is read, so that CPU stands in for it. */
#define NT_SKB_ALLOC_CPU(skb)                                                    \
	(bpf_core_field_exists(((struct sk_buff *)0)->alloc_cpu) ? BPF_CORE_READ(skb, alloc_cpu) : \
								    bpf_get_smp_processor_id())

/* Before 5.12 the verifier knows no atomic instruction that returns what it replaced
 * (commit 5ca419f2864a "bpf: Introduce BPF_FETCH flag", commit 5ffa25502b5a "bpf: Add
 * instructions for atomic_[cmp]xchg"), and refuses a program holding one even in dead
 * code: its check of reserved fields runs over every instruction before verification. So
 * the Makefile builds nettrail-legacy.bpf.o for those kernels (Debian 11's 5.10) with
 * NT_LEGACY: a fetch-add is a load and then an atomic add (the sum stays exact; the
 * value read may miss another CPU's add at that moment), and siftr's flow_slots, claimed
 * by compare-and-swap, are not used (siftr.bpf.h, flow_slot): every flow is counted in the
 * `flows` hash map, which the collector reads as well. */
#ifdef NT_LEGACY
#define NT_FETCH_ADD(p, v)                         \
	({                                         \
		__typeof__(*(p)) __nt_old = *(p); \
		__sync_fetch_and_add(p, v);        \
		__nt_old;                          \
	})
#else
#define NT_FETCH_ADD(p, v) __sync_fetch_and_add(p, v)
#endif

/* current as a task_struct: bpf_get_current_task_btf() came with 5.11 (commit 3ca1032ab7ab
 * "bpf: Add bpf_get_current_task_btf helper"); the legacy object (before 5.12) takes
 * bpf_get_current_task()'s plain address, which only probe reads (BPF_CORE_READ) may
 * follow. */
static __always_inline struct task_struct *nt_current(void)
{
#ifdef NT_LEGACY
	return (struct task_struct *)bpf_get_current_task();
#else
	return bpf_get_current_task_btf();
#endif
}

/* Task context or not, as the kernel's own in_task() says (include/linux/preempt.h):
 * !(preempt_count() & (NMI_MASK | HARDIRQ_MASK | SOFTIRQ_OFFSET)), i.e. neither an NMI,
 * nor a hard interrupt, nor serving a softirq (a task that merely disabled bottom halves
 * is a task). The masks as include/linux/preempt.h lays the count out: 8 preemption
 * bits, 8 softirq bits, 4 hardirq bits, 4 NMI bits. */
#define NT_SOFTIRQ_OFFSET (1U << 8)
#define NT_HARDIRQ_MASK (0xfU << 16)
#define NT_NMI_MASK (0xfU << 20)

/* arm64, RISC-V, PowerPC and LoongArch keep preempt_count in struct thread_info, which
 * is inside task_struct (CONFIG_THREAD_INFO_IN_TASK): current's is read through CO-RE,
 * no symbol needed. x86 keeps it per CPU instead (__preempt_count; pcpu_hot.preempt_count
 * from 6.2, commit 64701838bf05 "x86/percpu: Move preempt_count next to current_task",
 * until 6.15 made it __preempt_count again). A typed ksym and bpf_this_cpu_ptr() would
 * name it, but the kernel resolves a typed ksym's address through kallsyms
 * (check_pseudo_btf_id, commit 4976b718c355 "bpf: Introduce pseudo_btf_id"), and per-CPU
 * data is in kallsyms only with CONFIG_KALLSYMS_ALL (this project's 6.18 VMs lack it;
 * libbpf cannot tell, and every program would fail to load). So the program finds this
 * CPU's per-CPU area another way: current (the task running on this CPU, or the one a
 * softirq interrupted) reaches this CPU's runqueue through current->se.cfs_rq->rq, the
 * per-CPU variable `runqueues`, and the preempt count is a fixed distance from it, which
 * the loader reads from the per-CPU section's BTF into cfg.preempt_from_rq
 * (collector/bpf/btf.py, preempt_count_from_runqueue). rq->cpu is checked against this
 * CPU before the count is trusted.
 * A kernel without that BTF (or without CONFIG_FAIR_GROUP_SCHED, which gives the link)
 * uses the kernel's softirq transitions instead: the programs in context.bpf.c set this
 * CPU's word in `softirq_cpus` at softirq_entry and clear it at softirq_exit, the
 * tracepoints handle_softirqs() (kernel/softirq.c) fires around each softirq handler
 * while SOFTIRQ_OFFSET is set, whether it runs at irq_exit, from local_bh_enable() in a
 * task or in ksoftirqd. What that cannot see: a hard interrupt taken in a task (counted
 * as the task's). The loader attaches them only then (they cost two runs per softirq). */
struct thread_info___nt {
	int preempt_count;
} __attribute__((preserve_access_index));

static __always_inline bool count_in_task(__u32 count)
{
	return !(count & (NT_NMI_MASK | NT_HARDIRQ_MASK | NT_SOFTIRQ_OFFSET));
}

/* ctx: unused (the test no longer looks at the stack); every program passes its own. */
static __always_inline bool in_task(void *ctx)
{
	__u32 zero = 0, *serving, count = 0;

	if (bpf_core_field_exists(struct thread_info___nt, preempt_count)) {
		struct task_struct *t = nt_current();
		struct thread_info___nt *ti = (struct thread_info___nt *)&t->thread_info;

		return count_in_task(BPF_CORE_READ(ti, preempt_count));
	}
	if (cfg.preempt_from_rq && bpf_core_field_exists(((struct sched_entity *)0)->cfs_rq) &&
	    bpf_core_field_exists(((struct cfs_rq *)0)->rq) && bpf_core_field_exists(((struct rq *)0)->cpu)) {
#ifdef NT_LEGACY
		/* probe reads: before 5.11 current is a plain address (nt_current) */
		struct rq *rq = BPF_CORE_READ(nt_current(), se.cfs_rq, rq);
		int cpu = rq ? BPF_CORE_READ(rq, cpu) : -1;
#else
		/* direct loads through BTF pointers; only the count, which has no type here, is
		 * a probe read */
		struct rq *rq = bpf_get_current_task_btf()->se.cfs_rq->rq;
		int cpu = rq ? rq->cpu : -1;
#endif

		/* never a wrong CPU's count: a task not answering for this CPU is not a task */
		if (!rq || cpu != (int)bpf_get_smp_processor_id() ||
		    bpf_probe_read_kernel(&count, sizeof(count), (void *)rq + cfg.preempt_from_rq))
			return false;
		return count_in_task(count);
	}
	serving = bpf_map_lookup_elem(&softirq_cpus, &zero);
	return !(serving && *serving);
}

#endif /* __NT_CORE_FIXES_BPF_H */
