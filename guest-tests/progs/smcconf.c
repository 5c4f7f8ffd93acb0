/* smcconf.c - net/smc's configuration over generic netlink: the software PNET table
 * (family SMC_PNETID) and the SMC-Dv2 EIDs (family SMC_GEN_NETLINK); SMC-R's link
 * groups as net/smc lists them; and the RDMA devices a software RoCE link gives
 * (NETLINK_RDMA, what iproute2's `rdma link` does), for SMC-R beside SMC-D.
 *
 *   smcconf pnet add PNETID [--eth IFNAME] [--dev DEVICE]
 *   smcconf pnet del PNETID | pnet show [PNETID] | pnet flush
 *   smcconf ueid add EID | ueid del EID | ueid show | ueid flush
 *   smcconf seid show | seid enable | seid disable
 *   smcconf smcr show          SMC-R's devices, link groups and links (SMCR-DEV, -LGR, -LINK)
 *   smcconf rdma add NAME --netdev IFNAME [--type rxe] | rdma del NAME | rdma show
 *
 * DEVICE names an RDMA or SMC-D device; net/smc matches an SMC-D device by its PCI
 * function's name (e.g. 0002:00:00.0, net/smc/smc_pnet.c smc_pnet_find_smcd). Each
 * command prints what it did on one line (PNET, UEID, SEID) and exits 0, or prints the
 * kernel's error and exits 1; 2 is a usage error. Written for the ism-emu guests;
 * the families' commands and attributes follow include/uapi/linux/smc.h, the generic
 * netlink transport is genl.c's (shared with smcapi). */
#define _GNU_SOURCE
#include "genl.h"

#include <ctype.h>
#include <errno.h>
#include <linux/netlink.h>
#include <rdma/rdma_netlink.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static const char *prog = "smcconf";

static void usage(FILE *f)
{
	fprintf(f,
		"usage: %s pnet add PNETID [--eth IFNAME] [--dev DEVICE]\n"
		"       %s pnet del PNETID | pnet show [PNETID] | pnet flush\n"
		"       %s ueid add EID | ueid del EID | ueid show | ueid flush\n"
		"       %s seid show | seid enable | seid disable\n"
		"       %s smcr show\n"
		"       %s rdma add NAME --netdev IFNAME [--type rxe] | rdma del NAME | rdma show\n",
		prog, prog, prog, prog, prog, prog);
}

static const char *attr_str(const struct genl_attr *a)
{
	static char s[64];
	size_t len;

	if (!a->data)
		return "-";
	len = (size_t)a->len;
	if (len >= sizeof(s))
		len = sizeof(s) - 1;
	memcpy(s, a->data, len);
	s[len] = '\0';
	return s;
}

static int attr_u8(const struct genl_attr *a)
{
	return a->data && a->len > 0 ? a->data[0] : -1;
}

/* The generic netlink family's id by name (registered when the smc module loads). */
static int resolve(struct genl *nl, const char *name)
{
	int rc = genl_family(nl, name);

	if (rc < 0)
		fprintf(stderr, "%s: generic netlink family %s: %s (is the smc module loaded?)\n",
			prog, name, strerror(-rc));
	return rc;
}

static void print_pnet(const unsigned char *attrs, int len, void *ctx)
{
	struct genl_attr tb[PNETID_IBPORT + 1];

	(void)ctx;
	genl_parse(attrs, len, tb, PNETID_IBPORT + 1);
	printf("PNET name=%s", attr_str(&tb[PNETID_NAME]));
	printf(" eth=%s", attr_str(&tb[PNETID_ETHNAME]));
	printf(" dev=%s port=%d\n", attr_str(&tb[PNETID_IBNAME]), attr_u8(&tb[PNETID_IBPORT]));
}

static void print_ueid(const unsigned char *attrs, int len, void *ctx)
{
	struct genl_attr tb[EID_ENTRY + 1];

	(void)ctx;
	genl_parse(attrs, len, tb, EID_ENTRY + 1);
	if (tb[EID_ENTRY].data) {
		const char *eid = attr_str(&tb[EID_ENTRY]);

		/* The kernel keeps a UEID blank-padded to 32 characters. */
		printf("UEID %.*s\n", (int)strcspn(eid, " "), eid);
	}
}

static void print_seid(const unsigned char *attrs, int len, void *ctx)
{
	struct genl_attr tb[SEID_ENABLED + 1];

	(void)ctx;
	genl_parse(attrs, len, tb, SEID_ENABLED + 1);
	/* No attributes: the kernel has no SMC-Dv2 capable device, hence no SEID. */
	printf("SEID %s enabled=%d\n", tb[SEID_ENTRY].data ? attr_str(&tb[SEID_ENTRY]) : "none",
	       attr_u8(&tb[SEID_ENABLED]));
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

static int cmd_pnet(struct genl *nl, int argc, char **argv)
{
	const char *sub = argv[0], *name = argc > 1 ? argv[1] : NULL;
	int fam = resolve(nl, PNETID_FAMILY), rc, i;
	struct genl_req m;

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
		genl_req_init(&m, fam, PNETID_ADD);
		genl_put_str(&m, PNETID_NAME, name);
		if (eth)
			genl_put_str(&m, PNETID_ETHNAME, eth);
		if (dev)
			genl_put_str(&m, PNETID_IBNAME, dev);
		rc = genl_request(nl, &m, NLM_F_ACK, NULL, NULL);
		if (rc < 0)
			return fail("pnet add", rc);
		printf("PNET added name=%s eth=%s dev=%s\n", name, eth ? eth : "-", dev ? dev : "-");
		return 0;
	}
	if (!strcmp(sub, "del") && name && argc == 2) {
		genl_req_init(&m, fam, PNETID_DEL);
		genl_put_str(&m, PNETID_NAME, name);
		rc = genl_request(nl, &m, NLM_F_ACK, NULL, NULL);
		if (rc < 0)
			return fail("pnet del", rc);
		printf("PNET deleted name=%s\n", name);
		return 0;
	}
	if (!strcmp(sub, "show") && argc <= 2) {
		/* One entry: the GET command with a name; all: its dump. */
		genl_req_init(&m, fam, PNETID_GET);
		if (name)
			genl_put_str(&m, PNETID_NAME, name);
		rc = genl_request(nl, &m, name ? NLM_F_ACK : NLM_F_DUMP, print_pnet, NULL);
		return rc < 0 ? fail("pnet show", rc) : 0;
	}
	if (!strcmp(sub, "flush") && argc == 1) {
		genl_req_init(&m, fam, PNETID_FLUSH);
		rc = genl_request(nl, &m, NLM_F_ACK, NULL, NULL);
		if (rc < 0)
			return fail("pnet flush", rc);
		printf("PNET flushed\n");
		return 0;
	}
	usage(stderr);
	return 2;
}

static int cmd_eid(struct genl *nl, const char *what, int argc, char **argv)
{
	const char *sub = argv[0];
	char field[MAX_EID_LEN + 1];
	int fam = resolve(nl, GEN_FAMILY), rc;
	struct genl_req m;

	if (fam < 0)
		return 1;
	if (!strcmp(what, "ueid")) {
		if ((!strcmp(sub, "add") || !strcmp(sub, "del")) && argc == 2) {
			int add = !strcmp(sub, "add");

			if (ueid_field(argv[1], field)) {
				fprintf(stderr, "%s: a UEID has 1 to %d characters\n", prog, MAX_EID_LEN);
				return 2;
			}
			genl_req_init(&m, fam, add ? GEN_ADD_UEID : GEN_REMOVE_UEID);
			genl_put(&m, EID_ENTRY, field, sizeof(field));
			rc = genl_request(nl, &m, NLM_F_ACK, NULL, NULL);
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
			genl_req_init(&m, fam, GEN_DUMP_UEID);
			rc = genl_request(nl, &m, NLM_F_DUMP, print_ueid, NULL);
			return rc < 0 ? fail("ueid show", rc) : 0;
		}
		if (!strcmp(sub, "flush") && argc == 1) {
			genl_req_init(&m, fam, GEN_FLUSH_UEID);
			rc = genl_request(nl, &m, NLM_F_ACK, NULL, NULL);
			if (rc < 0)
				return fail("ueid flush", rc);
			printf("UEID flushed\n");
			return 0;
		}
	} else if (argc == 1) {
		if (!strcmp(sub, "show")) {
			genl_req_init(&m, fam, GEN_DUMP_SEID);
			rc = genl_request(nl, &m, NLM_F_DUMP, print_seid, NULL);
			return rc < 0 ? fail("seid show", rc) : 0;
		}
		if (!strcmp(sub, "enable") || !strcmp(sub, "disable")) {
			int on = !strcmp(sub, "enable");

			genl_req_init(&m, fam, on ? GEN_ENABLE_SEID : GEN_DISABLE_SEID);
			rc = genl_request(nl, &m, NLM_F_ACK, NULL, NULL);
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

/* ---- SMC-R's view (SMC_GEN_NETLINK: GET_DEV_SMCR, GET_LGR_SMCR, GET_LINK_SMCR) ---- */
enum { GEN_GET_LGR_SMCR = 2, GEN_GET_LINK_SMCR = 3, GEN_GET_DEV_SMCR = 6 };
enum { NEST_LGR_SMCR = 2, NEST_LINK_SMCR = 3, NEST_DEV_SMCR = 6 };
enum {
	LGR_R_ID = 1, LGR_R_ROLE, LGR_R_TYPE, LGR_R_PNETID, LGR_R_VLAN_ID, LGR_R_CONNS_NUM,
	LGR_R_V2_COMMON, LGR_R_V2, LGR_R_MAX = 16
};
/* (this nest's attributes start at 0: SMC_NLA_LGR_V2_VER) */
enum { LGR_V2_VER = 0, LGR_V2_REL, LGR_V2_OS, LGR_V2_NEG_EID, LGR_V2_MAX = 5 };
enum { LGR_R_V2_DIRECT = 1, LGR_R_V2_MAX_CONNS, LGR_R_V2_MAX_LINKS, LGR_R_V2_ATTR_MAX = 4 };
enum {
	LINK_ID = 1, LINK_IB_DEV, LINK_IB_PORT, LINK_GID, LINK_PEER_GID, LINK_CONN_CNT,
	LINK_NET_DEV, LINK_UID, LINK_PEER_UID, LINK_STATE, LINK_MAX = 11
};
enum { DEV_USE_CNT = 1, DEV_IS_CRIT, DEV_PORT = 8, DEV_PORT2, DEV_IB_NAME, DEV_MAX = 11 };
enum { PORT_NETDEV = 3, PORT_STATE, PORT_VALID, PORT_LNK_CNT, PORT_MAX = 7 };

/* The nest TYPE of a reply message parsed into tb; 0 if the message has none (a dump
 * of links sends each link group's message before its links'). */
static int nested(const unsigned char *attrs, int len, int type, struct genl_attr *tb, int max)
{
	struct genl_attr top[8];

	genl_parse(attrs, len, top, 8);
	memset(tb, 0, sizeof(*tb) * (size_t)max);
	if (type >= 8 || !top[type].data)
		return 0;
	genl_parse(top[type].data, top[type].len, tb, max);
	return 1;
}

static void print_smcr_dev(const unsigned char *attrs, int len, void *ctx)
{
	struct genl_attr tb[DEV_MAX], port[PORT_MAX];

	(void)ctx;
	if (!nested(attrs, len, NEST_DEV_SMCR, tb, DEV_MAX))
		return;
	printf("SMCR-DEV name=%s", attr_str(&tb[DEV_IB_NAME]));
	printf(" use_cnt=%llu crit=%llu", (unsigned long long)genl_uint(&tb[DEV_USE_CNT]),
	       (unsigned long long)genl_uint(&tb[DEV_IS_CRIT]));
	genl_parse(tb[DEV_PORT].data, tb[DEV_PORT].data ? tb[DEV_PORT].len : 0, port, PORT_MAX);
	printf(" port1: netdev=%llu state=%llu valid=%llu links=%llu\n",
	       (unsigned long long)genl_uint(&port[PORT_NETDEV]), (unsigned long long)genl_uint(&port[PORT_STATE]),
	       (unsigned long long)genl_uint(&port[PORT_VALID]), (unsigned long long)genl_uint(&port[PORT_LNK_CNT]));
}

static void print_smcr_lgr(const unsigned char *attrs, int len, void *ctx)
{
	struct genl_attr tb[LGR_R_MAX], v2[LGR_V2_MAX], rv2[LGR_R_V2_ATTR_MAX];

	(void)ctx;
	if (!nested(attrs, len, NEST_LGR_SMCR, tb, LGR_R_MAX))
		return;
	printf("SMCR-LGR id=0x%08llx role=%s type=%llu conns=%llu",
	       (unsigned long long)genl_uint(&tb[LGR_R_ID]), genl_uint(&tb[LGR_R_ROLE]) ? "server" : "client",
	       (unsigned long long)genl_uint(&tb[LGR_R_TYPE]), (unsigned long long)genl_uint(&tb[LGR_R_CONNS_NUM]));
	printf(" pnetid=%s", attr_str(&tb[LGR_R_PNETID]));
	/* SMC-Rv2 link groups carry the common v2 part and SMC-R's own v2 part. */
	if (tb[LGR_R_V2_COMMON].data) {
		genl_parse(tb[LGR_R_V2_COMMON].data, tb[LGR_R_V2_COMMON].len, v2, LGR_V2_MAX);
		printf(" version=%llu release=%llu eid=%.*s", (unsigned long long)genl_uint(&v2[LGR_V2_VER]),
		       (unsigned long long)genl_uint(&v2[LGR_V2_REL]),
		       (int)strcspn(attr_str(&v2[LGR_V2_NEG_EID]), " "), attr_str(&v2[LGR_V2_NEG_EID]));
	} else {
		printf(" version=1");
	}
	if (tb[LGR_R_V2].data) {
		genl_parse(tb[LGR_R_V2].data, tb[LGR_R_V2].len, rv2, LGR_R_V2_ATTR_MAX);
		printf(" direct=%llu max_conns=%llu max_links=%llu", (unsigned long long)genl_uint(&rv2[LGR_R_V2_DIRECT]),
		       (unsigned long long)genl_uint(&rv2[LGR_R_V2_MAX_CONNS]),
		       (unsigned long long)genl_uint(&rv2[LGR_R_V2_MAX_LINKS]));
	}
	printf("\n");
}

static void print_smcr_link(const unsigned char *attrs, int len, void *ctx)
{
	struct genl_attr tb[LINK_MAX];

	(void)ctx;
	if (!nested(attrs, len, NEST_LINK_SMCR, tb, LINK_MAX))
		return;
	/* (attr_str's buffer is one: a string a printf) */
	printf("SMCR-LINK id=%llu", (unsigned long long)genl_uint(&tb[LINK_ID]));
	printf(" ibdev=%s", attr_str(&tb[LINK_IB_DEV]));
	printf(" port=%llu conns=%llu state=%llu", (unsigned long long)genl_uint(&tb[LINK_IB_PORT]),
	       (unsigned long long)genl_uint(&tb[LINK_CONN_CNT]), (unsigned long long)genl_uint(&tb[LINK_STATE]));
	printf(" gid=%s", attr_str(&tb[LINK_GID]));
	printf(" peer_gid=%s\n", attr_str(&tb[LINK_PEER_GID]));
}

static int cmd_smcr(struct genl *nl, int argc, char **argv)
{
	int fam = resolve(nl, GEN_FAMILY), rc;
	struct genl_req m;

	if (fam < 0)
		return 1;
	if (argc != 1 || strcmp(argv[0], "show")) {
		usage(stderr);
		return 2;
	}
	genl_req_init(&m, fam, GEN_GET_DEV_SMCR);
	rc = genl_request(nl, &m, NLM_F_DUMP, print_smcr_dev, NULL);
	if (rc < 0)
		return fail("smcr show: devices", rc);
	genl_req_init(&m, fam, GEN_GET_LGR_SMCR);
	rc = genl_request(nl, &m, NLM_F_DUMP, print_smcr_lgr, NULL);
	if (rc < 0)
		return fail("smcr show: link groups", rc);
	genl_req_init(&m, fam, GEN_GET_LINK_SMCR);
	rc = genl_request(nl, &m, NLM_F_DUMP, print_smcr_link, NULL);
	return rc < 0 ? fail("smcr show: links", rc) : 0;
}

/* ---- RDMA links (NETLINK_RDMA, the nldev client) --------------------------------- */
#define NLDEV(cmd) RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, cmd)

struct rdma_find {
	const char *name;
	long index;         /* -1: not found */
};

static void rdma_dev_cb(const unsigned char *attrs, int len, void *ctx)
{
	struct genl_attr tb[RDMA_NLDEV_ATTR_NDEV_NAME + 1];
	struct rdma_find *f = ctx;

	genl_parse(attrs, len, tb, RDMA_NLDEV_ATTR_NDEV_NAME + 1);
	if (!f->name) {
		printf("RDMA index=%llu name=%s\n", (unsigned long long)genl_uint(&tb[RDMA_NLDEV_ATTR_DEV_INDEX]),
		       attr_str(&tb[RDMA_NLDEV_ATTR_DEV_NAME]));
	} else if (tb[RDMA_NLDEV_ATTR_DEV_NAME].data && !strcmp(attr_str(&tb[RDMA_NLDEV_ATTR_DEV_NAME]), f->name)) {
		f->index = (long)genl_uint(&tb[RDMA_NLDEV_ATTR_DEV_INDEX]);
	}
}

static int cmd_rdma(int argc, char **argv)
{
	const char *sub = argv[0], *name = argc > 1 ? argv[1] : NULL;
	struct rdma_find f = { NULL, -1 };
	struct genl nl;
	struct genl_req m;
	int rc;

	rc = genl_open_proto(&nl, NETLINK_RDMA, 0);
	if (rc < 0) {
		fprintf(stderr, "%s: NETLINK_RDMA socket: %s (is ib_core loaded?)\n", prog, strerror(-rc));
		return 1;
	}
	if (!strcmp(sub, "add") && name && (argc == 4 || argc == 6) && !strcmp(argv[2], "--netdev") &&
	    (argc == 4 || !strcmp(argv[4], "--type"))) {
		const char *type = argc == 6 ? argv[5] : "rxe";

		genl_req_raw(&m, NLDEV(RDMA_NLDEV_CMD_NEWLINK));
		genl_put_str(&m, RDMA_NLDEV_ATTR_DEV_NAME, name);
		genl_put_str(&m, RDMA_NLDEV_ATTR_LINK_TYPE, type);
		genl_put_str(&m, RDMA_NLDEV_ATTR_NDEV_NAME, argv[3]);
		rc = genl_request(&nl, &m, NLM_F_ACK, NULL, NULL);
		if (rc == 0)
			printf("RDMA added name=%s type=%s netdev=%s\n", name, type, argv[3]);
	} else if (!strcmp(sub, "del") && name && argc == 2) {
		f.name = name;
		genl_req_raw(&m, NLDEV(RDMA_NLDEV_CMD_GET));
		rc = genl_request(&nl, &m, NLM_F_DUMP, rdma_dev_cb, &f);
		if (rc == 0 && f.index < 0)
			rc = -ENODEV;
		if (rc == 0) {
			uint32_t index = (uint32_t)f.index;

			genl_req_raw(&m, NLDEV(RDMA_NLDEV_CMD_DELLINK));
			genl_put(&m, RDMA_NLDEV_ATTR_DEV_INDEX, &index, sizeof(index));
			rc = genl_request(&nl, &m, NLM_F_ACK, NULL, NULL);
		}
		if (rc == 0)
			printf("RDMA deleted name=%s\n", name);
	} else if (!strcmp(sub, "show") && argc == 1) {
		genl_req_raw(&m, NLDEV(RDMA_NLDEV_CMD_GET));
		rc = genl_request(&nl, &m, NLM_F_DUMP, rdma_dev_cb, &f);
	} else {
		genl_close(&nl);
		usage(stderr);
		return 2;
	}
	genl_close(&nl);
	return rc < 0 ? fail("rdma", rc) : 0;
}

int main(int argc, char **argv)
{
	struct genl nl;
	int rc;

	if (argc < 3) {
		usage(argc > 1 && !strcmp(argv[1], "-h") ? stdout : stderr);
		return argc > 1 && !strcmp(argv[1], "-h") ? 0 : 2;
	}
	if (!strcmp(argv[1], "rdma"))
		return cmd_rdma(argc - 2, argv + 2);
	rc = genl_open(&nl);
	if (rc < 0) {
		fprintf(stderr, "%s: netlink socket: %s\n", prog, strerror(-rc));
		return 1;
	}
	if (!strcmp(argv[1], "pnet"))
		rc = cmd_pnet(&nl, argc - 2, argv + 2);
	else if (!strcmp(argv[1], "ueid") || !strcmp(argv[1], "seid"))
		rc = cmd_eid(&nl, argv[1], argc - 2, argv + 2);
	else if (!strcmp(argv[1], "smcr"))
		rc = cmd_smcr(&nl, argc - 2, argv + 2);
	else {
		usage(stderr);
		rc = 2;
	}
	genl_close(&nl);
	fflush(stdout);
	return rc;
}
