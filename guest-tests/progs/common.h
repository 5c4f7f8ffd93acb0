/* common.h - shared helpers for the SMC-D guest test programs.
 *
 * Options, logging, timing, the deterministic test pattern, FNV-1a 64
 * checksums and socket I/O with timeouts.
 */
#ifndef SMCT_COMMON_H
#define SMCT_COMMON_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#ifndef AF_SMC
#define AF_SMC 43
#endif
#ifndef SMCPROTO_SMC
#define SMCPROTO_SMC 0 /* SMC protocol, IPv4 */
#endif
#ifndef SMCPROTO_SMC6
#define SMCPROTO_SMC6 1 /* SMC protocol, IPv6 */
#endif

enum test_kind { T_ECHO = 1, T_STREAM = 2, T_SEQ = 3, T_CONCURRENT = 4 };
enum role_kind { R_SERVER = 1, R_CLIENT = 2, R_SELF = 3 };

struct opts {
	enum test_kind test;
	enum role_kind role;
	const char *test_name;
	char host[64];       /* client: address to connect to */
	char bind_addr[64];  /* server: address to listen on */
	int port;
	int conns;           /* connections (seq: one after another, concurrent: at once) */
	uint64_t bytes;      /* stream phase: bytes client -> server per connection */
	uint32_t rounds;     /* echo phase: round trips per connection */
	uint32_t size;       /* echo phase: bytes per message */
	uint64_t seed;
	int connect_timeout; /* s: keep retrying connect this long */
	int attempt_timeout; /* s: one connect attempt */
	int accept_timeout;  /* s: wait for each incoming connection */
	int io_timeout;      /* s: SO_RCVTIMEO / SO_SNDTIMEO */
	int watchdog;        /* s: alarm() for the whole program, 0 = off */
	int pause_ms;        /* seq: pause between connections; echo: rounds; stream: chunks */
	int chunk;           /* stream: bytes per send(), 0 = 64 KiB */
	int hold_on_error;   /* s: client keeps a failed connection open before close */
	int close_after_send; /* stream client: close once the stream is sent (no result) */
	uint64_t progress;   /* stream client: print one PROGRESS line once this many bytes are sent */
	int read_delay_ms;   /* stream server: sleep before reading the stream */
	int abandon_ms;      /* stream server: close unread after this many ms (0: read) */
	int allow_fallback;  /* local testing only: TCP fallback is not an error */
	int smcr;            /* the connections must run SMC-R (an RDMA device), not SMC-D */
	int tcp;             /* local testing only: AF_INET sockets, no SMC check */
	int quiet;
};

extern struct opts g_opt;
extern const char *g_side; /* "server" / "client" / "self" for messages */

/* parse argv into g_opt; exits 0 on -h, 2 on usage errors */
void parse_args(int argc, char **argv);
void usage(FILE *f);

/* stdout lines are written in one write() each so threads and forked
 * processes never interleave within a line */
void out_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void err_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

double now_s(void);
void sleep_ms(int ms);

/* qsort() comparison of doubles, ascending */
int cmp_double(const void *a, const void *b);
/* The q-quantile (0 < q <= 1) of n >= 1 sorted values, by nearest rank. */
double quantile(const double *sorted, size_t n, double q);

/* Deterministic pseudo-random pattern, random access: byte at offset o of
 * the stream with seed s is byte (o % 8) (little endian) of
 * splitmix64(s + o / 8).  Identical on every architecture. */
void pattern_fill(uint64_t seed, uint64_t offset, unsigned char *buf, size_t len);
/* The index of the first byte of buf that differs from the pattern at offset, or len. */
size_t pattern_check(uint64_t seed, uint64_t offset, const unsigned char *buf, size_t len);

#define FNV64_INIT 0xcbf29ce484222325ULL
/* 64-bit mixer (splitmix64 finaliser), used to derive per-connection seeds */
uint64_t mix64(uint64_t x);

uint64_t fnv1a64(uint64_t h, const unsigned char *p, size_t len);

void put_be32(unsigned char *p, uint32_t v);
void put_be64(unsigned char *p, uint64_t v);
uint32_t get_be32(const unsigned char *p);
uint64_t get_be64(const unsigned char *p);

/* Full-length send/recv.  Return 0, or -1 with a message in err.
 * recv_all: returns 1 on orderly EOF before any byte when eof_ok. */
int send_all(int fd, const void *buf, size_t len, char *err, size_t errlen);
int recv_all(int fd, void *buf, size_t len, int eof_ok, char *err, size_t errlen);

int set_timeouts(int fd, int seconds);
/* A stream socket of FAMILY (AF_INET, AF_INET6): AF_SMC, or TCP under --tcp. */
int make_stream_socket(int family, char *err, size_t errlen);
/* S (IPv4 or IPv6) and PORT as a socket address; returns its family, or -1. */
int parse_sockaddr(const char *s, int port, struct sockaddr_storage *ss, socklen_t *len);
int parse_ipv4(const char *s, void *sin_addr);

#endif
