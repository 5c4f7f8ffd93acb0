/* genl.c - a small generic netlink client for the guest programs (see genl.h) */
#define _GNU_SOURCE
#include "genl.h"

#include <errno.h>
#include <linux/genetlink.h>
#include <linux/netlink.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A datagram longer than the receive buffer is cut; the kernel sizes a dump's
 * datagrams after the reader's buffer but at most 32 KiB (netlink_recvmsg). */
#define RX_LEN 65536

void genl_close(struct genl *nl)
{
	if (nl->fd >= 0)
		close(nl->fd);
	nl->fd = -1;
	free(nl->rx);
	nl->rx = NULL;
}

int genl_open(struct genl *nl)
{
	return genl_open_proto(nl, NETLINK_GENERIC, GENL_HDRLEN);
}

int genl_open_proto(struct genl *nl, int protocol, int hdrlen)
{
	struct sockaddr_nl me = { .nl_family = AF_NETLINK };
	int err;

	nl->seq = 0;
	nl->hdrlen = hdrlen;
	nl->rx = malloc(RX_LEN);
	nl->fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, protocol);
	if (nl->rx && nl->fd >= 0 && bind(nl->fd, (struct sockaddr *)&me, sizeof(me)) == 0)
		return 0;
	err = nl->rx ? -errno : -ENOMEM;
	genl_close(nl);
	return err;
}

void genl_req_raw(struct genl_req *r, uint16_t type)
{
	struct nlmsghdr *nh = (struct nlmsghdr *)r->buf;

	memset(r->buf, 0, NLMSG_HDRLEN);
	nh->nlmsg_type = type;
	r->len = NLMSG_HDRLEN;
	r->overflow = 0;
}

void genl_req_init(struct genl_req *r, uint16_t family, uint8_t cmd)
{
	struct nlmsghdr *nh = (struct nlmsghdr *)r->buf;
	struct genlmsghdr *gh = NLMSG_DATA(nh);

	memset(r->buf, 0, NLMSG_LENGTH(GENL_HDRLEN));
	nh->nlmsg_type = family;
	gh->cmd = cmd;
	gh->version = 1;
	r->len = NLMSG_LENGTH(GENL_HDRLEN);
	r->overflow = 0;
}

int genl_put(struct genl_req *r, uint16_t type, const void *data, size_t len)
{
	struct nlattr a = { .nla_len = (uint16_t)(NLA_HDRLEN + len), .nla_type = type };

	if (len > sizeof(r->buf) || r->len + NLA_HDRLEN + NLA_ALIGN(len) > sizeof(r->buf)) {
		r->overflow = 1;
		return -EMSGSIZE;
	}
	memcpy(r->buf + r->len, &a, sizeof(a));
	memcpy(r->buf + r->len + NLA_HDRLEN, data, len);
	/* the padding goes out with the request: zeros, not stale stack bytes */
	memset(r->buf + r->len + NLA_HDRLEN + len, 0, NLA_ALIGN(len) - len);
	r->len += NLA_HDRLEN + NLA_ALIGN(len);
	return 0;
}

int genl_put_str(struct genl_req *r, uint16_t type, const char *s)
{
	return genl_put(r, type, s, strlen(s) + 1);
}

int genl_request(struct genl *nl, struct genl_req *r, uint16_t flags, genl_cb cb, void *ctx)
{
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	struct nlmsghdr *nh = (struct nlmsghdr *)r->buf;
	uint32_t seq = ++nl->seq;
	ssize_t sent;

	if (r->overflow)
		return -EMSGSIZE;
	nh->nlmsg_len = (uint32_t)r->len;
	nh->nlmsg_flags = NLM_F_REQUEST | flags;
	nh->nlmsg_seq = seq;
	sent = sendto(nl->fd, r->buf, r->len, 0, (struct sockaddr *)&kernel, sizeof(kernel));
	if (sent < 0)
		return -errno;
	if ((size_t)sent != r->len)
		return -EIO;
	for (;;) {
		ssize_t n = recv(nl->fd, nl->rx, RX_LEN, 0);
		size_t off = 0;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		while (off + NLMSG_HDRLEN <= (size_t)n) {
			const struct nlmsghdr *m = (const struct nlmsghdr *)(nl->rx + off);
			const unsigned char *data = nl->rx + off + NLMSG_HDRLEN;

			if (m->nlmsg_len < NLMSG_HDRLEN || off + m->nlmsg_len > (size_t)n)
				return -EPROTO;
			off += NLMSG_ALIGN(m->nlmsg_len);
			/* an answer to an earlier request that gave up (a timeout) */
			if (m->nlmsg_seq != seq)
				continue;
			if (m->nlmsg_type == NLMSG_ERROR) {
				struct nlmsgerr e;

				if (m->nlmsg_len < NLMSG_LENGTH(sizeof(e)))
					return -EPROTO;
				memcpy(&e, data, sizeof(e));
				return e.error;
			}
			if (m->nlmsg_type == NLMSG_DONE) {
				/* a dump's own error travels in its end message */
				int e = 0;

				if (m->nlmsg_len >= NLMSG_LENGTH(sizeof(e)))
					memcpy(&e, data, sizeof(e));
				return e;
			}
			if (cb && m->nlmsg_len >= NLMSG_LENGTH((size_t)nl->hdrlen))
				cb(data + nl->hdrlen, (int)(m->nlmsg_len - NLMSG_LENGTH(nl->hdrlen)), ctx);
		}
	}
}

static void family_cb(const unsigned char *attrs, int len, void *ctx)
{
	struct genl_attr tb[CTRL_ATTR_FAMILY_ID + 1];

	genl_parse(attrs, len, tb, CTRL_ATTR_FAMILY_ID + 1);
	if (tb[CTRL_ATTR_FAMILY_ID].len == 2)
		*(uint16_t *)ctx = (uint16_t)genl_uint(&tb[CTRL_ATTR_FAMILY_ID]);
}

int genl_family(struct genl *nl, const char *name)
{
	struct genl_req r;
	uint16_t id = 0;
	int rc;

	genl_req_init(&r, GENL_ID_CTRL, CTRL_CMD_GETFAMILY);
	genl_put_str(&r, CTRL_ATTR_FAMILY_NAME, name);
	rc = genl_request(nl, &r, NLM_F_ACK, family_cb, &id);
	if (rc < 0)
		return rc;
	return id ? id : -ENOENT;
}

void genl_parse(const unsigned char *p, int len, struct genl_attr *tb, int max)
{
	memset(tb, 0, sizeof(*tb) * (size_t)max);
	while (len >= NLA_HDRLEN) {
		struct nlattr a;
		int type;

		memcpy(&a, p, sizeof(a));
		type = a.nla_type & NLA_TYPE_MASK;
		if (a.nla_len < NLA_HDRLEN || a.nla_len > len)
			break;
		if (type < max) {
			tb[type].data = p + NLA_HDRLEN;
			tb[type].len = a.nla_len - NLA_HDRLEN;
		}
		/* the last attribute's padding may be missing */
		if (NLA_ALIGN(a.nla_len) >= len)
			break;
		p += NLA_ALIGN(a.nla_len);
		len -= NLA_ALIGN(a.nla_len);
	}
}

uint64_t genl_uint(const struct genl_attr *a)
{
	/* host order: the value sits at the union's start whatever its size */
	union {
		uint8_t u8;
		uint16_t u16;
		uint32_t u32;
		uint64_t u64;
	} v = { .u64 = 0 };

	if (!a->data || (a->len != 1 && a->len != 2 && a->len != 4 && a->len != 8))
		return 0;
	memcpy(&v, a->data, (size_t)a->len);
	return a->len == 1 ? v.u8 : a->len == 2 ? v.u16 : a->len == 4 ? v.u32 : v.u64;
}
