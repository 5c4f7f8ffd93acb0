/*
 * libsmc-preload.so: run an unmodified TCP program over SMC (LD_PRELOAD), as smc-tools'
 * smc_run does. Written for ism-emu from the socket(2)/af_smc semantics only.
 *
 * socket(AF_INET or AF_INET6, SOCK_STREAM [| SOCK_NONBLOCK | SOCK_CLOEXEC], 0 or
 * IPPROTO_TCP) becomes, by SMC_PROTO:
 *   af_smc (default)  socket(AF_SMC, type, SMCPROTO_SMC)  for AF_INET,
 *                     socket(AF_SMC, type, SMCPROTO_SMC6) for AF_INET6
 *   ipproto           socket(family, type, IPPROTO_SMC)    (Linux 6.11 and later)
 * Every other socket() call goes to the real one unchanged. If the SMC socket cannot be
 * created (no smc module, a kernel without IPPROTO_SMC), the real call is made instead:
 * the program runs over TCP. SMC_DEBUG=1 prints one line per decision on stderr.
 * The rest of the socket API needs no wrapping: an SMC socket takes the same
 * sockaddr_in/sockaddr_in6 in bind/connect/accept, and TCP-level options go to its
 * internal TCP socket.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef AF_SMC
#define AF_SMC 43
#endif
#define SMCPROTO_SMC 0
#define SMCPROTO_SMC6 1
#ifndef IPPROTO_SMC
#define IPPROTO_SMC 256
#endif

typedef int (*socket_fn)(int, int, int);

static socket_fn real_socket_fn;
static int debug = -1;     /* -1: SMC_DEBUG not read yet */
static int use_ipproto = -1;

static socket_fn real_socket(void)
{
	if (!real_socket_fn)
		real_socket_fn = (socket_fn)dlsym(RTLD_NEXT, "socket");
	return real_socket_fn;
}

static void settings(void)
{
	const char *d, *p;

	if (debug >= 0)
		return;
	d = getenv("SMC_DEBUG");
	p = getenv("SMC_PROTO");
	debug = d && *d && strcmp(d, "0") != 0;
	use_ipproto = p && (!strcmp(p, "ipproto") || !strcmp(p, "ipproto_smc") || !strcmp(p, "256"));
	if (p && *p && !use_ipproto && strcmp(p, "af_smc") != 0 && strcmp(p, "smc") != 0 && debug)
		fprintf(stderr, "smc-preload: unknown SMC_PROTO=%s, using af_smc\n", p);
}

static const char *fam_name(int f)
{
	return f == AF_INET ? "AF_INET" : f == AF_INET6 ? "AF_INET6" : "other";
}

/* Whether this socket() call is one for TCP that SMC can take over. */
int smc_preload_wanted(int domain, int type, int protocol)
{
	int base = type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC);

	return (domain == AF_INET || domain == AF_INET6) && base == SOCK_STREAM &&
	       (protocol == 0 || protocol == IPPROTO_TCP);
}

int socket(int domain, int type, int protocol)
{
	socket_fn real = real_socket();
	int fd, e;

	if (!real) {
		errno = ENOSYS;
		return -1;
	}
	settings();
	if (!smc_preload_wanted(domain, type, protocol))
		return real(domain, type, protocol);
	if (use_ipproto)
		fd = real(domain, type, IPPROTO_SMC);
	else
		fd = real(AF_SMC, type, domain == AF_INET6 ? SMCPROTO_SMC6 : SMCPROTO_SMC);
	if (fd >= 0) {
		if (debug)
			fprintf(stderr, "smc-preload: socket(%s, SOCK_STREAM, %d) -> %s fd %d\n",
				fam_name(domain), protocol,
				use_ipproto ? "IPPROTO_SMC" : domain == AF_INET6 ? "AF_SMC/SMCPROTO_SMC6" : "AF_SMC/SMCPROTO_SMC",
				fd);
		return fd;
	}
	e = errno;
	fd = real(domain, type, protocol);
	if (debug)
		fprintf(stderr, "smc-preload: socket(%s, SOCK_STREAM, %d): %s failed (%s); fell back to TCP, fd %d\n",
			fam_name(domain), protocol, use_ipproto ? "IPPROTO_SMC" : "AF_SMC", strerror(e), fd);
	return fd;
}
