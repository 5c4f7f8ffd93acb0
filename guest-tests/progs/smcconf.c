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
 * the families' commands and attributes follow include/uapi/linux/smc.h, the generic
 * netlink transport is genl.c's (shared with smcapi). */
#define _GNU_SOURCE
#include "genl.h"

#include <ctype.h>
#include <errno.h>
#include <linux/netlink.h>
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
		"       %s seid show | seid enable | seid disable\n",
		prog, prog, prog, prog);
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

int main(int argc, char **argv)
{
	struct genl nl;
	int rc;

	if (argc < 3) {
		usage(argc > 1 && !strcmp(argv[1], "-h") ? stdout : stderr);
		return argc > 1 && !strcmp(argv[1], "-h") ? 0 : 2;
	}
	rc = genl_open(&nl);
	if (rc < 0) {
		fprintf(stderr, "%s: netlink socket: %s\n", prog, strerror(-rc));
		return 1;
	}
	if (!strcmp(argv[1], "pnet"))
		rc = cmd_pnet(&nl, argc - 2, argv + 2);
	else if (!strcmp(argv[1], "ueid") || !strcmp(argv[1], "seid"))
		rc = cmd_eid(&nl, argv[1], argc - 2, argv + 2);
	else {
		usage(stderr);
		rc = 2;
	}
	genl_close(&nl);
	fflush(stdout);
	return rc;
}
