/* SPDX-License-Identifier: GPL-2.0 */
/* core_fixes.bpf.h: what nettrail needs from the kernel beyond the tracepoints'
 * arguments and vmlinux.h's types, in one place (as libbpf-tools keeps its CO-RE
 * fallbacks in a header of this name): the kconfig value CONFIG_HZ, the
 * bpf_rdonly_cast kfunc, and how a program tells task context from softirq
 * (in_task). Each fallback says which kernels it is for.
 */
#ifndef __NT_CORE_FIXES_BPF_H
#define __NT_CORE_FIXES_BPF_H

/* arch/x86/include/asm/page_64_types.h: THREAD_SIZE without KASAN (16 KiB) */
#define NT_THREAD_SIZE 16384
#define PF_KTHREAD 0x00200000

extern unsigned int CONFIG_HZ __kconfig __weak;

/* The bpf_rdonly_cast kfunc. libbpf's static linker before libbpf 1.5 (commit
 * 4b146e95da87, "libbpf: Do not resolve size on duplicate FUNCs") fails when two
 * objects both declare one kfunc ("global 'bpf_rdonly_cast': failed to resolve size
 * of underlying type"), and Debian 12's bpftool links with libbpf 1.1. So only the
 * first object of the link, attribution.bpf.c (NT_MAPS_DEFINE; first in the
 * Makefile's SRCS, and it must call the kfunc), declares it a ksym; the others
 * declare a plain extern function, which the linker binds to that declaration. */
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


/* Task or softirq context? preempt_count is a per-CPU variable that is not in
 * kallsyms without CONFIG_KALLSYMS_ALL, so it cannot be read as a typed ksym.
 * Instead: x86-64 runs softirqs on the per-CPU IRQ stack (do_softirq_own_stack,
 * CONFIG_HAVE_SOFTIRQ_ON_OWN_STACK), and a tp_btf program's ctx is the argument
 * array bpf_trace_runN() keeps on the kernel stack in use. (The program's own
 * frame is no guide: since 6.14 tracing programs may run on a private per-CPU
 * stack.) So ctx outside the task's stack means softirq (or hardirq). ksoftirqd
 * runs softirqs on its own task stack: caught by name. An interrupt that hits
 * user mode does not switch stacks (the task stack is empty), and irq_exit runs
 * the pending softirqs right there, on the task stack: that task entered the
 * kernel by an interrupt, not a system call, so its entry frame's orig_ax is -1
 * (a system call keeps its number there, >= 0). Timer-fired retransmissions
 * that interrupt a user process are softirq by that test. */
static __always_inline bool in_task(void *ctx)
{
	struct task_struct *t = bpf_get_current_task_btf();
	__u64 base = (__u64)t->stack; /* direct loads: current is a trusted BTF pointer */
	void *args = ctx;
	__u64 here = 0;
	char comm[10];

	/* copy the address out as a plain number (the verifier forbids math on ctx) */
	bpf_probe_read_kernel(&here, sizeof(here), &args);
	if (here - base >= NT_THREAD_SIZE)
		return false;
	if (!(t->flags & PF_KTHREAD)) {
		struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(t);

		return regs && (long)regs->orig_ax >= 0;
	}
	bpf_get_current_comm(comm, sizeof(comm));
	return !(comm[0] == 'k' && comm[1] == 's' && comm[2] == 'o' && comm[3] == 'f' && comm[4] == 't' &&
		 comm[5] == 'i' && comm[6] == 'r' && comm[7] == 'q' && comm[8] == 'd');
}

#endif /* __NT_CORE_FIXES_BPF_H */
