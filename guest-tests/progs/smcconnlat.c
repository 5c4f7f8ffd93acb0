/* smcconnlat.c - connection set-up latency, by the method of the commit the project grew
 * from (net/smc 1c5526968e27, "Clear memory when release and reuse buffer"): each socket
 * gets SO_SNDBUF 16384 and SO_RCVBUF 131072 before connect(); connections are made in
 * rounds (batches), one after the other, each connect -> 1-byte exchange -> close; the
 * time measured is socket() + setsockopt() + connect(), with CLOCK_MONOTONIC.
 *
 *   smcconnlat server --port=P [--tcp] [--conns=N] [--rounds=R]
 *   smcconnlat client --host=H --port=P [--tcp] [--conns=N] [--rounds=R]
 *
 * Both sides: N connections per round (default 100), R rounds (default 5). After each
 * connection's exchange (outside the measured time) the side asks AF_SMC sock_diag how
 * the socket runs; a connection that is not SMC-D fails the run (--tcp: AF_INET sockets,
 * the TCP reference). When tracefs is mounted, each side writes "ismexp round=R" into
 * trace_marker at the start of each round, so that the kernel's own timings (kprobe
 * events, guest-tests/progs/smcexp) can be split by round.
 *
 * Output (stdout), the client per round:
 *   CONNLAT round=R conns=N smcd=K fallback=F p50_us= p90_us= p99_us= mean_us= max_us=
 *   CONNLAT_US round=R first=I us=V,V,...      (every sample, 50 per line, in order)
 * both sides at the end:
 *   SUMMARY test=connlat side=S conns=N smcd=K ok | FAIL first_error=...
 */
#define _GNU_SOURCE
#include "common.h"
#include "smcdiag.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define SEED_SNDBUF 16384
#define SEED_RCVBUF 131072
#define SAMPLES_PER_LINE 50
#define IO_TIMEOUT_S 60

static struct {
	int server, tcp, port, conns, rounds, accept_timeout;
	char host[64];
} o = { .port = 12350, .conns = 100, .rounds = 5, .accept_timeout = 600 };

static int g_marker = -1; /* tracefs trace_marker, or -1 */
static int g_conns, g_smcd, g_fallback, g_failed;
static char g_first_error[256];

static void fail_once(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail_once(const char *fmt, ...)
{
	va_list ap;
	char msg[256];

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	err_line("%s", msg);
	if (!g_failed++)
		snprintf(g_first_error, sizeof(g_first_error), "%s", msg);
}

static void usage_exit(void)
{
	fprintf(stderr, "usage: smcconnlat server|client [--host=A] [--port=P] [--conns=N] "
			"[--rounds=R] [--tcp] [--accept-timeout=S]\n");
	exit(2);
}

static int int_opt(const char *arg, const char *name, int *v)
{
	size_t n = strlen(name);
	char *end;
	long x;

	if (strncmp(arg, name, n) || arg[n] != '=')
		return 0;
	x = strtol(arg + n + 1, &end, 10);
	if (*end || x < 0 || x > 1000000)
		usage_exit();
	*v = (int)x;
	return 1;
}

static void parse(int argc, char **argv)
{
	if (argc < 2)
		usage_exit();
	if (!strcmp(argv[1], "server"))
		o.server = 1;
	else if (strcmp(argv[1], "client"))
		usage_exit();
	snprintf(o.host, sizeof(o.host), "10.0.0.1");
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--tcp"))
			o.tcp = 1;
		else if (!strncmp(a, "--host=", 7))
			snprintf(o.host, sizeof(o.host), "%s", a + 7);
		else if (!int_opt(a, "--port", &o.port) && !int_opt(a, "--conns", &o.conns) &&
			 !int_opt(a, "--rounds", &o.rounds) &&
			 !int_opt(a, "--accept-timeout", &o.accept_timeout))
			usage_exit();
	}
	if (!o.conns || !o.rounds)
		usage_exit();
}

static void mark_round(int round)
{
	char line[64];
	int n;

	if (g_marker < 0)
		return;
	n = snprintf(line, sizeof(line), "ismexp round=%d\n", round);
	if (write(g_marker, line, (size_t)n) < 0)
		g_marker = -1; /* tracing went away: the timings just lose their rounds */
}

static int new_socket(void)
{
	int fd = o.tcp ? socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)
		       : socket(AF_SMC, SOCK_STREAM | SOCK_CLOEXEC, SMCPROTO_SMC);
	int snd = SEED_SNDBUF, rcv = SEED_RCVBUF;

	if (fd < 0)
		return -1;
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &snd, sizeof(snd)) ||
	    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv))) {
		close(fd);
		return -1;
	}
	return fd;
}

/* How the connection runs: counted, and a failure of the run unless it is SMC-D. */
static void check_mode(int fd, int idx)
{
	struct smc_info in;
	struct stat st;
	char err[256] = "";

	g_conns++;
	if (o.tcp)
		return;
	if (fstat(fd, &st) || smcdiag_query((uint64_t)st.st_ino, &in, err, sizeof(err))) {
		fail_once("conn %d: sock_diag: %s", idx, err[0] ? err : strerror(errno));
		return;
	}
	if (in.found && in.mode == SMC_DIAG_MODE_SMCD_) {
		g_smcd++;
		return;
	}
	if (in.found && in.mode == SMC_DIAG_MODE_FALLBACK_TCP_) {
		g_fallback++;
		fail_once("conn %d fell back to TCP: reason 0x%08x %s", idx, in.fb_reason,
			  smc_reason_name(in.fb_reason));
		return;
	}
	fail_once("conn %d: %s in sock_diag (mode %u)", idx, in.found ? "not SMC-D" : "not found",
		  in.found ? in.mode : 0);
}

static void print_round(int round, const double *us, int n, int smcd, int fallback)
{
	double *s = malloc(sizeof(*s) * (size_t)n), sum = 0;
	char line[SAMPLES_PER_LINE * 12 + 64];

	if (!s || !n) {
		free(s);
		return;
	}
	memcpy(s, us, sizeof(*s) * (size_t)n);
	qsort(s, (size_t)n, sizeof(*s), cmp_double);
	for (int i = 0; i < n; i++)
		sum += s[i];
	out_line("CONNLAT round=%d conns=%d smcd=%d fallback=%d p50_us=%.1f p90_us=%.1f p99_us=%.1f "
		 "mean_us=%.1f max_us=%.1f",
		 round, n, smcd, fallback, quantile(s, (size_t)n, 0.5), quantile(s, (size_t)n, 0.9),
		 quantile(s, (size_t)n, 0.99), sum / n, s[n - 1]);
	for (int i = 0; i < n; i += SAMPLES_PER_LINE) {
		size_t len = (size_t)snprintf(line, sizeof(line), "CONNLAT_US round=%d first=%d us=", round, i);

		for (int j = i; j < n && j < i + SAMPLES_PER_LINE; j++)
			len += (size_t)snprintf(line + len, sizeof(line) - len, "%s%.1f", j > i ? "," : "", us[j]);
		out_line("%s", line);
	}
	free(s);
}

static int summary(void)
{
	if (g_failed)
		out_line("SUMMARY test=connlat side=%s conns=%d smcd=%d FAIL first_error=%s",
			 o.server ? "server" : "client", g_conns, g_smcd, g_first_error);
	else
		out_line("SUMMARY test=connlat side=%s conns=%d smcd=%d ok", o.server ? "server" : "client",
			 g_conns, g_smcd);
	return g_failed ? 1 : 0;
}

/* One connection, client side: returns the set-up time in µs, or a negative value. */
static double client_conn(const struct sockaddr_in *sa, int idx)
{
	char err[128], b = 'q';
	double t0, t1;
	int fd;

	t0 = now_s();
	fd = new_socket();
	if (fd < 0) {
		fail_once("conn %d: socket/setsockopt: %s", idx, strerror(errno));
		return -1;
	}
	if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa))) {
		if (errno == ECONNREFUSED && !idx) {
			close(fd);
			return -2; /* the server is not listening yet: try again */
		}
		fail_once("conn %d: connect %s:%d: %s", idx, o.host, o.port, strerror(errno));
		close(fd);
		return -1;
	}
	t1 = now_s();
	if (set_timeouts(fd, IO_TIMEOUT_S) || send_all(fd, &b, 1, err, sizeof(err)) ||
	    recv_all(fd, &b, 1, 0, err, sizeof(err))) {
		fail_once("conn %d: exchange: %s", idx, err);
		close(fd);
		return -1;
	}
	check_mode(fd, idx);
	close(fd);
	return (t1 - t0) * 1e6;
}

static int run_client(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)o.port) };
	double *us = calloc((size_t)o.conns, sizeof(*us));

	if (!us || parse_ipv4(o.host, &sa.sin_addr)) {
		fail_once("bad host %s or out of memory", o.host);
		return summary();
	}
	for (int r = 1; r <= o.rounds && !g_failed; r++) {
		int smcd0 = g_smcd, fb0 = g_fallback, n = 0;

		mark_round(r);
		for (int i = 0; i < o.conns && !g_failed; i++) {
			double v = client_conn(&sa, (r - 1) * o.conns + i);

			/* Only the first connection of the run may wait for the server. */
			for (int tries = 0; v == -2 && tries < 300; tries++) {
				sleep_ms(200);
				v = client_conn(&sa, (r - 1) * o.conns + i);
			}
			if (v == -2)
				fail_once("connect %s:%d: the server never listened (60 s)", o.host, o.port);
			if (v >= 0)
				us[n++] = v;
		}
		print_round(r, us, n, g_smcd - smcd0, g_fallback - fb0);
	}
	free(us);
	return summary();
}

static int run_server(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)o.port) };
	int lfd = new_socket(), one = 1, total = o.conns * o.rounds;
	char err[128], b;

	if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, 128)) {
		fail_once("listen on port %d: %s", o.port, strerror(errno));
		return summary();
	}
	for (int i = 0; i < total && !g_failed; i++) {
		struct pollfd p = { .fd = lfd, .events = POLLIN };
		int fd;

		if (i % o.conns == 0)
			mark_round(i / o.conns + 1);
		if (poll(&p, 1, o.accept_timeout * 1000) != 1) {
			fail_once("conn %d: no connection within %d s", i, o.accept_timeout);
			break;
		}
		fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			fail_once("conn %d: accept: %s", i, strerror(errno));
			break;
		}
		if (set_timeouts(fd, IO_TIMEOUT_S) || recv_all(fd, &b, 1, 0, err, sizeof(err))) {
			fail_once("conn %d: request: %s", i, err);
		} else {
			check_mode(fd, i);
			if (send_all(fd, &b, 1, err, sizeof(err)))
				fail_once("conn %d: response: %s", i, err);
			else if (recv_all(fd, &b, 1, 1, err, sizeof(err)) != 1)
				fail_once("conn %d: the client did not close after the exchange", i);
		}
		close(fd);
	}
	close(lfd);
	return summary();
}

int main(int argc, char **argv)
{
	parse(argc, argv);
	signal(SIGPIPE, SIG_IGN);
	g_side = o.server ? "connlat-server" : "connlat-client";
	g_marker = open("/sys/kernel/tracing/trace_marker", O_WRONLY | O_CLOEXEC);
	if (o.tcp)
		err_line("NOTE: --tcp: AF_INET sockets, the TCP reference; SMC is not exercised");
	return o.server ? run_server() : run_client();
}
