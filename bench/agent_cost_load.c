/* The workloads of bench/bench_agent_cost.py: loopback traffic whose whole CPU cost is in
 * this one process (client and server threads; loopback's softirq runs in the sending
 * thread and is charged to it), so traced and untraced runs compare by getrusage.
 *
 *   agent_cost_load storm N THREADS   N connections: connect, 100 bytes each way, close
 *   agent_cost_load bulk BYTES        one TCP connection, BYTES in 128 KiB writes
 *   agent_cost_load udp N THREADS     N request/response pairs of 100-byte datagrams
 *
 * Prints "<elapsed ns> <user+system CPU ns of the process>". Keep in sync with
 * bench/bench_agent_cost.py. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MSG 100
#define CHUNK (128 * 1024)

static struct sockaddr_in addr;
static long per_thread;
static long long bulk_bytes;
static atomic_int failures;

static void die(const char *what) {
	perror(what);
	exit(1);
}

static int full_read(int fd, char *buf, size_t n) {
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, buf + got, n - got);
		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	return 0;
}

static int listener(int type) {
	int fd = socket(AF_INET, type, 0), one = 1;
	if (fd < 0)
		die("socket");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)))
		die("bind");
	if (type == SOCK_STREAM && listen(fd, 4096))
		die("listen");
	socklen_t len = sizeof(addr);
	getsockname(fd, (struct sockaddr *)&addr, &len);
	return fd;
}

/* storm: each server thread accepts, echoes 100 bytes, waits for the close, closes */
static void *storm_server(void *arg) {
	int lfd = *(int *)arg;
	char buf[MSG];
	for (;;) {
		int c = accept(lfd, NULL, NULL);
		if (c < 0) {
			if (errno == EINVAL || errno == EBADF)
				return NULL; /* shut down: the run is over */
			continue;
		}
		if (full_read(c, buf, MSG) == 0 && write(c, buf, MSG) == MSG)
			(void)read(c, buf, 1); /* the client's FIN */
		close(c);
	}
}

static void *storm_client(void *arg) {
	(void)arg;
	char buf[MSG];
	memset(buf, 'x', MSG);
	for (long i = 0; i < per_thread; i++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof(addr)) || write(fd, buf, MSG) != MSG ||
		    full_read(fd, buf, MSG))
			atomic_fetch_add(&failures, 1);
		close(fd);
	}
	return NULL;
}

static void *bulk_reader(void *arg) {
	int fd = *(int *)arg;
	char *buf = malloc(CHUNK);
	while (read(fd, buf, CHUNK) > 0) {
	}
	free(buf);
	return NULL;
}

static void *udp_server(void *arg) {
	int fd = *(int *)arg;
	char buf[MSG];
	struct sockaddr_in from;
	for (;;) {
		socklen_t len = sizeof(from);
		ssize_t n = recvfrom(fd, buf, MSG, 0, (struct sockaddr *)&from, &len);
		if (n <= 0)
			return NULL; /* shut down */
		sendto(fd, buf, (size_t)n, 0, (struct sockaddr *)&from, len);
	}
}

static void *udp_client(void *arg) {
	(void)arg;
	char buf[MSG];
	memset(buf, 'x', MSG);
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	struct timeval tv = {.tv_sec = 1};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)))
		die("connect udp");
	for (long i = 0; i < per_thread; i++) {
		if (send(fd, buf, MSG, 0) != MSG || recv(fd, buf, MSG, 0) != MSG)
			atomic_fetch_add(&failures, 1); /* loopback loses none unless a buffer overflows */
	}
	close(fd);
	return NULL;
}

static long long now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void run(void *(*client)(void *), void *(*server)(void *), int *sfd, int threads) {
	pthread_t s[64], c[64];
	for (int i = 0; i < threads; i++)
		pthread_create(&s[i], NULL, server, sfd);
	for (int i = 0; i < threads; i++)
		pthread_create(&c[i], NULL, client, NULL);
	for (int i = 0; i < threads; i++)
		pthread_join(c[i], NULL);
	shutdown(*sfd, SHUT_RDWR); /* wakes the servers' accept / recvfrom */
	for (int i = 0; i < threads; i++)
		pthread_join(s[i], NULL);
}

int main(int argc, char **argv) {
	if (argc < 3)
		return fprintf(stderr, "usage: %s storm N THREADS | bulk BYTES | udp N THREADS\n", argv[0]), 2;
	const char *mode = argv[1];
	int threads = argc > 3 ? atoi(argv[3]) : 1;
	if (threads < 1 || threads > 64)
		return fprintf(stderr, "THREADS: 1 to 64\n"), 2;
	long long start = now_ns();
	if (!strcmp(mode, "storm")) {
		per_thread = atol(argv[2]) / threads;
		int lfd = listener(SOCK_STREAM);
		run(storm_client, storm_server, &lfd, threads);
	} else if (!strcmp(mode, "udp")) {
		per_thread = atol(argv[2]) / threads;
		int sfd = listener(SOCK_DGRAM);
		run(udp_client, udp_server, &sfd, threads);
	} else if (!strcmp(mode, "bulk")) {
		bulk_bytes = atoll(argv[2]);
		int lfd = listener(SOCK_STREAM), tx = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(tx, (struct sockaddr *)&addr, sizeof(addr)))
			die("connect");
		int rx = accept(lfd, NULL, NULL);
		pthread_t r;
		pthread_create(&r, NULL, bulk_reader, &rx);
		char *buf = calloc(1, CHUNK);
		for (long long sent = 0; sent < bulk_bytes;) {
			ssize_t n = write(tx, buf, CHUNK);
			if (n <= 0)
				die("write");
			sent += n;
		}
		close(tx);
		pthread_join(r, NULL);
		close(rx);
		close(lfd);
	} else {
		return fprintf(stderr, "unknown mode %s\n", mode), 2;
	}
	long long elapsed = now_ns() - start;
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	long long cpu = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000LL +
			(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000LL;
	if (atomic_load(&failures))
		return fprintf(stderr, "%d requests failed\n", atomic_load(&failures)), 1;
	printf("%lld %lld\n", elapsed, cpu);
	return 0;
}
