// SPDX-License-Identifier: GPL-2.0
/* udp_syscalls.bpf.c: the udp providers' call records on a kernel without
 * sock_send_length / sock_recv_length (before Linux 6.3) that also refuses the fexit
 * programs of udp_functions.bpf.c, the cheaper source: from the system calls that send and
 * receive datagrams: sendto, sendmsg, sendmmsg, recvfrom, recvmsg, recvmmsg. Loaded only
 * then (collector/bpf/loader.py, udp_call_source).
 *
 * One program at the exit of every system call (raw_syscalls:sys_exit, a BTF tracepoint:
 * the cheaper path; the syscalls:sys_*_<name> events cost a perf record per call: 1.065-1.070
 * of untraced against this one's 1.044, docs/benchmarks.md): the call's number and arguments are still in
 * the caller's registers, so a call that is not one of the six returns at once, and one
 * that is finds the socket behind its descriptor; if that is a UDP socket, the record is
 * made from the socket and the call's result. The socket pointer comes from probe reads
 * (the descriptor table), so every read of it is one, and its cookie is the one already
 * assigned (0 if nobody asked for it yet). The peer of an unconnected socket's call is read
 * from the caller's memory (the address it passed to a send, the one the kernel wrote for
 * a receive that asked for it).
 *
 * What this source does not see (said as a degradation, collector/bpf/variants.py):
 * datagrams sent or read with write/read/writev/readv, sendfile or io_uring; and of a
 * sendmmsg/recvmmsg, messages past the first NT_MMSG_MAX, which are counted lost. The
 * system call numbers are the build machine's (x86-64 or arm64); a 32-bit process's calls
 * are not recorded.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <asm/unistd.h>
#include "nettrail.h"
#include "attribution.bpf.h"
#include "udp.bpf.h"

#define NT_S_IFMT 0170000
#define NT_S_IFSOCK 0140000
#define NT_MMSG_MAX 32

/* The call's number, and its sixth argument (libbpf 1.1, Debian 12's, has macros up to the
 * fifth). A 32-bit process's calls have other numbers: on x86 they are told apart
 * (TS_COMPAT) and never taken for these; elsewhere only the build machine's ABI is known. */
#if defined(__TARGET_ARCH_x86)
#define NT_SYSCALL_NR(regs) (compat_call() ? -1L : (long)(regs)->orig_ax)
#define NT_SYSCALL_ARG6(regs) BPF_CORE_READ(regs, r9)
#define NT_TS_COMPAT 0x0002 /* arch/x86/include/asm/thread_info.h */
static __always_inline bool compat_call(void)
{
	struct task_struct *t = nt_current(); /* core_fixes.bpf.h: before 5.11 a plain address */

	return BPF_CORE_READ(t, thread_info.status) & NT_TS_COMPAT;
}
#elif defined(__TARGET_ARCH_arm64)
#define NT_SYSCALL_NR(regs) ((regs)->syscallno)
#define NT_SYSCALL_ARG6(regs) BPF_CORE_READ(regs, regs[5])
#else
#define NT_SYSCALL_NR(regs) (-1L) /* no system call is recognised: said in docs/collector.md */
#define NT_SYSCALL_ARG6(regs) 0
#endif

/* The user ABI's struct msghdr and struct mmsghdr (64-bit): fixed, not the kernel's types. */
struct nt_user_msghdr {
	__u64 name;
	__u32 namelen;
	__u32 _pad;
	__u64 iov;
	__u64 iovlen;
	__u64 control;
	__u64 controllen;
	__u32 flags;
	__u32 _pad2;
};

struct nt_user_mmsghdr {
	struct nt_user_msghdr hdr;
	__u32 len;
	__u32 _pad;
};

/* A UDP call at its exit: the socket and the caller's pointer to the peer's address
 * (sendto/recvfrom), its msghdr (sendmsg/recvmsg) or its mmsghdr vector (sendmmsg/recvmmsg). */
struct nt_udp_syscall {
	const struct sock *sk;
	__u64 user;
	__u64 len;  /* sendto: the address's length; recvfrom: the pointer to it */
	__u8 call;  /* nt_udp_body.call: NT_UDP_CALL_TO, _MSG or _MMSG */
	__u8 dir;   /* 1 send, 0 receive */
};

/* The socket behind the calling task's descriptor fd, if it is a UDP one. */
static __always_inline const struct sock *udp_sock_of_fd(long fd)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	struct file **fds;
	struct file *file = NULL;
	struct socket *sock;
	const struct sock *sk;
	__u16 proto;

	if (!fdt || fd < 0 || fd >= BPF_CORE_READ(fdt, max_fds))
		return NULL;
	fds = BPF_CORE_READ(fdt, fd);
	if (bpf_probe_read_kernel(&file, sizeof(file), &fds[fd]) || !file)
		return NULL;
	if ((BPF_CORE_READ(file, f_inode, i_mode) & NT_S_IFMT) != NT_S_IFSOCK)
		return NULL;
	sock = BPF_CORE_READ(file, private_data);
	sk = sock ? BPF_CORE_READ(sock, sk) : NULL;
	if (!sk)
		return NULL;
	proto = BPF_CORE_READ(sk, sk_protocol);
	return (proto == IPPROTO_UDP || proto == IPPROTO_UDPLITE) ? sk : NULL;
}

/* fill_flow's work for a socket pointer read from memory (probe reads only). */
static __always_inline void udp_flow_read(struct nt_header *h, const struct sock *sk)
{
	h->cookie = cookie_read(sk);
	h->family = BPF_CORE_READ(sk, __sk_common.skc_family);
	h->sport = BPF_CORE_READ(sk, __sk_common.skc_num);
	h->dport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
	h->netns = BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum);
	if (h->family == AF_INET) {
		__u32 s = BPF_CORE_READ(sk, __sk_common.skc_rcv_saddr);
		__u32 d = BPF_CORE_READ(sk, __sk_common.skc_daddr);

		__builtin_memcpy(h->saddr, &s, 4);
		__builtin_memcpy(h->daddr, &d, 4);
	} else if (h->family == AF_INET6) {
		bpf_core_read(h->saddr, NT_ADDR_LEN, &sk->__sk_common.skc_v6_rcv_saddr);
		bpf_core_read(h->daddr, NT_ADDR_LEN, &sk->__sk_common.skc_v6_daddr);
	}
}

/* Whether a record of this socket's call would pass the filters: what cannot be recorded
 * is counted only if it would have been. */
static __always_inline bool udp_sys_wanted(const struct sock *sk)
{
	struct nt_header h = {};

	udp_flow_read(&h, sk);
	attribute(&h, NT_EV_UDP, hook_call(true));
	return pass(&h);
}

/* One record of a call that moved `ret` bytes (or failed with -errno), its peer from
 * the caller's sockaddr at `addr` when the socket has none. */
static __always_inline void udp_sys_record(const struct nt_udp_syscall *c, long ret, __u64 addr, __u32 addrlen)
{
	const struct sock *sk = c->sk;
	struct nt_header h = {};

	udp_flow_read(&h, sk);
	if (!h.dport && ret >= 0)
		udp_peer_read(&h, addr, addrlen, true);
	udp_call_emit(&h, (int)ret, c->dir, BPF_CORE_READ(sk, sk_protocol), c->call, hook_call(true));
}

/* sendto(fd, buf, len, flags, addr, addrlen) / recvfrom(fd, buf, len, flags, addr,
 * *addrlen): a receive's length is the one the kernel wrote back. */
static __always_inline void udp_sys_exit_to(const struct nt_udp_syscall *c, long ret)
{
	__u32 len = (__u32)c->len;

	if (!c->dir && ret >= 0) {
		len = 0;
		if (c->len)
			bpf_probe_read_user(&len, sizeof(len), (void *)c->len);
	}
	udp_sys_record(c, ret, c->user, len);
}

static __always_inline void udp_sys_exit_msg(const struct nt_udp_syscall *c, long ret)
{
	struct nt_user_msghdr m = {};

	if (ret >= 0 && c->user)
		bpf_probe_read_user(&m, sizeof(m), (void *)c->user);
	udp_sys_record(c, ret, m.name, m.namelen);
}

/* A record per message sent or received (ret is their number), up to NT_MMSG_MAX; the
 * rest are counted lost. A failure before the first message is one failed call. */
static __always_inline void udp_sys_exit_mmsg(const struct nt_udp_syscall *c, long ret)
{
	struct nt_user_mmsghdr m;
	long i;

	if (ret <= 0) {
		if (ret < 0)
			udp_sys_record(c, ret, 0, 0);
		return;
	}
	for (i = 0; i < NT_MMSG_MAX && i < ret; i++) {
		__builtin_memset(&m, 0, sizeof(m));
		if (bpf_probe_read_user(&m, sizeof(m), (void *)(c->user + i * sizeof(m))))
			break;
		udp_sys_record(c, m.len, m.hdr.name, m.hdr.namelen);
	}
	if (i < ret && udp_sys_wanted(c->sk))
		count_unrecorded(NT_EV_UDP, ret - i);
}


/* Every system call's exit: one of the six on a UDP socket becomes its records. */
SEC("tp_btf/sys_exit")
int BPF_PROG(sys_exit, struct pt_regs *regs, long ret)
{
	struct nt_udp_syscall c = {};
	long nr = NT_SYSCALL_NR(regs);

	switch (nr) {
	case __NR_sendto:
	case __NR_recvfrom:
		c.call = NT_UDP_CALL_TO;
		c.user = PT_REGS_PARM5_CORE_SYSCALL(regs);
		c.len = NT_SYSCALL_ARG6(regs);
		break;
	case __NR_sendmsg:
	case __NR_recvmsg:
		c.call = NT_UDP_CALL_MSG;
		c.user = PT_REGS_PARM2_CORE_SYSCALL(regs);
		break;
	case __NR_sendmmsg:
	case __NR_recvmmsg:
		c.call = NT_UDP_CALL_MMSG;
		c.user = PT_REGS_PARM2_CORE_SYSCALL(regs);
		break;
	default:
		return 0;
	}
	if (!(cfg.providers & (NT_PROV_UDP | NT_PROV_UDP_CALLS)) || cfg.udp_calls_from != NT_UDP_FROM_SYSCALLS)
		return 0;
	c.dir = nr == __NR_sendto || nr == __NR_sendmsg || nr == __NR_sendmmsg;
	c.sk = udp_sock_of_fd(PT_REGS_PARM1_CORE_SYSCALL(regs));
	if (!c.sk)
		return 0;
	if (c.call == NT_UDP_CALL_TO)
		udp_sys_exit_to(&c, ret);
	else if (c.call == NT_UDP_CALL_MSG)
		udp_sys_exit_msg(&c, ret);
	else
		udp_sys_exit_mmsg(&c, ret);
	return 0;
}
