/* smcconf.c - net/smc's configuration over generic netlink: the software PNET table
 * (family SMC_PNETID) and the SMC-Dv2 EIDs (family SMC_GEN_NETLINK).
 *
 *   smcconf pnet add PNETID [--eth IFNAME] [--dev DEVICE]
 *   smcconf pnet del PNETID | pnet show [PNETID] | pnet flush
 *   smcconf ueid add EID | ueid del EID | ueid show | ueid flush
 *   smcconf seid show | seid enable | seid disable
 *
 * DEVICE names an RDMA or SMC-D device; net/smc matches an SMC-D device by its PCI
 * function's name (e.g. 0002:00:00.0, net/smc/smc_pnet.c smc_pnet_find_smcd). Each
 * command prints what it did on one line (PNET, UEID, SEID) and exits 0, or prints the
 * kernel's error and exits 1; 2 is a usage error. Written for the ism-emu guests;
 * the message layouts follow include/uapi/linux/{netlink,genetlink,smc}.h. */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <linux/genetlink.h>
#include <linux/netlink.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- kernel ABI (include/uapi/linux/smc.h) ------------------------------ */
#define PNETID_FAMILY "SMC_PNETID"
#define GEN_FAMILY "SMC_GEN_NETLINK"
enum { PNETID_NAME = 1, PNETID_ETHNAME, PNETID_IBNAME, PNETID_IBPORT };
enum { PNETID_GET = 1, PNETID_ADD, PNETID_DEL, PNETID_FLUSH };
enum {
	GEN_DUMP_UEID = 9, GEN_ADD_UEID, GEN_REMOVE_UEID, GEN_FLUSH_UEID,
	GEN_DUMP_SEID, GEN_ENABLE_SEID, GEN_DISABLE_SEID,
};
enum { EID_ENTRY = 1 };            /* SMC_NLA_EID_TABLE_ENTRY */
enum { SEID_ENTRY = 1, SEID_ENABLED }; /* SMC_NLA_SEID_* */
#define MAX_EID_LEN 32             /* SMC_MAX_EID_LEN: blank-padded, NUL after */

#define BUF_LEN 8192
#define ALIGN4(n) (((n) + 3u) & ~3u)

struct msg {
	unsigned char buf[BUF_LEN];
	size_t len;
};

static const char *prog = "smcconf";

static void usage(FILE *f)
{
	fprintf(f,
		"usage: %s pnet add PNETID [--eth IFNAME] [--dev DEVICE]\n"
		"       %s pnet del PNETID | pnet show [PNETID] | pnet flush\n"
		"       %s ueid add EID | ueid del EID | ueid show | ueid flush\n"
		"       %s seid show | seid enable | seid disable\n",
		prog, prog, prog, prog);
}

/* A request: netlink header, generic netlink header, no attributes yet. */
static void msg_start(struct msg *m, uint16_t family, uint16_t flags, uint8_t cmd)
{
	struct nlmsghdr *nh = (struct nlmsghdr *)m->buf;
	struct genlmsghdr *gh;

	memset(m->buf, 0, sizeof(m->buf));
	nh->nlmsg_type = family;
	nh->nlmsg_flags = NLM_F_REQUEST | flags;
	nh->nlmsg_seq = 1;
	gh = (struct genlmsghdr *)(m->buf + NLMSG_HDRLEN);
	gh->cmd = cmd;
	gh->version = 1;
	m->len = NLMSG_HDRLEN + GENL_HDRLEN;
}

static int msg_attr(struct msg *m, uint16_t type, const void *data, size_t len)
{
	struct nlattr *a = (struct nlattr *)(m->buf + m->len);

	if (m->len + ALIGN4(NLA_HDRLEN + len) > sizeof(m->buf))
		return -1;
	a->nla_type = type;
	a->nla_len = NLA_HDRLEN + len;
	memcpy(m->buf + m->len + NLA_HDRLEN, data, len);
	m->len += ALIGN4(NLA_HDRLEN + len);
	return 0;
}

static int msg_str(struct msg *m, uint16_t type, const char *s)
{
	return msg_attr(m, type, s, strlen(s) + 1);
}

/* Each attribute of a generic netlink message's payload: fills tb[type] (0 < type < n). */
static void parse_attrs(const struct nlmsghdr *nh, const struct nlattr **tb, int n)
{
	size_t off = NLMSG_HDRLEN + GENL_HDRLEN;

	memset(tb, 0, sizeof(*tb) * n);
	while (off + NLA_HDRLEN <= nh->nlmsg_len) {
		const struct nlattr *a = (const struct nlattr *)((const unsigned char *)nh + off);
		int type = a->nla_type & NLA_TYPE_MASK;

		if (a->nla_len < NLA_HDRLEN || off + a->nla_len > nh->nlmsg_len)
			break;
		if (type > 0 && type < n)
			tb[type] = a;
		off += ALIGN4(a->nla_len);
	}
}

static const char *attr_str(const struct nlattr *a)
{
	static char s[64];
	size_t len;

	if (!a)
		return "-";
	len = a->nla_len - NLA_HDRLEN;
	if (len >= sizeof(s))
		len = sizeof(s) - 1;
	memcpy(s, (const char *)a + NLA_HDRLEN, len);
	s[len] = '\0';
	return s;
}

static int attr_u8(const struct nlattr *a)
{
	return a && a->nla_len > NLA_HDRLEN ? *((const uint8_t *)a + NLA_HDRLEN) : -1;
}

typedef void (*reply_fn)(const struct nlmsghdr *nh);

/* Sends the request and reads the answers until the kernel's ack (or the end of a
 * dump), handing each data message to fn. Returns 0 or a negative errno. */
static int transact(int fd, struct msg *m, reply_fn fn)
{
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	static unsigned char rx[32768];
	struct nlmsghdr *nh = (struct nlmsghdr *)m->buf;

	nh->nlmsg_len = m->len;
	if (sendto(fd, m->buf, m->len, 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0)
		return -errno;
	for (;;) {
		ssize_t n = recv(fd, rx, sizeof(rx), 0);
		size_t off = 0;

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		while (off + NLMSG_HDRLEN <= (size_t)n) {
			struct nlmsghdr *r = (struct nlmsghdr *)(rx + off);

			if (r->nlmsg_len < NLMSG_HDRLEN || off + r->nlmsg_len > (size_t)n)
				return -EPROTO;
			if (r->nlmsg_type == NLMSG_ERROR) {
				const struct nlmsgerr *e = (const struct nlmsgerr *)(rx + off + NLMSG_HDRLEN);

				if (r->nlmsg_len < NLMSG_HDRLEN + sizeof(*e))
					return -EPROTO;
				return e->error;
			}
			if (r->nlmsg_type == NLMSG_DONE)
				return 0;
			if (fn)
				fn(r);
			off += NLMSG_ALIGN(r->nlmsg_len);
		}
	}
}

static uint16_t family_id;

static void got_family(const struct nlmsghdr *nh)
{
	const struct nlattr *tb[CTRL_ATTR_FAMILY_NAME + 1];

	parse_attrs(nh, tb, CTRL_ATTR_FAMILY_NAME + 1);
	if (tb[CTRL_ATTR_FAMILY_ID] && tb[CTRL_ATTR_FAMILY_ID]->nla_len >= NLA_HDRLEN + 2)
		memcpy(&family_id, (const unsigned char *)tb[CTRL_ATTR_FAMILY_ID] + NLA_HDRLEN, 2);
}

/* The generic netlink family's id by name (registered when the smc module loads). */
static int resolve(int fd, const char *name)
{
	struct msg m;
	int rc;

	family_id = 0;
	msg_start(&m, GENL_ID_CTRL, NLM_F_ACK, CTRL_CMD_GETFAMILY);
	msg_str(&m, CTRL_ATTR_FAMILY_NAME, name);
	rc = transact(fd, &m, got_family);
	if (rc == 0 && family_id == 0)
		rc = -ENOENT;
	if (rc < 0)
		fprintf(stderr, "%s: generic netlink family %s: %s (is the smc module loaded?)\n",
			prog, name, strerror(-rc));
	return rc < 0 ? rc : family_id;
}

static void print_pnet(const struct nlmsghdr *nh)
{
	const struct nlattr *tb[PNETID_IBPORT + 1];

	parse_attrs(nh, tb, PNETID_IBPORT + 1);
	printf("PNET name=%s", attr_str(tb[PNETID_NAME]));
	printf(" eth=%s", attr_str(tb[PNETID_ETHNAME]));
	printf(" dev=%s port=%d\n", attr_str(tb[PNETID_IBNAME]), attr_u8(tb[PNETID_IBPORT]));
}

static void print_ueid(const struct nlmsghdr *nh)
{
	const struct nlattr *tb[EID_ENTRY + 1];

	parse_attrs(nh, tb, EID_ENTRY + 1);
	if (tb[EID_ENTRY]) {
		const char *eid = attr_str(tb[EID_ENTRY]);

		/* The kernel keeps a UEID blank-padded to 32 characters. */
		printf("UEID %.*s\n", (int)strcspn(eid, " "), eid);
	}
}

static void print_seid(const struct nlmsghdr *nh)
{
	const struct nlattr *tb[SEID_ENABLED + 1];

	parse_attrs(nh, tb, SEID_ENABLED + 1);
	/* No attributes: the kernel has no SMC-Dv2 capable device, hence no SEID. */
	printf("SEID %s enabled=%d\n", tb[SEID_ENTRY] ? attr_str(tb[SEID_ENTRY]) : "none",
	       attr_u8(tb[SEID_ENABLED]));
}

/* A UEID as the kernel wants it: upper case, blank-padded to 32 characters. */
static int ueid_field(const char *eid, char out[MAX_EID_LEN + 1])
{
	size_t len = strlen(eid), i;

	if (len == 0 || len > MAX_EID_LEN)
		return -1;
	memset(out, ' ', MAX_EID_LEN);
	out[MAX_EID_LEN] = '\0';
	for (i = 0; i < len; i++)
		out[i] = (char)toupper((unsigned char)eid[i]);
	return 0;
}

static int fail(const char *what, int rc)
{
	fprintf(stderr, "%s: %s: %s\n", prog, what, strerror(-rc));
	return 1;
}

static int cmd_pnet(int fd, int argc, char **argv)
{
	const char *sub = argv[0], *name = argc > 1 ? argv[1] : NULL;
	int fam = resolve(fd, PNETID_FAMILY), rc, i;
	struct msg m;

	if (fam < 0)
		return 1;
	if (!strcmp(sub, "add") && name) {
		const char *eth = NULL, *dev = NULL;

		for (i = 2; i + 1 < argc; i += 2) {
			if (!strcmp(argv[i], "--eth"))
				eth = argv[i + 1];
			else if (!strcmp(argv[i], "--dev"))
				dev = argv[i + 1];
			else
				break;
		}
		if (i != argc || (!eth && !dev)) {
			usage(stderr);
			return 2;
		}
		msg_start(&m, fam, NLM_F_ACK, PNETID_ADD);
		msg_str(&m, PNETID_NAME, name);
		if (eth)
			msg_str(&m, PNETID_ETHNAME, eth);
		if (dev)
			msg_str(&m, PNETID_IBNAME, dev);
		rc = transact(fd, &m, NULL);
		if (rc < 0)
			return fail("pnet add", rc);
		printf("PNET added name=%s eth=%s dev=%s\n", name, eth ? eth : "-", dev ? dev : "-");
		return 0;
	}
	if (!strcmp(sub, "del") && name && argc == 2) {
		msg_start(&m, fam, NLM_F_ACK, PNETID_DEL);
		msg_str(&m, PNETID_NAME, name);
		rc = transact(fd, &m, NULL);
		if (rc < 0)
			return fail("pnet del", rc);
		printf("PNET deleted name=%s\n", name);
		return 0;
	}
	if (!strcmp(sub, "show") && argc <= 2) {
		/* One entry: the GET command with a name; all: its dump. */
		msg_start(&m, fam, name ? NLM_F_ACK : NLM_F_DUMP, PNETID_GET);
		if (name)
			msg_str(&m, PNETID_NAME, name);
		rc = transact(fd, &m, print_pnet);
		return rc < 0 ? fail("pnet show", rc) : 0;
	}
	if (!strcmp(sub, "flush") && argc == 1) {
		msg_start(&m, fam, NLM_F_ACK, PNETID_FLUSH);
		rc = transact(fd, &m, NULL);
		if (rc < 0)
			return fail("pnet flush", rc);
		printf("PNET flushed\n");
		return 0;
	}
	usage(stderr);
	return 2;
}

static int cmd_eid(int fd, const char *what, int argc, char **argv)
{
	const char *sub = argv[0];
	char field[MAX_EID_LEN + 1];
	int fam = resolve(fd, GEN_FAMILY), rc;
	struct msg m;

	if (fam < 0)
		return 1;
	if (!strcmp(what, "ueid")) {
		if ((!strcmp(sub, "add") || !strcmp(sub, "del")) && argc == 2) {
			int add = !strcmp(sub, "add");

			if (ueid_field(argv[1], field)) {
				fprintf(stderr, "%s: a UEID has 1 to %d characters\n", prog, MAX_EID_LEN);
				return 2;
			}
			msg_start(&m, fam, NLM_F_ACK, add ? GEN_ADD_UEID : GEN_REMOVE_UEID);
			msg_attr(&m, EID_ENTRY, field, sizeof(field));
			rc = transact(fd, &m, NULL);
			/* Removing the last UEID enables the SEID again: the kernel says EAGAIN. */
			if (!add && rc == -EAGAIN) {
				printf("UEID deleted %.*s (the last: SEID enabled again)\n",
				       (int)strcspn(field, " "), field);
				return 0;
			}
			if (rc < 0)
				return fail(add ? "ueid add" : "ueid del", rc);
			printf("UEID %s %.*s\n", add ? "added" : "deleted", (int)strcspn(field, " "), field);
			return 0;
		}
		if (!strcmp(sub, "show") && argc == 1) {
			msg_start(&m, fam, NLM_F_DUMP, GEN_DUMP_UEID);
			rc = transact(fd, &m, print_ueid);
			return rc < 0 ? fail("ueid show", rc) : 0;
		}
		if (!strcmp(sub, "flush") && argc == 1) {
			msg_start(&m, fam, NLM_F_ACK, GEN_FLUSH_UEID);
			rc = transact(fd, &m, NULL);
			if (rc < 0)
				return fail("ueid flush", rc);
			printf("UEID flushed\n");
			return 0;
		}
	} else if (argc == 1) {
		if (!strcmp(sub, "show")) {
			msg_start(&m, fam, NLM_F_DUMP, GEN_DUMP_SEID);
			rc = transact(fd, &m, print_seid);
			return rc < 0 ? fail("seid show", rc) : 0;
		}
		if (!strcmp(sub, "enable") || !strcmp(sub, "disable")) {
			int on = !strcmp(sub, "enable");

			msg_start(&m, fam, NLM_F_ACK, on ? GEN_ENABLE_SEID : GEN_DISABLE_SEID);
			rc = transact(fd, &m, NULL);
			/* The kernel keeps the SEID while no UEID is defined (ENOENT). */
			if (rc < 0)
				return fail(on ? "seid enable" : "seid disable", rc);
			printf("SEID %s\n", on ? "enabled" : "disabled");
			return 0;
		}
	}
	usage(stderr);
	return 2;
}

int main(int argc, char **argv)
{
	struct sockaddr_nl me = { .nl_family = AF_NETLINK };
	int fd, rc;

	if (argc < 3) {
		usage(argc > 1 && !strcmp(argv[1], "-h") ? stdout : stderr);
		return argc > 1 && !strcmp(argv[1], "-h") ? 0 : 2;
	}
	fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_GENERIC);
	if (fd < 0 || bind(fd, (struct sockaddr *)&me, sizeof(me)) < 0) {
		fprintf(stderr, "%s: netlink socket: %s\n", prog, strerror(errno));
		return 1;
	}
	if (!strcmp(argv[1], "pnet"))
		rc = cmd_pnet(fd, argc - 2, argv + 2);
	else if (!strcmp(argv[1], "ueid") || !strcmp(argv[1], "seid"))
		rc = cmd_eid(fd, argv[1], argc - 2, argv + 2);
	else {
		usage(stderr);
		rc = 2;
	}
	close(fd);
	fflush(stdout);
	return rc;
}
