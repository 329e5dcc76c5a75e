// SPDX-License-Identifier: GPL-2.0
/* tcp_functions.bpf.c: TCP's send and receive calls on a kernel without
 * sock_send_length / sock_recv_length (before Linux 6.3: Debian 12's 6.1, Debian 11's
 * 5.10), at the exits of tcp_sendmsg and tcp_recvmsg (fexit, BPF trampolines): the same
 * work as at those tracepoints (user_call.bpf.h), so every send and receive attributes its
 * socket to the caller, and tcpdebug gets its SEND/RCVD (SENDOOB/RCVOOB) user requests with
 * the bytes the call moved, hooks fexit/tcp_sendmsg and fexit/tcp_recvmsg. They run for
 * TCP calls only, whatever system call or kernel path made them (write, read, io_uring
 * included). Loaded only there (collector/bpf/loader.py, tcp_call_source); a kernel that
 * refuses them, or whose prototypes differ, keeps connect/listen/close attribution and no
 * SEND/RCVD, as it says in `degraded`.
 *
 * What they do not see, where the tracepoint would: calls that never reach tcp_sendmsg /
 * tcp_recvmsg (a sendfile/splice's data through tcp_sendpage, tcp_splice_read; a kTLS or
 * sockmap socket, whose own sendmsg/recvmsg call the _locked variants or none).
 *
 * The socket is a BTF pointer, as at sock_send_length. The send flags are the msghdr's
 * (sock_sendmsg puts them there, as the tracepoint reads them); tcp_recvmsg takes
 * (sk, msg, len, flags, addr_len) from 5.19 and (sk, msg, len, nonblock, flags, addr_len)
 * before: one program each, the loader enables the one the kernel's BTF declares
 * (collector/bpf/variants.py, TCP_FUNCTION_ARGS).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "nettrail.h"
#include "user_call.bpf.h"

SEC("fexit/tcp_sendmsg")
int BPF_PROG(tcp_sendmsg, struct sock *sk, struct msghdr *msg, size_t size, int ret)
{
	user_call(sk, ret, BPF_CORE_READ(msg, msg_flags), PRU_SEND, PRU_SENDOOB, NT_DEBUG_HOOK_FN, ctx);
	return 0;
}

SEC("fexit/tcp_recvmsg")
int BPF_PROG(tcp_recvmsg, struct sock *sk, struct msghdr *msg, size_t len, int flags, int *addr_len, int ret)
{
	user_call(sk, ret, flags, PRU_RCVD, PRU_RCVOOB, NT_DEBUG_HOOK_FN, ctx);
	return 0;
}

/* before 5.19 (Debian 11's 5.10): a nonblock parameter before flags */
SEC("fexit/tcp_recvmsg")
int BPF_PROG(tcp_recvmsg__6, struct sock *sk, struct msghdr *msg, size_t len, int nonblock, int flags, int *addr_len,
	     int ret)
{
	user_call(sk, ret, flags, PRU_RCVD, PRU_RCVOOB, NT_DEBUG_HOOK_FN, ctx);
	return 0;
}
