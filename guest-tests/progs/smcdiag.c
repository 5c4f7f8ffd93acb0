/* smcdiag.c - AF_SMC sock_diag over NETLINK_SOCK_DIAG, fallback reason names */
#define _GNU_SOURCE
#include "smcdiag.h"
#include "common.h"

#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/* ---- kernel ABI (include/uapi/linux/smc_diag.h) ------------------------- */

struct smct_diag_req {
	uint8_t diag_family;
	uint8_t pad[2];
	uint8_t diag_ext;               /* bitmask: 1 << (SMC_DIAG_x - 1) */
	struct inet_diag_sockid id;
};

struct smct_diag_msg {
	uint8_t diag_family;
	uint8_t diag_state;
	uint8_t diag_mode;              /* old name: diag_fallback */
	uint8_t diag_shutdown;
	struct inet_diag_sockid id;
	uint32_t diag_uid;
	uint64_t diag_inode __attribute__((aligned(8)));
};

enum {
	SMCT_DIAG_NONE,
	SMCT_DIAG_CONNINFO,
	SMCT_DIAG_LGRINFO,
	SMCT_DIAG_SHUTDOWN,
	SMCT_DIAG_DMBINFO,
	SMCT_DIAG_FALLBACK,
};

/* smc_diag_lgrinfo: one link of an SMC-R link group (packed) */
struct smct_diag_lgrinfo {
	uint8_t link_id;
	uint8_t ibname[64];             /* IB_DEVICE_NAME_MAX */
	uint8_t ibport;
	uint8_t gid[40];
	uint8_t peer_gid[40];
	uint8_t role;
} __attribute__((packed));

struct smct_diag_cursor {
	uint16_t reserved;
	uint16_t wrap;
	uint32_t count;
};

struct smct_diag_conninfo {
	uint32_t token;
	uint32_t sndbuf_size;
	uint32_t rmbe_size;
	uint32_t peer_rmbe_size;
	struct smct_diag_cursor rx_prod, rx_cons, tx_prod, tx_cons;
	uint8_t rx_prod_flags, rx_conn_state_flags, tx_prod_flags, tx_conn_state_flags;
	struct smct_diag_cursor tx_prep, tx_sent, tx_fin;
};

struct smct_diag_fallback {
	uint32_t reason;
	uint32_t peer_diagnosis;
};

struct smct_dmbinfo {
	uint32_t linkid;
	uint64_t peer_gid __attribute__((aligned(8)));
	uint64_t my_gid __attribute__((aligned(8)));
	uint64_t token __attribute__((aligned(8)));
	uint64_t peer_token __attribute__((aligned(8)));
	uint64_t peer_gid_ext __attribute__((aligned(8))); /* since 6.8 */
	uint64_t my_gid_ext __attribute__((aligned(8)));   /* since 6.8 */
};

_Static_assert(sizeof(struct smct_diag_msg) == 64, "smc_diag_msg layout");
_Static_assert(sizeof(struct smct_diag_conninfo) == 76, "smc_diag_conninfo layout");
_Static_assert(offsetof(struct smct_dmbinfo, peer_token) == 32, "dmbinfo layout");
_Static_assert(sizeof(struct smct_dmbinfo) == 56, "dmbinfo layout");

/* ---- generic sock_diag dump ------------------------------------------- */

typedef void (*dump_cb)(const struct nlmsghdr *nlh, void *ctx);

static int diag_dump(const void *req, size_t reqlen, const char *what, dump_cb cb, void *ctx,
		     char *err, size_t errlen)
{
	static unsigned int seq_counter;
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK };
	struct {
		struct nlmsghdr nlh;
		unsigned char body[128];
	} msg;
	struct timeval tv = { 10, 0 };
	unsigned int seq = __atomic_add_fetch(&seq_counter, 1, __ATOMIC_RELAXED) + (unsigned int)getpid() * 1000u;
	static const size_t bufsz = 256 * 1024;
	unsigned char *buf;
	int fd, rc = -1, done = 0;
	int req_family_smc = ((const unsigned char *)req)[0] == AF_SMC;

	if (reqlen > sizeof(msg.body)) {
		snprintf(err, errlen, "internal: request too big");
		return -1;
	}
	fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (fd < 0) {
		snprintf(err, errlen, "socket(AF_NETLINK, NETLINK_SOCK_DIAG): %s", strerror(errno));
		return -1;
	}
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv))) {
		snprintf(err, errlen, "setsockopt(netlink SO_RCVTIMEO): %s", strerror(errno));
		close(fd);
		return -1;
	}
	buf = malloc(bufsz);
	if (!buf) {
		snprintf(err, errlen, "out of memory");
		close(fd);
		return -1;
	}
	memset(&msg, 0, sizeof(msg));
	msg.nlh.nlmsg_len = (uint32_t)NLMSG_LENGTH(reqlen);
	msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	msg.nlh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
	msg.nlh.nlmsg_seq = seq;
	memcpy(NLMSG_DATA(&msg.nlh), req, reqlen);
	if (sendto(fd, &msg, msg.nlh.nlmsg_len, 0, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		snprintf(err, errlen, "%s: sendto(netlink): %s", what, strerror(errno));
		goto out;
	}
	while (!done) {
		ssize_t n = recv(fd, buf, bufsz, 0);
		struct nlmsghdr *h;
		int len;

		if (n < 0) {
			if (errno == EINTR)
				continue;
			snprintf(err, errlen, "%s: recv(netlink): %s", what,
				 errno == EAGAIN ? "timed out" : strerror(errno));
			goto out;
		}
		if (n == 0) {
			snprintf(err, errlen, "%s: netlink socket closed", what);
			goto out;
		}
		len = (int)n;
		for (h = (struct nlmsghdr *)buf; NLMSG_OK(h, (unsigned int)len); h = NLMSG_NEXT(h, len)) {
			if (h->nlmsg_seq != seq)
				continue;
			if (h->nlmsg_type == NLMSG_DONE) {
				done = 1;
				break;
			}
			if (h->nlmsg_type == NLMSG_ERROR) {
				const struct nlmsgerr *e = NLMSG_DATA(h);
				int code = h->nlmsg_len >= NLMSG_LENGTH(sizeof(*e)) ? -e->error : EPROTO;

				if (code == 0) { /* ack */
					done = 1;
					break;
				}
				snprintf(err, errlen, "%s: kernel answered %s%s", what, strerror(code),
					 code == ENOENT ? (req_family_smc ? " (no AF_SMC sock_diag handler: is the smc_diag module loaded?)"
							       : " (no inet sock_diag handler: inet_diag/tcp_diag not loaded?)") : "");
				goto out;
			}
			cb(h, ctx);
		}
	}
	rc = 0;
out:
	free(buf);
	close(fd);
	return rc;
}

/* ---- AF_SMC ------------------------------------------------------------ */

struct smc_ctx {
	uint64_t inode;
	struct smc_info *info;
	int count;
};

static void copy_attr(void *dst, size_t dstlen, const struct nlattr *a)
{
	size_t plen = a->nla_len - NLA_HDRLEN;

	memset(dst, 0, dstlen);
	memcpy(dst, (const unsigned char *)a + NLA_HDRLEN, plen < dstlen ? plen : dstlen);
}

static void smc_cb(const struct nlmsghdr *h, void *vctx)
{
	struct smc_ctx *ctx = vctx;
	const struct smct_diag_msg *m = NLMSG_DATA(h);
	struct smc_info *in = ctx->info;
	const unsigned char *p, *end;

	if (h->nlmsg_len < NLMSG_LENGTH(sizeof(*m)))
		return;
	ctx->count++;
	if (m->diag_inode != ctx->inode)
		return;
	memset(in, 0, sizeof(*in));
	in->found = 1;
	in->family = m->diag_family;
	in->state = m->diag_state;
	in->mode = m->diag_mode;
	in->shutdown = m->diag_shutdown;
	in->sport = ntohs(m->id.idiag_sport);
	in->dport = ntohs(m->id.idiag_dport);
	in->src = m->id.idiag_src[0];
	in->dst = m->id.idiag_dst[0];
	memcpy(in->src6, m->id.idiag_src, sizeof(in->src6));
	memcpy(in->dst6, m->id.idiag_dst, sizeof(in->dst6));
	in->inode = m->diag_inode;
	in->shutdown_attr = -1;

	p = (const unsigned char *)NLMSG_DATA(h) + NLMSG_ALIGN(sizeof(*m));
	end = (const unsigned char *)h + h->nlmsg_len;
	while (p + NLA_HDRLEN <= end) {
		const struct nlattr *a = (const struct nlattr *)p;

		if (a->nla_len < NLA_HDRLEN || p + a->nla_len > end)
			break;
		if ((a->nla_type & NLA_TYPE_MASK) < 32)
			in->attrs |= 1u << (a->nla_type & NLA_TYPE_MASK);
		switch (a->nla_type & NLA_TYPE_MASK) {
		case SMCT_DIAG_SHUTDOWN:
			if (a->nla_len > NLA_HDRLEN)
				in->shutdown_attr = *((const unsigned char *)a + NLA_HDRLEN);
			break;
		case SMCT_DIAG_FALLBACK: {
			struct smct_diag_fallback fb;

			copy_attr(&fb, sizeof(fb), a);
			in->have_fallback = 1;
			in->fb_reason = fb.reason;
			in->fb_peer_diag = fb.peer_diagnosis;
			break;
		}
		case SMCT_DIAG_CONNINFO: {
			struct smct_diag_conninfo ci;

			copy_attr(&ci, sizeof(ci), a);
			in->have_conn = 1;
			in->conn_token = ci.token;
			in->sndbuf_size = ci.sndbuf_size;
			in->rmbe_size = ci.rmbe_size;
			in->peer_rmbe_size = ci.peer_rmbe_size;
			in->rx_prod = ci.rx_prod.count;
			in->rx_cons = ci.rx_cons.count;
			in->tx_prod = ci.tx_prod.count;
			in->tx_cons = ci.tx_cons.count;
			break;
		}
		case SMCT_DIAG_LGRINFO: {
			struct smct_diag_lgrinfo l;

			copy_attr(&l, sizeof(l), a);
			in->have_lgr = 1;
			in->link_id = l.link_id;
			in->ibport = l.ibport;
			in->lgr_role = l.role;
			memcpy(in->ibname, l.ibname, sizeof(l.ibname));
			in->ibname[sizeof(l.ibname)] = '\0';
			memcpy(in->lnk_gid, l.gid, sizeof(l.gid));
			memcpy(in->lnk_peer_gid, l.peer_gid, sizeof(l.peer_gid));
			break;
		}
		case SMCT_DIAG_DMBINFO: {
			struct smct_dmbinfo d;

			copy_attr(&d, sizeof(d), a);
			in->have_dmb = 1;
			in->have_gid_ext = (size_t)(a->nla_len - NLA_HDRLEN) >= sizeof(d);
			in->linkid = d.linkid;
			in->peer_gid = d.peer_gid;
			in->my_gid = d.my_gid;
			in->token = d.token;
			in->peer_token = d.peer_token;
			in->peer_gid_ext = d.peer_gid_ext;
			in->my_gid_ext = d.my_gid_ext;
			break;
		}
		default:
			break;
		}
		p += NLA_ALIGN(a->nla_len);
	}
}

int smcdiag_query(uint64_t inode, struct smc_info *info, char *err, size_t errlen)
{
	/* LGRINFO answers for SMC-R connections only; DMBINFO for SMC-D only. */
	return smcdiag_query_ext(inode,
				 (1 << (SMCT_DIAG_CONNINFO - 1)) | (1 << (SMCT_DIAG_LGRINFO - 1)) |
					 (1 << (SMCT_DIAG_DMBINFO - 1)),
				 info, err, errlen);
}

int smcdiag_query_ext(uint64_t inode, unsigned int ext, struct smc_info *info, char *err, size_t errlen)
{
	struct smct_diag_req req;
	struct smc_ctx ctx = { inode, info, 0 };

	memset(info, 0, sizeof(*info));
	memset(&req, 0, sizeof(req));
	req.diag_family = AF_SMC;
	req.diag_ext = (uint8_t)ext;
	if (diag_dump(&req, sizeof(req), "AF_SMC sock_diag", smc_cb, &ctx, err, errlen))
		return -1;
	if (!info->found)
		snprintf(err, errlen, "socket inode %llu not in the AF_SMC sock_diag dump (%d sockets listed)",
			 (unsigned long long)inode, ctx.count);
	return 0;
}

/* ---- TCP (test aid) ---------------------------------------------------- */

struct tcp_ctx {
	uint64_t inode;
	int found, state;
};

static void tcp_cb(const struct nlmsghdr *h, void *vctx)
{
	struct tcp_ctx *ctx = vctx;
	const struct inet_diag_msg *m = NLMSG_DATA(h);

	if (h->nlmsg_len < NLMSG_LENGTH(sizeof(*m)))
		return;
	if (m->idiag_inode == ctx->inode) {
		ctx->found = 1;
		ctx->state = m->idiag_state;
	}
}

int tcpdiag_query(uint64_t inode, int *found, int *state, char *err, size_t errlen)
{
	struct inet_diag_req_v2 req;
	struct tcp_ctx ctx = { inode, 0, 0 };

	/* Both families: the socket's is not known here. */
	for (int i = 0; i < 2 && !ctx.found; i++) {
		memset(&req, 0, sizeof(req));
		req.sdiag_family = i ? AF_INET6 : AF_INET;
		req.sdiag_protocol = IPPROTO_TCP;
		req.idiag_states = ~0u;
		if (diag_dump(&req, sizeof(req), "inet sock_diag", tcp_cb, &ctx, err, errlen))
			return -1;
	}
	*found = ctx.found;
	*state = ctx.state;
	return 0;
}

/* ---- names ------------------------------------------------------------- */

const char *smc_mode_name(int mode)
{
	switch (mode) {
	case SMC_DIAG_MODE_SMCR_: return "SMCR";
	case SMC_DIAG_MODE_FALLBACK_TCP_: return "FALLBACK";
	case SMC_DIAG_MODE_SMCD_: return "SMCD";
	default: return "UNKNOWN";
	}
}

/* enum smc_state, net/smc/smc.h */
const char *smc_state_name(int state)
{
	switch (state) {
	case 1: return "ACTIVE";
	case 2: return "INIT";
	case 7: return "CLOSED";
	case 10: return "LISTEN";
	case 20: return "PEERCLOSEWAIT1";
	case 21: return "PEERCLOSEWAIT2";
	case 22: return "APPCLOSEWAIT1";
	case 23: return "APPCLOSEWAIT2";
	case 24: return "APPFINCLOSEWAIT";
	case 25: return "PEERFINCLOSEWAIT";
	case 26: return "PEERABORTWAIT";
	case 27: return "PROCESSABORT";
	default: return "UNKNOWN";
	}
}

/* SMC_CLC_DECL_* from net/smc/smc_clc.h (6.12 .. 7.x, plus older codes) */
static const struct {
	uint32_t code;
	const char *name;
	const char *text;
} reasons[] = {
	{ 0x00000000, "NONE", "no fallback reason recorded" },
	{ 0x01010000, "SMC_CLC_DECL_MEM", "insufficient memory resources (e.g. DMB registration failed)" },
	{ 0x02000000, "SMC_CLC_DECL_TIMEOUT", "timeout (older kernels)" },
	{ 0x02010000, "SMC_CLC_DECL_TIMEOUT_CL", "timeout waiting for QP confirm link" },
	{ 0x02020000, "SMC_CLC_DECL_TIMEOUT_AL", "timeout waiting for QP add link" },
	{ 0x02040000, "SMC_CLC_DECL_TCL", "timeout waiting for QP confirm (older kernels)" },
	{ 0x03000000, "SMC_CLC_DECL_CNFERR", "configuration error" },
	{ 0x03010000, "SMC_CLC_DECL_PEERNOSMC", "peer did not indicate SMC (peer socket is not AF_SMC?)" },
	{ 0x03020000, "SMC_CLC_DECL_IPSEC", "IPsec usage" },
	{ 0x03030000, "SMC_CLC_DECL_NOSMCDEV", "no SMC device found (R or D)" },
	{ 0x03030001, "SMC_CLC_DECL_NOSMCDDEV", "no SMC-D device found" },
	{ 0x03030002, "SMC_CLC_DECL_NOSMCRDEV", "no SMC-R device found" },
	{ 0x03030003, "SMC_CLC_DECL_NOISM2SUPP", "hardware has no ISMv2 support" },
	{ 0x03030004, "SMC_CLC_DECL_NOV2EXT", "peer sent no CLC v2 extension" },
	{ 0x03030005, "SMC_CLC_DECL_NOV2DEXT", "peer sent no CLC SMC-Dv2 extension" },
	{ 0x03030006, "SMC_CLC_DECL_NOSEID", "peer sent no SEID" },
	{ 0x03030007, "SMC_CLC_DECL_NOSMCD2DEV", "no SMC-Dv2 device found" },
	{ 0x03030008, "SMC_CLC_DECL_NOUEID", "peer sent no UEID" },
	{ 0x03030009, "SMC_CLC_DECL_RELEASEERR", "release version negotiation failed" },
	{ 0x0303000a, "SMC_CLC_DECL_MAXCONNERR", "max connections negotiation failed" },
	{ 0x0303000b, "SMC_CLC_DECL_MAXLINKERR", "max links negotiation failed" },
	{ 0x03040000, "SMC_CLC_DECL_MODEUNSUPP", "SMC modes do not match (R or D)" },
	{ 0x03050000, "SMC_CLC_DECL_RMBE_EC", "peer has eyecatcher in RMBE" },
	{ 0x03060000, "SMC_CLC_DECL_OPTUNSUPP", "socket option not supported (e.g. TCP fastopen)" },
	{ 0x03070000, "SMC_CLC_DECL_DIFFPREFIX", "IP prefix / subnet mismatch" },
	{ 0x03080000, "SMC_CLC_DECL_GETVLANERR", "error getting VLAN id of IP device" },
	{ 0x03090000, "SMC_CLC_DECL_ISMVLANERR", "error registering VLAN id on ISM device" },
	{ 0x030a0000, "SMC_CLC_DECL_NOACTLINK", "no active SMC-R link in link group" },
	{ 0x030b0000, "SMC_CLC_DECL_NOSRVLINK", "SMC-R link from server not found" },
	{ 0x030c0000, "SMC_CLC_DECL_VERSMISMAT", "SMC version mismatch" },
	{ 0x030d0000, "SMC_CLC_DECL_MAX_DMB", "SMC-D DMB limit exceeded" },
	{ 0x030e0000, "SMC_CLC_DECL_NOROUTE", "SMC-Rv2 connection: no route to peer" },
	{ 0x030f0000, "SMC_CLC_DECL_NOINDIRECT", "SMC-Rv2 connection: indirect mismatch" },
	{ 0x04000000, "SMC_CLC_DECL_SYNCERR", "synchronization error" },
	{ 0x05000000, "SMC_CLC_DECL_PEERDECL", "peer declined during handshake (see peer_diag)" },
	{ 0x06000000, "SMC_CLC_DECL_REPLY", "reply to a received decline (older kernels)" },
	{ 0x07000000, "SMC_CLC_DECL_SEND", "sending problem (older kernels)" },
	{ 0x09990000, "SMC_CLC_DECL_INTERR", "internal error" },
	{ 0x09990001, "SMC_CLC_DECL_ERR_RTOK", "rtoken handling failed" },
	{ 0x09990002, "SMC_CLC_DECL_ERR_RDYLNK", "IB ready link failed" },
	{ 0x09990003, "SMC_CLC_DECL_ERR_REGBUF", "registering RDMA buffers failed" },
	{ 0x99990000, "SMC_CLC_DECL_INTERR_OLD", "internal error (older kernels)" },
};

static int reason_index(uint32_t code)
{
	for (size_t i = 0; i < sizeof(reasons) / sizeof(reasons[0]); i++)
		if (reasons[i].code == code)
			return (int)i;
	return -1;
}

const char *smc_reason_name(uint32_t code)
{
	int i = reason_index(code);

	return i >= 0 ? reasons[i].name : "UNKNOWN";
}

const char *smc_reason_text(uint32_t code)
{
	int i = reason_index(code);

	if (i >= 0)
		return reasons[i].text;
	switch (code >> 24) {
	case 0x01: return "unknown code, class: out of resources";
	case 0x02: return "unknown code, class: timeout";
	case 0x03: return "unknown code, class: configuration error";
	case 0x04: return "unknown code, class: synchronization error";
	case 0x05: return "unknown code, class: peer declined";
	case 0x09: return "unknown code, class: internal error";
	default: return "unknown code";
	}
}
