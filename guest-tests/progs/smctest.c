/* smctest.c - SMC-D guest test program: echo, stream, seq, concurrent.
 *
 * Wire protocol per connection (all integers big endian):
 *   client -> server  HELLO  48 bytes: magic "SMCT", version, test, conn idx,
 *                            stream bytes (u64), echo rounds, echo size, seed (u64)
 *   client -> server  stream phase: <bytes> of pattern(stream_seed)
 *   echo phase, <rounds> times: client sends <size> bytes of pattern(echo_seed(r)),
 *                            server checks and sends back what it received
 *   server            queries sock_diag for its socket (connection still open)
 *   server -> client  RESULT 40 bytes: magic "SMCR", status, bytes received (u64),
 *                            FNV-1a 64 of the stream (u64), echo rounds ok, first bad offset (u64)
 *   client            queries sock_diag, closes; server waits for EOF, closes.
 */
#define _GNU_SOURCE
#include "common.h"
#include "smcdiag.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define HELLO_MAGIC 0x534d4354u  /* "SMCT" */
#define RESULT_MAGIC 0x534d4352u /* "SMCR" */
#define PROTO_VERSION 1
#define HELLO_LEN 48
/* hello + 40, flags: the client closes once its stream is sent, and waits for no result
 * (--close-after-send); the server reads the stream, then end of file. */
#define HELLO_F_CLOSE_AFTER_SEND 1ULL
#define RESULT_LEN 40
#define CHUNK (64 * 1024)

enum { ST_OK = 0, ST_STREAM_BAD = 1, ST_ECHO_BAD = 2, ST_HELLO_BAD = 3 };

struct conn_res {
	int idx;
	int ok;          /* everything on this connection passed */
	int mode_ok;     /* SMC-D (or tolerated) */
	int smcd, smcr, fallback, notfound;
	uint64_t bytes;
	uint64_t checksum;
	uint32_t rounds;
	double secs;
	char why[320];
};

struct summary {
	pthread_mutex_t mu;
	int conns, ok, smcd, smcr, fallback, notfound, failed;
	uint64_t bytes, echo_rounds, checksum_xor;
	char first_fail[360];
	double t0;
};

static struct summary g_sum = { .mu = PTHREAD_MUTEX_INITIALIZER };
static char g_watchdog_msg[512];

static void on_alarm(int sig)
{
	ssize_t r;

	(void)sig;
	r = write(2, g_watchdog_msg, strlen(g_watchdog_msg));
	r = write(1, g_watchdog_msg, strlen(g_watchdog_msg));
	(void)r;
	_exit(3);
}

static void arm_watchdog(void)
{
	snprintf(g_watchdog_msg, sizeof(g_watchdog_msg),
		 "SUMMARY test=%s side=%s FAIL first_error=watchdog: not finished after %d s (--timeout)\n",
		 g_opt.test_name, g_side, g_opt.watchdog);
	signal(SIGALRM, on_alarm);
	alarm((unsigned int)g_opt.watchdog);
}

static uint64_t stream_seed(uint64_t seed, uint32_t idx)
{
	return mix64(mix64(seed) ^ ((uint64_t)idx << 20) ^ 0x5354524541ULL);
}

static uint64_t echo_seed(uint64_t seed, uint32_t idx, uint32_t round)
{
	return mix64(mix64(seed ^ 0xec40ec40ULL) ^ ((uint64_t)idx << 32) ^ round);
}

static size_t first_diff(const unsigned char *a, const unsigned char *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (a[i] != b[i])
			return i;
	return n;
}

static void sum_add(const struct conn_res *r)
{
	pthread_mutex_lock(&g_sum.mu);
	g_sum.conns++;
	g_sum.smcd += r->smcd;
	g_sum.smcr += r->smcr;
	g_sum.fallback += r->fallback;
	g_sum.notfound += r->notfound;
	if (r->ok) {
		g_sum.ok++;
	} else {
		g_sum.failed++;
		if (!g_sum.first_fail[0])
			snprintf(g_sum.first_fail, sizeof(g_sum.first_fail), "conn %d: %s", r->idx, r->why);
	}
	g_sum.bytes += r->bytes;
	g_sum.echo_rounds += r->rounds;
	g_sum.checksum_xor ^= r->checksum;
	pthread_mutex_unlock(&g_sum.mu);
}

static void fail(struct conn_res *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(struct conn_res *r, const char *fmt, ...)
{
	va_list ap;
	char msg[320];

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	r->ok = 0;
	if (!r->why[0])
		snprintf(r->why, sizeof(r->why), "%s", msg);
	err_line("ERROR conn %d: %s", r->idx, msg);
}

/* Ask the kernel how this connection runs; fill the mode part of the CONN line. */
static void check_mode(int fd, struct conn_res *r, char *line, size_t linelen)
{
	struct stat st;
	char err[256] = "";

	line[0] = 0;
	if (fstat(fd, &st)) {
		fail(r, "fstat(socket): %s", strerror(errno));
		snprintf(line, linelen, "mode=ERROR");
		return;
	}
	if (g_opt.tcp) {
		int found = 0, state = 0;

		if (tcpdiag_query((uint64_t)st.st_ino, &found, &state, err, sizeof(err))) {
			fail(r, "%s", err);
			snprintf(line, linelen, "mode=TCP-TESTAID diag=ERROR");
			return;
		}
		if (!found) {
			r->notfound = 1;
			fail(r, "socket inode %llu not in the inet sock_diag dump", (unsigned long long)st.st_ino);
		}
		r->mode_ok = found;
		snprintf(line, linelen, "mode=TCP-TESTAID tcp_state=%d inode=%llu", state,
			 (unsigned long long)st.st_ino);
		return;
	}

	struct smc_info in;

	if (smcdiag_query((uint64_t)st.st_ino, &in, err, sizeof(err))) {
		fail(r, "%s", err);
		snprintf(line, linelen, "mode=ERROR");
		return;
	}
	if (!in.found) {
		r->notfound = 1;
		fail(r, "%s", err);
		snprintf(line, linelen, "mode=NOTFOUND inode=%llu", (unsigned long long)st.st_ino);
		return;
	}

	char loc[80], peer[80], a[INET6_ADDRSTRLEN];
	struct sockaddr_storage own;
	socklen_t ol = sizeof(own);

	/* sock_diag does not say the TCP socket's family (diag_family is AF_SMC's); the
	 * socket's own name does (an AF_SMC socket's is its TCP socket's). */
	if (getsockname(fd, (struct sockaddr *)&own, &ol) == 0 && own.ss_family == AF_INET6) {
		snprintf(loc, sizeof(loc), "[%s]:%u", inet_ntop(AF_INET6, in.src6, a, sizeof(a)), in.sport);
		snprintf(peer, sizeof(peer), "[%s]:%u", inet_ntop(AF_INET6, in.dst6, a, sizeof(a)), in.dport);
	} else {
		snprintf(loc, sizeof(loc), "%s:%u", inet_ntop(AF_INET, &in.src, a, sizeof(a)), in.sport);
		snprintf(peer, sizeof(peer), "%s:%u", inet_ntop(AF_INET, &in.dst, a, sizeof(a)), in.dport);
	}

	if (in.mode == SMC_DIAG_MODE_SMCR_ && g_opt.smcr) {
		r->smcr = 1;
		r->mode_ok = 1;
		snprintf(line, linelen,
			 "mode=SMCR state=%s local=%s peer=%s link_id=%u ibdev=%s ibport=%u role=%s gid=%.40s "
			 "peer_gid=%.40s inode=%llu",
			 smc_state_name(in.state), loc, peer, in.link_id, in.have_lgr ? in.ibname : "-",
			 in.ibport, in.lgr_role ? "server" : "client", in.have_lgr ? in.lnk_gid : "-",
			 in.have_lgr ? in.lnk_peer_gid : "-", (unsigned long long)in.inode);
		if (!in.have_lgr)
			fail(r, "SMC-R connection without SMC_DIAG_LGRINFO in sock_diag");
		return;
	}

	if (in.mode == SMC_DIAG_MODE_SMCD_) {
		size_t n;

		r->smcd = 1;
		r->mode_ok = 1;
		if (g_opt.smcr)
			fail(r, "connection runs SMC-D, not SMC-R (--smcr)");
		n = (size_t)snprintf(line, linelen,
			"mode=SMCD state=%s local=%s peer=%s token=0x%016llx peer_token=0x%016llx "
			"my_gid=0x%016llx peer_gid=0x%016llx linkid=0x%08x",
			smc_state_name(in.state), loc, peer,
			(unsigned long long)in.token, (unsigned long long)in.peer_token,
			(unsigned long long)in.my_gid, (unsigned long long)in.peer_gid, in.linkid);
		if (n < linelen && in.have_gid_ext)
			n += (size_t)snprintf(line + n, linelen - n, " my_gid_ext=0x%016llx peer_gid_ext=0x%016llx",
					      (unsigned long long)in.my_gid_ext,
					      (unsigned long long)in.peer_gid_ext);
		if (n < linelen && in.have_conn)
			n += (size_t)snprintf(line + n, linelen - n,
					      " conn_token=0x%08x rmbe=%u peer_rmbe=%u sndbuf=%u",
					      in.conn_token, in.rmbe_size, in.peer_rmbe_size, in.sndbuf_size);
		if (n < linelen)
			snprintf(line + n, linelen - n, " inode=%llu", (unsigned long long)in.inode);
		if (!in.have_dmb)
			fail(r, "SMC-D connection without SMC_DIAG_DMBINFO in sock_diag");
		return;
	}

	if (in.mode == SMC_DIAG_MODE_FALLBACK_TCP_) {
		r->fallback = 1;
		snprintf(line, linelen,
			 "mode=FALLBACK state=%s local=%s peer=%s reason=0x%08x reason_name=%s "
			 "peer_diag=0x%08x peer_diag_name=%s inode=%llu",
			 smc_state_name(in.state), loc, peer, in.fb_reason, smc_reason_name(in.fb_reason),
			 in.fb_peer_diag, smc_reason_name(in.fb_peer_diag), (unsigned long long)in.inode);
		err_line("conn %d fell back to TCP: reason 0x%08x %s (%s); peer diagnosis 0x%08x %s (%s)",
			 r->idx, in.fb_reason, smc_reason_name(in.fb_reason), smc_reason_text(in.fb_reason),
			 in.fb_peer_diag, smc_reason_name(in.fb_peer_diag), smc_reason_text(in.fb_peer_diag));
		if (g_opt.allow_fallback) {
			r->mode_ok = 1;
			err_line("(--allow-fallback: not counted as an error)");
		} else {
			fail(r, "TCP fallback, reason 0x%08x %s (%s), peer diagnosis 0x%08x %s", in.fb_reason,
			     smc_reason_name(in.fb_reason), smc_reason_text(in.fb_reason), in.fb_peer_diag,
			     smc_reason_name(in.fb_peer_diag));
		}
		return;
	}

	snprintf(line, linelen, "mode=%s diag_mode=%u state=%s local=%s peer=%s inode=%llu",
		 smc_mode_name(in.mode), in.mode, smc_state_name(in.state), loc, peer,
		 (unsigned long long)in.inode);
	fail(r, "connection runs %s (diag_mode %u), not %s", smc_mode_name(in.mode), in.mode,
	     g_opt.smcr ? "SMC-R" : "SMC-D");
}

static void print_conn(const char *side, const struct conn_res *r, const char *modeline)
{
	out_line("CONN test=%s idx=%d side=%s %s bytes=%llu rounds=%u checksum=0x%016llx secs=%.3f verify=%s",
		 g_opt.test_name, r->idx, side, modeline, (unsigned long long)r->bytes, r->rounds,
		 (unsigned long long)r->checksum, r->secs, r->ok ? "ok" : "FAIL");
}

static int print_summary(void)
{
	double secs = now_s() - g_sum.t0;
	int ok = g_sum.failed == 0 && g_sum.conns == g_opt.conns && g_sum.ok == g_opt.conns;
	char tail[400];

	if (ok)
		snprintf(tail, sizeof(tail), "ok");
	else if (g_sum.first_fail[0])
		snprintf(tail, sizeof(tail), "FAIL first_error=%s", g_sum.first_fail);
	else
		snprintf(tail, sizeof(tail), "FAIL first_error=only %d of %d connections completed",
			 g_sum.conns, g_opt.conns);
	/* smcr= only with --smcr: scripts match the line's usual fields in their order. */
	char smcr[32] = "";

	if (g_opt.smcr)
		snprintf(smcr, sizeof(smcr), " smcr=%d", g_sum.smcr);
	out_line("SUMMARY test=%s side=%s conns=%d smcd=%d fallback=%d notfound=%d failed=%d bytes=%llu "
		 "rounds=%llu checksum=0x%016llx secs=%.3f%s%s %s",
		 g_opt.test_name, g_side, g_sum.conns, g_sum.smcd, g_sum.fallback, g_sum.notfound,
		 g_sum.failed + (g_opt.conns - g_sum.conns), (unsigned long long)g_sum.bytes,
		 (unsigned long long)g_sum.echo_rounds, (unsigned long long)g_sum.checksum_xor, secs,
		 smcr, g_opt.tcp ? " tcp-testaid=1" : "", tail);
	return ok ? 0 : 1;
}

/* ====================================================================== */
/* server                                                                 */

struct srv_arg {
	int fd;
	int seq; /* accept order, used until the hello tells the real idx */
};

static void server_conn(int fd, int accept_no)
{
	struct conn_res r;
	unsigned char hello[HELLO_LEN], result[RESULT_LEN];
	unsigned char *buf = NULL, *exp = NULL;
	char err[256], modeline[768] = "mode=UNCHECKED";
	uint32_t status = ST_OK, rounds_ok = 0;
	uint64_t bad_off = ~0ULL, h = FNV64_INIT, got = 0;
	double t0 = now_s();
	int rc;

	memset(&r, 0, sizeof(r));
	r.idx = accept_no;
	r.ok = 1;
	if (set_timeouts(fd, g_opt.io_timeout)) {
		fail(&r, "setsockopt(SO_RCVTIMEO/SO_SNDTIMEO): %s", strerror(errno));
		goto out;
	}
	rc = recv_all(fd, hello, sizeof(hello), 1, err, sizeof(err));
	if (rc) {
		fail(&r, "hello: %s", rc > 0 ? "client closed without sending anything" : err);
		check_mode(fd, &r, modeline, sizeof(modeline));
		goto out;
	}
	if (get_be32(hello) != HELLO_MAGIC || get_be32(hello + 4) != PROTO_VERSION) {
		fail(&r, "bad hello (magic 0x%08x version %u): peer is not smctest?", get_be32(hello),
		     get_be32(hello + 4));
		check_mode(fd, &r, modeline, sizeof(modeline));
		goto out;
	}
	uint32_t test = get_be32(hello + 8);
	r.idx = (int)get_be32(hello + 12);
	uint64_t bytes = get_be64(hello + 16);
	uint32_t rounds = get_be32(hello + 24);
	uint32_t size = get_be32(hello + 28);
	uint64_t seed = get_be64(hello + 32);
	uint64_t flags = get_be64(hello + 40);

	if (test != (uint32_t)g_opt.test) {
		fail(&r, "client runs test %u, this server runs %s (%u)", test, g_opt.test_name, g_opt.test);
		status = ST_HELLO_BAD;
	}
	if (size > (16u << 20)) {
		fail(&r, "bad echo size %u in hello", size);
		check_mode(fd, &r, modeline, sizeof(modeline));
		goto out;
	}
	buf = malloc(CHUNK > size ? CHUNK : size);
	exp = malloc(CHUNK > size ? CHUNK : size);
	if (!buf || !exp) {
		fail(&r, "out of memory");
		goto out;
	}

	if (flags & HELLO_F_CLOSE_AFTER_SEND)
		/* the client may close before we read: ask the kernel now */
		check_mode(fd, &r, modeline, sizeof(modeline));
	if (g_opt.abandon_ms) {
		/* a reader that goes away: the stream stays unread, so the close is an abort
		 * (as TCP's is a reset); the connection is done once the mode is known */
		if (!(flags & HELLO_F_CLOSE_AFTER_SEND))
			check_mode(fd, &r, modeline, sizeof(modeline));
		sleep_ms(g_opt.abandon_ms);
		goto out;
	}
	if (g_opt.read_delay_ms)
		sleep_ms(g_opt.read_delay_ms);

	/* stream phase: check every byte, checksum everything received */
	uint64_t sseed = stream_seed(seed, (uint32_t)r.idx);
	while (got < bytes) {
		size_t n = bytes - got > CHUNK ? CHUNK : (size_t)(bytes - got);

		if (recv_all(fd, buf, n, 0, err, sizeof(err))) {
			fail(&r, "stream phase at byte %llu of %llu: %s", (unsigned long long)got,
			     (unsigned long long)bytes, err);
			check_mode(fd, &r, modeline, sizeof(modeline));
			goto out;
		}
		size_t d = bad_off == ~0ULL ? pattern_check(sseed, got, buf, n) : n;

		if (d < n) {
			pattern_fill(sseed, got, exp, n);
			bad_off = got + d;
			status = ST_STREAM_BAD;
			fail(&r, "stream data mismatch at byte %llu: got 0x%02x expected 0x%02x",
			     (unsigned long long)bad_off, buf[d], exp[d]);
		}
		h = fnv1a64(h, buf, n);
		got += n;
	}
	r.bytes = got;
	r.checksum = h;

	if (flags & HELLO_F_CLOSE_AFTER_SEND) {
		unsigned char extra;

		/* every byte came: now the client's close, and nothing after it */
		rc = recv_all(fd, &extra, 1, 1, err, sizeof(err));
		if (rc == 0)
			fail(&r, "data after the stream's %llu bytes", (unsigned long long)got);
		else if (rc < 0)
			fail(&r, "waiting for the client's close: %s", err);
		goto out;
	}

	/* echo phase */
	for (uint32_t i = 0; i < rounds; i++) {
		if (recv_all(fd, buf, size, 0, err, sizeof(err))) {
			fail(&r, "echo round %u: %s", i, err);
			check_mode(fd, &r, modeline, sizeof(modeline));
			goto out;
		}
		pattern_fill(echo_seed(seed, (uint32_t)r.idx, i), 0, exp, size);
		if (memcmp(buf, exp, size)) {
			size_t d = first_diff(buf, exp, size);

			if (status == ST_OK) {
				status = ST_ECHO_BAD;
				bad_off = d;
			}
			fail(&r, "echo round %u: request mismatch at byte %zu: got 0x%02x expected 0x%02x", i,
			     d, buf[d], exp[d]);
		} else {
			rounds_ok++;
		}
		if (send_all(fd, buf, size, err, sizeof(err))) {
			fail(&r, "echo round %u: %s", i, err);
			check_mode(fd, &r, modeline, sizeof(modeline));
			goto out;
		}
	}
	r.rounds = rounds_ok;

	/* connection still open on both ends: ask the kernel */
	check_mode(fd, &r, modeline, sizeof(modeline));

	put_be32(result, RESULT_MAGIC);
	put_be32(result + 4, status);
	put_be64(result + 8, got);
	put_be64(result + 16, h);
	put_be32(result + 24, rounds_ok);
	put_be32(result + 28, 0);
	put_be64(result + 32, bad_off);
	if (send_all(fd, result, sizeof(result), err, sizeof(err))) {
		fail(&r, "sending result: %s", err);
		goto out;
	}
	/* wait for the client to close (it queries sock_diag first) */
	{
		unsigned char extra;

		rc = recv_all(fd, &extra, 1, 1, err, sizeof(err));
		if (rc == 0)
			fail(&r, "unexpected data after result");
		else if (rc < 0)
			fail(&r, "waiting for client close: %s", err);
	}
out:
	r.secs = now_s() - t0;
	if (close(fd))
		fail(&r, "close: %s", strerror(errno));
	if (!r.mode_ok && r.ok)
		fail(&r, "connection mode not verified");
	print_conn("server", &r, modeline);
	sum_add(&r);
	free(buf);
	free(exp);
}

static void *server_thread(void *arg)
{
	struct srv_arg *a = arg;

	server_conn(a->fd, a->seq);
	free(a);
	return NULL;
}

static int listen_socket(void)
{
	struct sockaddr_storage sa;
	socklen_t salen;
	char err[256];
	int one = 1;
	int fd = make_stream_socket(parse_sockaddr(g_opt.bind_addr, g_opt.port, &sa, &salen), err, sizeof(err));

	if (fd < 0) {
		err_line("%s", err);
		return -1;
	}
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)))
		err_line("warning: SO_REUSEADDR: %s", strerror(errno));
	if (bind(fd, (struct sockaddr *)&sa, salen)) {
		err_line("bind %s:%d: %s", g_opt.bind_addr, g_opt.port, strerror(errno));
		close(fd);
		return -1;
	}
	if (listen(fd, g_opt.conns > 128 ? 128 : g_opt.conns + 4)) {
		err_line("listen: %s", strerror(errno));
		close(fd);
		return -1;
	}
	if (!g_opt.quiet)
		err_line("listening on %s:%d (%s), expecting %d connection(s)", g_opt.bind_addr, g_opt.port,
			 g_opt.tcp ? "AF_INET, --tcp test aid" : "AF_SMC", g_opt.conns);
	return fd;
}

static int run_server(int lfd)
{
	pthread_t *tids = calloc((size_t)g_opt.conns, sizeof(*tids));
	int started = 0;

	g_sum.t0 = now_s();
	if (!tids) {
		err_line("out of memory");
		return 1;
	}
	for (int i = 0; i < g_opt.conns; i++) {
		struct pollfd pfd = { .fd = lfd, .events = POLLIN };
		int fd, prc;

		prc = poll(&pfd, 1, g_opt.accept_timeout * 1000);
		if (prc < 0 && errno == EINTR) {
			i--;
			continue;
		}
		if (prc < 0) {
			err_line("poll(listen socket): %s", strerror(errno));
			break;
		}
		if (prc == 0) {
			err_line("ERROR: no connection within %d s (--accept-timeout); got %d of %d",
				 g_opt.accept_timeout, i, g_opt.conns);
			break;
		}
		fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN) {
				err_line("accept: %s (retrying)", strerror(errno));
				i--;
				continue;
			}
			err_line("accept: %s", strerror(errno));
			break;
		}
		struct srv_arg *a = malloc(sizeof(*a));

		if (!a) {
			err_line("out of memory");
			close(fd);
			break;
		}
		a->fd = fd;
		a->seq = i;
		int e = pthread_create(&tids[started], NULL, server_thread, a);

		if (e) {
			err_line("pthread_create: %s; handling connection inline", strerror(e));
			server_thread(a);
			continue;
		}
		started++;
	}
	for (int i = 0; i < started; i++)
		pthread_join(tids[i], NULL);
	free(tids);
	close(lfd);
	return print_summary();
}

/* ====================================================================== */
/* client                                                                 */

static int connect_retry(int idx, char *err, size_t errlen)
{
	struct sockaddr_storage sa;
	socklen_t salen;
	double deadline = now_s() + g_opt.connect_timeout;
	int attempts = 0;
	int family = parse_sockaddr(g_opt.host, g_opt.port, &sa, &salen);

	for (;;) {
		int fd = make_stream_socket(family, err, errlen);
		int e = 0, fl;

		if (fd < 0)
			return -1; /* socket() failing is not transient */
		attempts++;
		if (set_timeouts(fd, g_opt.io_timeout)) {
			snprintf(err, errlen, "setsockopt(SO_RCVTIMEO/SO_SNDTIMEO): %s", strerror(errno));
			close(fd);
			return -1;
		}
		fl = fcntl(fd, F_GETFL);
		if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK)) {
			snprintf(err, errlen, "fcntl(O_NONBLOCK): %s", strerror(errno));
			close(fd);
			return -1;
		}
		if (connect(fd, (struct sockaddr *)&sa, salen) == 0) {
			e = 0;
		} else if (errno == EINPROGRESS || errno == EINTR) {
			/* Poll in short slices and look at SO_ERROR in between: an AF_SMC
			 * socket whose non-blocking connect was refused does not always
			 * wake up poll() (seen on 6.12). */
			double attempt_end = now_s() + g_opt.attempt_timeout;

			if (attempt_end > deadline)
				attempt_end = deadline > now_s() + 1 ? deadline : now_s() + 1;

			for (;;) {
				struct pollfd pfd = { .fd = fd, .events = POLLOUT };
				socklen_t sl = sizeof(e);
				int prc = poll(&pfd, 1, 200);

				if (prc < 0 && errno != EINTR) {
					e = errno;
					break;
				}
				if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &sl)) {
					e = errno;
					break;
				}
				if (e || prc > 0)
					break;
				if (now_s() >= attempt_end) {
					e = ETIMEDOUT;
					break;
				}
			}
		} else {
			e = errno;
		}
		if (!e) {
			struct sockaddr_storage pa;
			socklen_t pl = sizeof(pa);

			if (getpeername(fd, (struct sockaddr *)&pa, &pl))
				e = errno;
		}
		if (!e) {
			if (fcntl(fd, F_SETFL, fl)) {
				snprintf(err, errlen, "fcntl(clear O_NONBLOCK): %s", strerror(errno));
				close(fd);
				return -1;
			}
			if (attempts > 1 && !g_opt.quiet)
				err_line("conn %d: connected after %d attempts", idx, attempts);
			return fd;
		}
		close(fd);
		if (now_s() + 0.5 > deadline) {
			snprintf(err, errlen, "connect %s:%d: %s (gave up after %d attempts, %d s, --connect-timeout)",
				 g_opt.host, g_opt.port, strerror(e), attempts, g_opt.connect_timeout);
			return -1;
		}
		if (!g_opt.quiet && (attempts == 1 || attempts % 10 == 0))
			err_line("conn %d: connect %s:%d: %s, retrying", idx, g_opt.host, g_opt.port, strerror(e));
		sleep_ms(500);
	}
}

/* One line with the echo rounds' round-trip times (send of the request to the last byte
 * of the response), for benchmarks: "LAT test=... size=... p50_us=...". */
static void print_latency(int idx, double *lat, uint32_t n)
{
	double sum = 0;

	if (!n)
		return;
	qsort(lat, n, sizeof(*lat), cmp_double);
	for (uint32_t i = 0; i < n; i++)
		sum += lat[i];
	out_line("LAT test=%s idx=%d size=%u rounds=%u p50_us=%.1f p90_us=%.1f p99_us=%.1f mean_us=%.1f max_us=%.1f",
		 g_opt.test_name, idx, g_opt.size, n, quantile(lat, n, 0.5) * 1e6,
		 quantile(lat, n, 0.9) * 1e6, quantile(lat, n, 0.99) * 1e6, sum / n * 1e6,
		 lat[n - 1] * 1e6);
}

static void client_conn(int idx)
{
	struct conn_res r;
	unsigned char hello[HELLO_LEN], result[RESULT_LEN];
	unsigned char *buf = NULL, *rbuf = NULL;
	char err[256], modeline[768] = "mode=UNCHECKED";
	uint64_t h = FNV64_INIT, sent = 0;
	uint32_t size = g_opt.size;
	double t0 = now_s(), *lat = NULL;
	int fd;

	memset(&r, 0, sizeof(r));
	r.idx = idx;
	r.ok = 1;
	fd = connect_retry(idx, err, sizeof(err));
	if (fd < 0) {
		fail(&r, "%s", err);
		snprintf(modeline, sizeof(modeline), "mode=NOCONN");
		r.secs = now_s() - t0;
		print_conn("client", &r, modeline);
		sum_add(&r);
		return;
	}
	buf = malloc(CHUNK > size ? CHUNK : size);
	rbuf = malloc(size);
	lat = malloc(sizeof(*lat) * (g_opt.rounds ? g_opt.rounds : 1));
	if (!buf || !rbuf || !lat) {
		fail(&r, "out of memory");
		goto diag;
	}

	put_be32(hello, HELLO_MAGIC);
	put_be32(hello + 4, PROTO_VERSION);
	put_be32(hello + 8, (uint32_t)g_opt.test);
	put_be32(hello + 12, (uint32_t)idx);
	put_be64(hello + 16, g_opt.bytes);
	put_be32(hello + 24, g_opt.rounds);
	put_be32(hello + 28, size);
	put_be64(hello + 32, g_opt.seed);
	put_be64(hello + 40, g_opt.close_after_send ? HELLO_F_CLOSE_AFTER_SEND : 0);
	if (send_all(fd, hello, sizeof(hello), err, sizeof(err))) {
		fail(&r, "hello: %s", err);
		goto diag;
	}

	uint64_t sseed = stream_seed(g_opt.seed, (uint32_t)idx);
	while (sent < g_opt.bytes) {
		size_t chunk = g_opt.chunk ? (size_t)g_opt.chunk : CHUNK;
		size_t n = g_opt.bytes - sent > chunk ? chunk : (size_t)(g_opt.bytes - sent);

		pattern_fill(sseed, sent, buf, n);
		h = fnv1a64(h, buf, n);
		if (send_all(fd, buf, n, err, sizeof(err))) {
			fail(&r, "stream phase at byte %llu of %llu: %s", (unsigned long long)sent,
			     (unsigned long long)g_opt.bytes, err);
			goto diag;
		}
		if (g_opt.progress && sent < g_opt.progress && sent + n >= g_opt.progress)
			out_line("PROGRESS test=%s idx=%d side=client bytes=%llu", g_opt.test_name, idx,
				 (unsigned long long)(sent + n));
		sent += n;
		if (g_opt.test == T_STREAM && g_opt.pause_ms)
			sleep_ms(g_opt.pause_ms);
	}
	r.checksum = h;

	if (g_opt.close_after_send) {
		/* send() returned for every byte: close now, as a program that is done
		 * writing does; whether the bytes arrive is the server's to report */
		r.bytes = sent;
		goto diag;
	}

	for (uint32_t i = 0; i < g_opt.rounds; i++) {
		double sent_at;

		pattern_fill(echo_seed(g_opt.seed, (uint32_t)idx, i), 0, buf, size);
		sent_at = now_s();
		if (send_all(fd, buf, size, err, sizeof(err)) ||
		    recv_all(fd, rbuf, size, 0, err, sizeof(err))) {
			fail(&r, "echo round %u: %s", i, err);
			goto diag;
		}
		lat[i] = now_s() - sent_at;
		if (g_opt.test == T_ECHO && g_opt.pause_ms)
			sleep_ms(g_opt.pause_ms);
		if (memcmp(buf, rbuf, size)) {
			size_t d = first_diff(rbuf, buf, size);

			fail(&r, "echo round %u: response mismatch at byte %zu: got 0x%02x expected 0x%02x", i, d,
			     rbuf[d], buf[d]);
			goto diag;
		}
		r.rounds++;
	}

	if (recv_all(fd, result, sizeof(result), 0, err, sizeof(err))) {
		fail(&r, "waiting for server result: %s", err);
		goto diag;
	}
	{
		uint32_t magic = get_be32(result), status = get_be32(result + 4);
		uint64_t sgot = get_be64(result + 8), sh = get_be64(result + 16);
		uint32_t srounds = get_be32(result + 24);
		uint64_t bad = get_be64(result + 32);

		if (magic != RESULT_MAGIC)
			fail(&r, "bad result record (magic 0x%08x)", magic);
		else if (status != ST_OK)
			fail(&r, "server reports status %u (%s), offset %lld", status,
			     status == ST_STREAM_BAD ? "stream data mismatch" :
			     status == ST_ECHO_BAD ? "echo request mismatch" :
			     status == ST_HELLO_BAD ? "test mismatch" : "?",
			     bad == ~0ULL ? -1LL : (long long)bad);
		else if (sgot != sent)
			fail(&r, "server received %llu bytes, sent %llu", (unsigned long long)sgot,
			     (unsigned long long)sent);
		else if (sh != h)
			fail(&r, "checksum mismatch: server 0x%016llx, client 0x%016llx", (unsigned long long)sh,
			     (unsigned long long)h);
		else if (srounds != g_opt.rounds)
			fail(&r, "server verified %u of %u echo rounds", srounds, g_opt.rounds);
		r.bytes = sent;
	}
diag:
	/* still open: ask the kernel how this connection ran */
	check_mode(fd, &r, modeline, sizeof(modeline));
	if (!r.ok && g_opt.hold_on_error) {
		/* A failed connection's close is a step of its own in net/smc (an abort
		 * sends one more CDC message): let a test place it after other events. */
		err_line("conn %d: failed; holding it open %d s before close (--hold-on-error)", idx,
			 g_opt.hold_on_error);
		sleep_ms(g_opt.hold_on_error * 1000);
		out_line("HELD test=%s idx=%d side=client: closing the failed connection now", g_opt.test_name,
			 idx);
	}
	if (close(fd))
		fail(&r, "close: %s", strerror(errno));
	if (!r.mode_ok && r.ok)
		fail(&r, "connection mode not verified");
	r.secs = now_s() - t0;
	print_conn("client", &r, modeline);
	if (r.ok)
		print_latency(r.idx, lat, r.rounds);
	sum_add(&r);
	free(buf);
	free(rbuf);
	free(lat);
}

static void *client_thread(void *arg)
{
	client_conn((int)(intptr_t)arg);
	return NULL;
}

static int run_client(void)
{
	g_sum.t0 = now_s();
	if (!g_opt.quiet)
		err_line("%s: %d connection(s) to %s:%d (%s), %llu stream bytes + %u x %u echo each",
			 g_opt.test_name, g_opt.conns, g_opt.host, g_opt.port,
			 g_opt.tcp ? "AF_INET, --tcp test aid" : "AF_SMC", (unsigned long long)g_opt.bytes,
			 g_opt.rounds, g_opt.size);
	if (g_opt.test == T_CONCURRENT) {
		pthread_t *tids = calloc((size_t)g_opt.conns, sizeof(*tids));
		int started = 0;

		if (!tids) {
			err_line("out of memory");
			return 1;
		}
		for (int i = 0; i < g_opt.conns; i++) {
			int e = pthread_create(&tids[i], NULL, client_thread, (void *)(intptr_t)i);

			if (e) {
				err_line("pthread_create: %s", strerror(e));
				break;
			}
			started++;
		}
		for (int i = 0; i < started; i++)
			pthread_join(tids[i], NULL);
		free(tids);
	} else {
		for (int i = 0; i < g_opt.conns; i++) {
			client_conn(i);
			if (g_opt.pause_ms && i + 1 < g_opt.conns)
				sleep_ms(g_opt.pause_ms);
		}
	}
	return print_summary();
}

/* ====================================================================== */

static int run_self(void)
{
	int lfd = listen_socket();
	pid_t pid;
	int crc, status = 0, src;

	if (lfd < 0) {
		out_line("SUMMARY test=%s side=self FAIL first_error=cannot listen", g_opt.test_name);
		return 1;
	}
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		err_line("fork: %s", strerror(errno));
		return 1;
	}
	if (pid == 0) {
		g_side = "server";
		if (g_opt.watchdog)
			arm_watchdog(); /* alarms are not inherited */
		_exit(run_server(lfd));
	}
	close(lfd);
	g_side = "client";
	crc = run_client();

	/* the server should finish right after the client; give it io-timeout */
	double deadline = now_s() + g_opt.io_timeout + 10;
	pid_t w;

	while ((w = waitpid(pid, &status, WNOHANG)) == 0 && now_s() < deadline)
		sleep_ms(100);
	if (w == 0) {
		err_line("server child %d still running after the client finished; terminating it", (int)pid);
		kill(pid, SIGTERM);
		waitpid(pid, &status, 0);
		src = 1;
	} else if (w < 0) {
		err_line("waitpid: %s", strerror(errno));
		src = 1;
	} else {
		src = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
	}
	g_side = "self";
	out_line("SUMMARY test=%s side=self server=%s client=%s %s", g_opt.test_name, src ? "FAIL" : "ok",
		 crc ? "FAIL" : "ok",
		 (src || crc) ? "FAIL first_error=see server/client SUMMARY lines" : "ok");
	return (src || crc) ? 1 : 0;
}

int main(int argc, char **argv)
{
	int lfd;

	parse_args(argc, argv);
	signal(SIGPIPE, SIG_IGN);
	g_side = g_opt.role == R_SERVER ? "server" : g_opt.role == R_CLIENT ? "client" : "self";
	if (g_opt.watchdog)
		arm_watchdog();
	if (g_opt.tcp)
		err_line("NOTE: --tcp is a local test aid: AF_INET sockets, SMC is NOT exercised");

	switch (g_opt.role) {
	case R_SERVER:
		lfd = listen_socket();
		if (lfd < 0) {
			out_line("SUMMARY test=%s side=server conns=0 FAIL first_error=cannot listen", g_opt.test_name);
			return 1;
		}
		return run_server(lfd);
	case R_CLIENT:
		return run_client();
	case R_SELF:
		return run_self();
	}
	return 2;
}
