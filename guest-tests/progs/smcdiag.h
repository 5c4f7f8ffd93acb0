/* smcdiag.h - ask the kernel how an AF_SMC socket runs (AF_SMC sock_diag)
 *
 * Layouts follow include/uapi/linux/smc_diag.h (Linux 6.12 / 7.x); they are
 * defined here so the program does not depend on the libc's kernel headers.
 */
#ifndef SMCT_SMCDIAG_H
#define SMCT_SMCDIAG_H

#include <stddef.h>
#include <stdint.h>

/* smc_diag_msg.diag_mode */
#define SMC_DIAG_MODE_SMCR_ 0
#define SMC_DIAG_MODE_FALLBACK_TCP_ 1
#define SMC_DIAG_MODE_SMCD_ 2

struct smc_info {
	int found;
	uint8_t family, state, mode, shutdown;
	uint16_t sport, dport;          /* host order, of the internal TCP (clc) socket */
	uint32_t src, dst;              /* network order (IPv4) */
	uint32_t src6[4], dst6[4];      /* the same words, as IPv6 addresses */
	uint64_t inode;
	int have_fallback;
	uint32_t fb_reason, fb_peer_diag;
	int have_conn;
	uint32_t conn_token, sndbuf_size, rmbe_size, peer_rmbe_size;
	uint32_t rx_prod, rx_cons, tx_prod, tx_cons; /* cursor counts */
	int have_dmb, have_gid_ext;
	uint32_t linkid;
	uint64_t peer_gid, my_gid, token, peer_token, peer_gid_ext, my_gid_ext;
	/* SMC_DIAG_LGRINFO (SMC-R only): the link's RDMA device, port and GIDs, the role */
	int have_lgr;
	uint8_t link_id, ibport, lgr_role;
	char ibname[65];
	char lnk_gid[41], lnk_peer_gid[41];   /* as the kernel prints them: text */
	unsigned int attrs;             /* bit 1 << SMC_DIAG_x for each attribute the kernel sent */
	int shutdown_attr;              /* SMC_DIAG_SHUTDOWN's u8 (sk_shutdown), -1 if absent */
};

/* Dump all AF_SMC sockets and find the one with this inode.
 * Returns 0 (info->found tells whether it was in the dump) or -1 with err. */
int smcdiag_query(uint64_t inode, struct smc_info *info, char *err, size_t errlen);
/* The same with the request's extension bits (1 << (SMC_DIAG_x - 1)) of the caller's. */
int smcdiag_query_ext(uint64_t inode, unsigned int ext, struct smc_info *info, char *err, size_t errlen);

/* Test aid for --tcp: find a TCP socket by inode through inet_diag (same
 * netlink code path).  Returns 0 and *state (TCP state), or -1. */
int tcpdiag_query(uint64_t inode, int *found, int *state, char *err, size_t errlen);

const char *smc_mode_name(int mode);
const char *smc_state_name(int state);
/* SMC_CLC_DECL_* name and description; never NULL */
const char *smc_reason_name(uint32_t code);
const char *smc_reason_text(uint32_t code);

#endif
