/* For tests/test_collect_udp_calls.py: a 64-bit process that makes one 32-bit system call
 * (int $0x80: getgid, number 47) whose registers, read as a 64-bit call, say recvmsg (47)
 * on the fd of a UDP socket in %rdi; then one real 64-bit sendto of a byte to 127.0.0.1:9,
 * which is a call to record. Prints the socket's port. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>

int main(void)
{
	struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(9)};
	struct sockaddr_in me;
	socklen_t len = sizeof(me);
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	long ret;

	if (fd < 0)
		return 2;
	__asm__ volatile("int $0x80" : "=a"(ret) : "a"(47L), "D"((long)fd) : "memory");
	if (ret < 0)
		return 3; /* no 32-bit system calls on this kernel */
	inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
	if (sendto(fd, "x", 1, 0, (struct sockaddr *)&to, sizeof(to)) != 1)
		return 4;
	getsockname(fd, (struct sockaddr *)&me, &len);
	printf("%d\n", ntohs(me.sin_port));
	return 0;
}
