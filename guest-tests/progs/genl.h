/* genl.h - a small generic netlink client for the guest programs
 *
 * The guests have no libnl, and net/smc is configured and inspected through its
 * generic netlink families (SMC_GEN_NETLINK, SMC_PNETID), so smcapi and smcconf
 * share this: a socket, a family id by name, requests with attributes, and the
 * replies handed to a callback as attribute lists. Layouts follow
 * include/uapi/linux/{netlink,genetlink}.h.
 */
#ifndef SMCT_GENL_H
#define SMCT_GENL_H

#include <stddef.h>
#include <stdint.h>

struct genl {
	int fd;                 /* -1 when closed */
	int hdrlen;             /* the family header before the attributes (genlmsghdr: 4) */
	uint32_t seq;           /* of the last request: older replies are dropped */
	unsigned char *rx;
};

/* Room for any attribute net/smc accepts with a wide margin, so a request
 * that does not fit is a caller's mistake (it fails with EMSGSIZE). */
#define GENL_REQ_MAX 8192

/* A request being built: the netlink and generic netlink headers, then attributes. */
struct genl_req {
	unsigned char buf[GENL_REQ_MAX];
	size_t len;
	int overflow;           /* an attribute did not fit: the request is not sent */
};

/* One attribute's payload (data NULL: the message did not carry it). */
struct genl_attr {
	const unsigned char *data;
	int len;
};

/* Called for each data message of a reply with its attribute area. */
typedef void (*genl_cb)(const unsigned char *attrs, int len, void *ctx);

/* A bound NETLINK_GENERIC socket. Returns 0, or a negative errno with nothing left
 * open (nl->fd -1). */
int genl_open(struct genl *nl);
/* Also safe after a failed open, or none if fd is -1 and rx NULL (cleanup paths). */
void genl_close(struct genl *nl);

/* The same transport for another netlink protocol whose messages carry attributes
 * right after the netlink header (NETLINK_RDMA), hdrlen 0. */
int genl_open_proto(struct genl *nl, int protocol, int hdrlen);
/* A request of that protocol: the netlink header only, then attributes. */
void genl_req_raw(struct genl_req *r, uint16_t type);
void genl_req_init(struct genl_req *r, uint16_t family, uint8_t cmd);
int genl_put(struct genl_req *r, uint16_t type, const void *data, size_t len);
/* A string attribute with its NUL, as net/smc's NLA_NUL_STRING policies want. */
int genl_put_str(struct genl_req *r, uint16_t type, const char *s);

/* Sends r with NLM_F_ACK (a command) or NLM_F_DUMP (a dump) and reads until the
 * kernel's ack or the dump's end, calling cb (if any) for each data message.
 * Returns 0, the kernel's negative errno, or a negative errno of the transport
 * (-EPROTO for a malformed reply). r can be sent again. */
int genl_request(struct genl *nl, struct genl_req *r, uint16_t flags, genl_cb cb, void *ctx);

/* The id of a generic netlink family (CTRL_CMD_GETFAMILY), or a negative errno:
 * -ENOENT when the family is not registered (net/smc's register as the module loads). */
int genl_family(struct genl *nl, const char *name);

/* The attributes in [p, p + len) by type into tb[0..max-1]; types >= max are ignored. */
void genl_parse(const unsigned char *p, int len, struct genl_attr *tb, int max);
/* An unsigned attribute of 1, 2, 4 or 8 bytes in host order; 0 if absent or another size. */
uint64_t genl_uint(const struct genl_attr *a);

#endif
