/* common.c - options, logging, pattern, checksum and socket I/O helpers */
#define _GNU_SOURCE
#include "common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

struct opts g_opt;
const char *g_side = "?";

void usage(FILE *f)
{
	fprintf(f,
"usage: smctest TEST ROLE [--key=value ...]\n"
"\n"
"  TEST  echo        request/response ping-pong, every response checked byte by byte\n"
"        stream      client streams a pseudo-random pattern; server checks every byte,\n"
"                    computes FNV-1a 64 and sends it back; both compare\n"
"        seq         many connections one after another (DMB reuse), each stream+echo\n"
"        concurrent  many connections at the same time (threads), each stream+echo\n"
"  ROLE  server      listen, accept --conns connections, exit 0 if all were SMC-D and verified\n"
"        client      connect (retrying for --connect-timeout), run the test\n"
"        self        fork a server, then run the client against it (one guest talks to itself)\n"
"\n"
"Every connection is checked on each side through AF_SMC sock_diag: it must run SMC-D.\n"
"\n"
"Options (also accepted as --key value):\n"
"  --host=IP             client/self: server address, IPv4 or IPv6 (default 10.0.0.1)\n"
"  --bind=IP             server/self: listen address, IPv4 or IPv6 (default 0.0.0.0)\n"
"  --port=N              TCP port (default 12345)\n"
"  --conns=N             connections (defaults: echo 1, stream 1, seq 50, concurrent 8)\n"
"  --bytes=N[K|M|G]      stream bytes per connection (stream 64M, seq 1M, concurrent 8M, echo 0)\n"
"  --rounds=N            echo round trips per connection (echo 1000, seq 10, concurrent 10, stream 0)\n"
"  --size=N[K|M]         echo message size (echo 1K, seq 4K, concurrent 1K)\n"
"  --seed=N              pattern seed (default 1)\n"
"  --pause-ms=N          pause between sequential connections, echo rounds or stream chunks (default 0)\n"
"  --chunk=N[K]          client: bytes per send() in the stream phase (default 64K)\n"
"  --hold-on-error=S     client: keep a connection that failed open S seconds before closing it (default 0)\n"
"  --progress=N[K|M|G]   stream client: print \"PROGRESS test=.. idx=.. side=client bytes=..\" once, when N\n"
"                        bytes are sent (a script waits for it before it acts on the flowing stream)\n"
"  --close-after-send    stream client: close as soon as the stream is sent, wait for no result;\n"
"                        the server then reads to end of file (a slow reader: --read-delay-ms)\n"
"  --read-delay-ms=N     server: wait N ms after the hello before reading the stream (default 0)\n"
"  --abandon-after-ms=N  stream server: N ms after the hello, close without reading (a reader\n"
"                        that goes away: net/smc aborts, as TCP resets)\n"
"  --connect-timeout=S   keep retrying connect for S seconds (default 60)\n"
"  --attempt-timeout=S   one connect attempt (default 10)\n"
"  --accept-timeout=S    wait up to S seconds for each connection (default 300)\n"
"  --io-timeout=S        SO_RCVTIMEO/SO_SNDTIMEO on data sockets (default 60)\n"
"  --timeout=S           global alarm() watchdog, 0 = off (default 900)\n"
"  --smcr                every connection must run SMC-R (over an RDMA device such as soft-RoCE),\n"
"                        not SMC-D: the CONN line names its link (device, port, GIDs)\n"
"  --allow-fallback      LOCAL TESTING ONLY: TCP fallback is reported but not an error\n"
"  --tcp                 LOCAL TESTING ONLY: plain AF_INET sockets, no SMC check (data paths only)\n"
"  --quiet               fewer progress messages on stderr\n"
"  -h, --help            this text\n"
"\n"
"stdout: one 'CONN ...' line per connection and side, one 'SUMMARY ...' line per side\n"
"(self: plus a final 'SUMMARY ... side=self ...'). Exit 0 only if everything passed.\n"
"\n"
"examples:\n"
"  smctest stream server --conns=1            (guest 10.0.0.1)\n"
"  smctest stream client --host=10.0.0.1      (guest 10.0.0.2)\n"
"  smctest seq self --host=10.0.0.1           (one guest, its own address)\n");
}

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (!s || !*s || *s == '-')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno)
		return -1;
	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	default: break;
	}
	if (*end == 'i' && end[1] == 'B')
		end += 2;
	else if (*end == 'B')
		end++;
	if (*end)
		return -1;
	*out = v;
	return 0;
}

static void die_usage(const char *fmt, const char *arg)
{
	fprintf(stderr, "smctest: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n(smctest -h for help)\n");
	exit(2);
}

static int get_int(const char *key, const char *val, int min, int max)
{
	uint64_t v;

	if (parse_u64(val, &v) || v < (uint64_t)min || v > (uint64_t)max) {
		fprintf(stderr, "smctest: bad value for --%s: '%s' (%d..%d)\n", key,
			val ? val : "", min, max);
		exit(2);
	}
	return (int)v;
}

void parse_args(int argc, char **argv)
{
	struct opts *o = &g_opt;
	int conns = -1, rounds = -1, size = -1;
	int64_t bytes = -1;
	int pos = 0;

	memset(o, 0, sizeof(*o));
	snprintf(o->host, sizeof(o->host), "10.0.0.1");
	snprintf(o->bind_addr, sizeof(o->bind_addr), "0.0.0.0");
	o->port = 12345;
	o->seed = 1;
	o->connect_timeout = 60;
	o->attempt_timeout = 10;
	o->accept_timeout = 300;
	o->io_timeout = 60;
	o->watchdog = 900;

	for (int i = 1; i < argc; i++) {
		char *a = argv[i];
		char key[64];
		const char *val = NULL;

		if (!strcmp(a, "-h") || !strcmp(a, "--help") || !strcmp(a, "help")) {
			usage(stdout);
			exit(0);
		}
		if (strncmp(a, "--", 2)) {
			if (pos == 0) {
				o->test_name = a;
				if (!strcmp(a, "echo")) o->test = T_ECHO;
				else if (!strcmp(a, "stream")) o->test = T_STREAM;
				else if (!strcmp(a, "seq")) o->test = T_SEQ;
				else if (!strcmp(a, "concurrent")) o->test = T_CONCURRENT;
				else die_usage("unknown test '%s' (echo, stream, seq, concurrent)", a);
			} else if (pos == 1) {
				if (!strcmp(a, "server")) o->role = R_SERVER;
				else if (!strcmp(a, "client")) o->role = R_CLIENT;
				else if (!strcmp(a, "self")) o->role = R_SELF;
				else die_usage("unknown role '%s' (server, client, self)", a);
			} else {
				die_usage("unexpected argument '%s'", a);
			}
			pos++;
			continue;
		}
		a += 2;
		{
			const char *eq = strchr(a, '=');
			size_t kl = eq ? (size_t)(eq - a) : strlen(a);

			if (kl >= sizeof(key))
				die_usage("option too long: '%s'", argv[i]);
			memcpy(key, a, kl);
			key[kl] = 0;
			if (eq)
				val = eq + 1;
		}
		/* boolean flags */
		if (!strcmp(key, "allow-fallback")) { o->allow_fallback = 1; continue; }
		if (!strcmp(key, "tcp")) { o->tcp = 1; continue; }
		if (!strcmp(key, "smcr")) { o->smcr = 1; continue; }
		if (!strcmp(key, "quiet")) { o->quiet = 1; continue; }
		if (!strcmp(key, "close-after-send")) { o->close_after_send = 1; continue; }
		if (!val) {
			if (i + 1 >= argc)
				die_usage("option --%s needs a value", key);
			val = argv[++i];
		}
		if (!strcmp(key, "host")) {
			if (strlen(val) >= sizeof(o->host)) die_usage("bad --host '%s'", val);
			snprintf(o->host, sizeof(o->host), "%s", val);
		} else if (!strcmp(key, "bind")) {
			if (strlen(val) >= sizeof(o->bind_addr)) die_usage("bad --bind '%s'", val);
			snprintf(o->bind_addr, sizeof(o->bind_addr), "%s", val);
		} else if (!strcmp(key, "port")) {
			o->port = get_int(key, val, 1, 65535);
		} else if (!strcmp(key, "conns")) {
			conns = get_int(key, val, 1, 100000);
		} else if (!strcmp(key, "bytes")) {
			uint64_t v;
			if (parse_u64(val, &v) || v > (1ULL << 40))
				die_usage("bad --bytes '%s'", val);
			bytes = (int64_t)v;
		} else if (!strcmp(key, "rounds")) {
			rounds = get_int(key, val, 0, 100000000);
		} else if (!strcmp(key, "size")) {
			size = get_int(key, val, 1, 16 << 20);
		} else if (!strcmp(key, "seed")) {
			if (parse_u64(val, &o->seed)) die_usage("bad --seed '%s'", val);
		} else if (!strcmp(key, "pause-ms")) {
			o->pause_ms = get_int(key, val, 0, 3600000);
		} else if (!strcmp(key, "chunk")) {
			o->chunk = get_int(key, val, 1, 64 << 10);
		} else if (!strcmp(key, "progress")) {
			if (parse_u64(val, &o->progress) || !o->progress || o->progress > (1ULL << 40))
				die_usage("bad --progress '%s'", val);
		} else if (!strcmp(key, "hold-on-error")) {
			o->hold_on_error = get_int(key, val, 0, 3600);
		} else if (!strcmp(key, "read-delay-ms")) {
			o->read_delay_ms = get_int(key, val, 0, 3600000);
		} else if (!strcmp(key, "abandon-after-ms")) {
			o->abandon_ms = get_int(key, val, 1, 3600000);
		} else if (!strcmp(key, "connect-timeout")) {
			o->connect_timeout = get_int(key, val, 0, 86400);
		} else if (!strcmp(key, "attempt-timeout")) {
			o->attempt_timeout = get_int(key, val, 1, 86400);
		} else if (!strcmp(key, "accept-timeout")) {
			o->accept_timeout = get_int(key, val, 1, 86400);
		} else if (!strcmp(key, "io-timeout")) {
			o->io_timeout = get_int(key, val, 1, 86400);
		} else if (!strcmp(key, "timeout")) {
			o->watchdog = get_int(key, val, 0, 86400);
		} else {
			die_usage("unknown option '%s'", argv[i]);
		}
	}
	if (pos < 2) {
		usage(stderr);
		exit(2);
	}

	/* per-test defaults */
	switch (o->test) {
	case T_ECHO:       o->conns = 1;  o->bytes = 0;        o->rounds = 1000; o->size = 1024; break;
	case T_STREAM:     o->conns = 1;  o->bytes = 64 << 20; o->rounds = 0;    o->size = 1024; break;
	case T_SEQ:        o->conns = 50; o->bytes = 1 << 20;  o->rounds = 10;   o->size = 4096; break;
	case T_CONCURRENT: o->conns = 8;  o->bytes = 8 << 20;  o->rounds = 10;   o->size = 1024; break;
	}
	if (o->close_after_send && o->test != T_STREAM)
		die_usage("%s is for the stream test", "--close-after-send");
	if (o->abandon_ms && o->test != T_STREAM)
		die_usage("%s is for the stream test", "--abandon-after-ms");
	if (conns >= 0) o->conns = conns;
	if (bytes >= 0) o->bytes = (uint64_t)bytes;
	if (rounds >= 0) o->rounds = (uint32_t)rounds;
	if (size >= 0) o->size = (uint32_t)size;
	{
		struct sockaddr_storage tmp;
		socklen_t len;

		if (parse_sockaddr(o->host, 0, &tmp, &len) < 0)
			die_usage("--host must be an IPv4 or IPv6 address: '%s'", o->host);
		if (parse_sockaddr(o->bind_addr, 0, &tmp, &len) < 0)
			die_usage("--bind must be an IPv4 or IPv6 address: '%s'", o->bind_addr);
	}
}

static void vline(int fd, const char *fmt, va_list ap)
{
	char buf[1024];
	int n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);

	if (n < 0)
		return;
	if ((size_t)n > sizeof(buf) - 2)
		n = sizeof(buf) - 2;
	buf[n++] = '\n';
	/* one write per line; ignore short writes on a console */
	while (n > 0) {
		ssize_t w = write(fd, buf, (size_t)n);
		if (w < 0 && errno == EINTR)
			continue;
		break;
	}
}

void out_line(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vline(1, fmt, ap);
	va_end(ap);
}

void err_line(const char *fmt, ...)
{
	char f2[512];
	va_list ap;

	snprintf(f2, sizeof(f2), "smctest[%s]: %s", g_side, fmt);
	va_start(ap, fmt);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
	vline(2, f2, ap);
#pragma GCC diagnostic pop
	va_end(ap);
}

double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double quantile(const double *sorted, size_t n, double q)
{
	size_t rank = (size_t)(q * (double)n + 0.999999);

	return sorted[(rank ? (rank > n ? n : rank) : 1) - 1];
}

void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static inline uint64_t splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

uint64_t mix64(uint64_t x)
{
	return splitmix64(x);
}

/* v as 8 bytes, least significant first, on either byte order. */
static inline void put_le64(unsigned char *p, uint64_t v)
{
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	v = __builtin_bswap64(v);
#endif
	memcpy(p, &v, 8);
}

static inline uint64_t get_le64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	v = __builtin_bswap64(v);
#endif
	return v;
}

/*
 * Byte i of the stream is byte (i % 8) of splitmix64(seed + i / 8), least significant
 * first. Whole words are stored at once: under TCG the guests' per-byte work would
 * otherwise dominate the transports being measured.
 */
void pattern_fill(uint64_t seed, uint64_t offset, unsigned char *buf, size_t len)
{
	uint64_t word = offset / 8;
	unsigned int sub = (unsigned int)(offset % 8);
	size_t i = 0;

	while (i < len) {
		uint64_t v = splitmix64(seed + word);

		if (sub == 0 && len - i >= 8) {
			put_le64(buf + i, v);
			i += 8;
		} else {
			for (; sub < 8 && i < len; sub++)
				buf[i++] = (unsigned char)(v >> (8 * sub));
			sub = 0;
		}
		word++;
	}
}

/*
 * Compares without filling a second buffer and without memcmp(): s390x's memcmp is CLC,
 * which QEMU's TCG runs one byte at a time through its MMU (the receiver spent most of
 * its time there).
 */
size_t pattern_check(uint64_t seed, uint64_t offset, const unsigned char *buf, size_t len)
{
	uint64_t word = offset / 8;
	unsigned int sub = (unsigned int)(offset % 8);
	size_t i = 0;

	while (i < len) {
		uint64_t v = splitmix64(seed + word);

		if (sub == 0 && len - i >= 8 && get_le64(buf + i) == v) {
			i += 8;
		} else {
			for (; sub < 8 && i < len; sub++, i++)
				if (buf[i] != (unsigned char)(v >> (8 * sub)))
					return i;
			sub = 0;
		}
		word++;
	}
	return len;
}

/*
 * FNV-1a 64 over 8-byte little-endian words, then over the remaining bytes one by one.
 * Callers hash a stream in equal pieces on both sides (multiples of 8 but the last), so
 * both compute the same value; a word at a time is 8 times fewer multiplications than
 * byte-wise FNV-1a, which under TCG cost more than the transport.
 */
uint64_t fnv1a64(uint64_t h, const unsigned char *p, size_t len)
{
	size_t i = 0;

	for (; len - i >= 8; i += 8) {
		h ^= get_le64(p + i);
		h *= 0x100000001b3ULL;
	}
	for (; i < len; i++) {
		h ^= p[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

void put_be32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (24 - 8 * i));
}

void put_be64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (56 - 8 * i));
}

uint32_t get_be32(const unsigned char *p)
{
	uint32_t v = 0;

	for (int i = 0; i < 4; i++)
		v = (v << 8) | p[i];
	return v;
}

uint64_t get_be64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = (v << 8) | p[i];
	return v;
}

static const char *io_errstr(int e)
{
	if (e == EAGAIN || e == EWOULDBLOCK)
		return "timed out (--io-timeout)";
	return strerror(e);
}

int send_all(int fd, const void *buf, size_t len, char *err, size_t errlen)
{
	const unsigned char *p = buf;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			snprintf(err, errlen, "send: %s", io_errstr(errno));
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int recv_all(int fd, void *buf, size_t len, int eof_ok, char *err, size_t errlen)
{
	unsigned char *p = buf;
	size_t got = 0;

	while (got < len) {
		ssize_t n = recv(fd, p + got, len - got, 0);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			snprintf(err, errlen, "recv: %s", io_errstr(errno));
			return -1;
		}
		if (n == 0) {
			if (eof_ok && got == 0)
				return 1;
			snprintf(err, errlen, "recv: unexpected EOF after %zu of %zu bytes", got, len);
			return -1;
		}
		got += (size_t)n;
	}
	return 0;
}

int set_timeouts(int fd, int seconds)
{
	struct timeval tv = { seconds, 0 };

	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)))
		return -1;
	if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)))
		return -1;
	return 0;
}

int make_stream_socket(int family, char *err, size_t errlen)
{
	int v6 = family == AF_INET6;
	int fd;

	if (g_opt.tcp) {
		fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			snprintf(err, errlen, "socket(%s): %s", v6 ? "AF_INET6" : "AF_INET", strerror(errno));
		return fd;
	}
	/* AF_SMC's protocol number names the family of its TCP (clc) socket. */
	fd = socket(AF_SMC, SOCK_STREAM | SOCK_CLOEXEC, v6 ? SMCPROTO_SMC6 : SMCPROTO_SMC);
	if (fd < 0) {
		int e = errno;

		snprintf(err, errlen, "socket(AF_SMC=%d, SOCK_STREAM, %s): %s%s", AF_SMC,
			 v6 ? "SMCPROTO_SMC6" : "SMCPROTO_SMC", strerror(e),
			 e == EAFNOSUPPORT ? " (smc module not loaded / CONFIG_SMC off?)" : "");
	}
	return fd;
}

int parse_sockaddr(const char *s, int port, struct sockaddr_storage *ss, socklen_t *len)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, s, &sin->sin_addr) == 1) {
		sin->sin_family = AF_INET;
		sin->sin_port = htons((uint16_t)port);
		*len = sizeof(*sin);
		return AF_INET;
	}
	if (inet_pton(AF_INET6, s, &sin6->sin6_addr) == 1) {
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons((uint16_t)port);
		*len = sizeof(*sin6);
		return AF_INET6;
	}
	return -1;
}

int parse_ipv4(const char *s, void *sin_addr)
{
	return inet_pton(AF_INET, s, sin_addr) == 1 ? 0 : -1;
}
