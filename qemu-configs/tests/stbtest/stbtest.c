// SPDX-License-Identifier: GPL-2.0
/*
 * PCISTB shapes against every IBM PCI function, for qemu-configs/tests/pcistb-smoke.sh:
 * prints "STBT: <function> <case> rc=<__zpci_store_block()>".
 * Loads, runs once and stays loaded (a failing init would make insmod retry).
 */
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/gfp.h>
#include <linux/ktime.h>
#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <asm/pci.h>
#include <asm/pci_io.h>
#include <asm/pci_insn.h>

/* The signal flag of an ISM data move (bit 23 of the BAR 0 offset): QEMU always waits for
 * such a store; with x-ism-post=on it posts the others. */
#define SF 0x800000ULL

static int stb(struct zpci_dev *zdev, int bar, u64 off, void *src, int len)
{
	return __zpci_store_block(src, ZPCI_CREATE_REQ(zdev->fh, bar, len), off);
}

static void stbtest_one(struct pci_dev *pdev)
{
	struct zpci_dev *zdev = to_zpci(pdev);
	const char *n = pci_name(pdev);
	u8 *buf;
	int i;

	buf = (u8 *)__get_free_pages(GFP_KERNEL, 1);
	if (!buf)
		return;
	for (i = 0; i < 2 * PAGE_SIZE; i++)
		buf[i] = i & 0xff;
	pr_info("STBT: %s fh=0x%x\n", n, zdev->fh);
	pr_info("STBT: %s pfgid=0x%x maxstbl=%u\n", n, zdev->pfgid, zdev->maxstbl);
	pr_info("STBT: %s A len5 off37 src+4093 (crosses page) rc=%d\n", n, stb(zdev, 0, 37, buf + 4093, 5));
	pr_info("STBT: %s B len4096 off0x1000 src+3 rc=%d\n", n, stb(zdev, 0, 0x1000, buf + 3, 4096));
	pr_info("STBT: %s C len1 off0x2fff src+1 rc=%d\n", n, stb(zdev, 0, 0x2fff, buf + 1, 1));
	pr_info("STBT: %s D len8 off0x3ffc (crosses 4K of PCI offset) rc=%d\n", n, stb(zdev, 0, 0x3ffc, buf, 8));
	pr_info("STBT: %s E len4097 off0x5000 rc=%d\n", n, stb(zdev, 0, 0x5000, buf, 4097));
	pr_info("STBT: %s F len16 offSF+0x800 (device rejects) rc=%d\n", n, stb(zdev, 0, SF | 0x800, buf + 8, 16));
	pr_info("STBT: %s F2 len16 offSF+0x880 (device: ENOENT) rc=%d\n", n, stb(zdev, 0, SF | 0x880, buf + 8, 16));
	pr_info("STBT: %s F3 len16 offSF+0x900 (device: ERANGE) rc=%d\n", n, stb(zdev, 0, SF | 0x900, buf + 8, 16));
	pr_info("STBT: %s F4 len16 offSF+0x980 (device: ENOTSUP) rc=%d\n", n, stb(zdev, 0, SF | 0x980, buf + 8, 16));
	pr_info("STBT: %s F5 len16 offSF+0xa00 (device: EIO) rc=%d\n", n, stb(zdev, 0, SF | 0xa00, buf + 8, 16));
	pr_info("STBT: %s F6 len16 offSF+0xa80 (device: short write) rc=%d\n", n, stb(zdev, 0, SF | 0xa80, buf + 8, 16));
	pr_info("STBT: %s G len8 off0x1200000 (beyond 16M BAR) rc=%d\n", n, stb(zdev, 0, 0x1200000, buf, 8));
	/*
	 * A store without the signal that the device rejects, then two with the signal into
	 * the same DMB: waited, the first fails at once and the next ones land; posted
	 * (x-ism-post=on), the failure is held and fails both signalling stores.
	 */
	pr_info("STBT: %s H len16 off0xb00 (device rejects, no signal) rc=%d\n", n, stb(zdev, 0, 0xb00, buf + 8, 16));
	pr_info("STBT: %s H2 len16 offSF+0xb80 (next signal) rc=%d\n", n, stb(zdev, 0, SF | 0xb80, buf + 8, 16));
	pr_info("STBT: %s H3 len16 offSF+0xb80 (the signal after) rc=%d\n", n, stb(zdev, 0, SF | 0xb80, buf + 8, 16));
	free_pages((unsigned long)buf, 1);
}

/*
 * dead=1: the first store makes the stub exit (its server is gone) while QEMU waits
 * for its reply, then stores that each must fail, half of them with the signal (always
 * waited for), half without it (posted with x-ism-post=on). The first prints the
 * milliseconds it took: it must fail when the connection ends, not at QEMU's timeout.
 */
static bool dead;
module_param(dead, bool, 0444);

static void stbtest_dead(struct pci_dev *pdev)
{
	struct zpci_dev *zdev = to_zpci(pdev);
	u8 buf[16] = { 0 };
	int i, rc, failed = 0;
	ktime_t t0 = ktime_get();

	/* waited for (signal): the server exits on it, with the store in flight */
	rc = stb(zdev, 0, SF | 0xc00, buf, 16);
	pr_info("STBT: %s DEAD first rc=%d ms=%lld\n", pci_name(pdev), rc,
		ktime_ms_delta(ktime_get(), t0));
	/*
	 * The store above fails as soon as the waited channel ends, on this vCPU's
	 * thread; QEMU's main loop reads the end of the main connection on its own
	 * time. A posted store taken before that is queued as accepted (cc 0), as a
	 * posted write to a function that has just died would be: 2 of 9 runs saw
	 * one. The stores below are about the time after QEMU knows.
	 */
	msleep(200);
	for (i = 0; i < 20; i++)
		failed += stb(zdev, 0, (i & 1 ? SF : 0) | 0xc80, buf, 16) != 0;
	pr_info("STBT: %s DEAD after=20 failed=%d\n", pci_name(pdev), failed);
}

/*
 * queue=1: for QEMU's vfio-user queue (x-ism-post=on, a stub that stalls on the first
 * store and answers SF+0xd00 late): a flood of posted 4 KiB data moves, a waited store
 * answered after QEMU's timeout, the store after it, then 20 more, half posted; each
 * with its failures and the milliseconds it took. A function of the default group
 * (maxstbl 128, no ism=on) gets its flood as 128-byte stores: 16 posted doubleword
 * writes each.
 */
static bool queue;
module_param(queue, bool, 0444);
#define FLOOD 1500

static void stbtest_queue(struct pci_dev *pdev)
{
	struct zpci_dev *zdev = to_zpci(pdev);
	const char *n = pci_name(pdev);
	int i, rc, len, failed = 0;
	ktime_t t0;
	u8 *buf;

	buf = (u8 *)__get_free_pages(GFP_KERNEL, 0);
	if (!buf)
		return;
	memset(buf, 0x5a, PAGE_SIZE);
	len = zdev->maxstbl >= 4096 ? 4096 : 128;
	t0 = ktime_get();
	for (i = 0; i < FLOOD; i++)
		failed += stb(zdev, 0, (u64)(i % 2048) << 12, buf, len) != 0;
	pr_info("STBT: %s QUEUE flood n=%d len=%d failed=%d ms=%lld\n", n, FLOOD, len, failed,
		ktime_ms_delta(ktime_get(), t0));
	t0 = ktime_get();
	rc = stb(zdev, 0, SF | 0xd00, buf, 16);
	pr_info("STBT: %s QUEUE slow rc=%d ms=%lld\n", n, rc, ktime_ms_delta(ktime_get(), t0));
	pr_info("STBT: %s QUEUE after-slow rc=%d\n", n, stb(zdev, 0, SF | 0xd80, buf, 16));
	failed = 0;
	t0 = ktime_get();
	for (i = 0; i < 20; i++)
		failed += stb(zdev, 0, (i & 1 ? SF : 0) | 0xe00, buf, 16) != 0;
	pr_info("STBT: %s QUEUE last20 failed=%d ms=%lld\n", n, failed,
		ktime_ms_delta(ktime_get(), t0));
	free_pages((unsigned long)buf, 0);
}

/*
 * sweep=1: PCISTB of every shape against every address space of the function:
 * pcias 0-5 (the BARs; the stub implements 0, 2 and 4, with the MSI-X table at BAR 4
 * offset 0 and the PBA at 0x800, or with --msix-split at BAR 2 offset 0), 6, 7 and 15
 * (no BAR); lengths around the default group's 128-byte buffer and ISM's 4096; offsets
 * aligned and not, onto and across the MSI-X table and the PBA, at and beyond a BAR's
 * end, and just below 2^64, where offset + length wraps (QEMU compared that 64-bit sum
 * with a subregion's end and dispatched such an access to the MSI-X table). Prints one
 * line per address space and offset with the rc of each length, in the order of
 * lens[]; pcistb-smoke.sh compares each rc with the architecture's rule
 * (stb-sweep-rule.py). From a buffer aligned to 8 bytes, as the generic path demands.
 * Then the same for PCI LOAD and PCI STORE (stbtest_lgsg()).
 */
static bool sweep;
module_param(sweep, bool, 0444);

/*
 * Offsets just below 2^64: 2^64 - 4, - 8, - 16 (also 2^64 minus the stub's MSI-X table
 * size, 16 bytes), - 128, and 2^64 - 0x800 (minus the PBA's offset in BAR 4).
 */
#define NEAR_2_64 0xfffffffffffffffcULL, 0xfffffffffffffff8ULL, 0xfffffffffffffff0ULL, \
		  0xffffffffffffff80ULL, 0xfffffffffffff800ULL
static const int sweep_spaces[] = { 0, 1, 2, 3, 4, 5, 6, 7, 15 };

static void stbtest_sweep(struct pci_dev *pdev)
{
	static const int lens[] = { 1, 8, 16, 128, 129, 136, 1024, 4095, 4096, 4097, 8191 };
	static const u64 offs[] = { 0x0, 0x3, 0x8, 0x7f8, 0x800, 0x804, 0xff8, 0x1000,
				    0xfff000, 0x1000000, NEAR_2_64 };
	struct zpci_dev *zdev = to_zpci(pdev);
	const char *n = pci_name(pdev);
	int a, o, l, rc, stores = 0;
	u8 *buf;

	buf = (u8 *)__get_free_pages(GFP_KERNEL, 2);
	if (!buf)
		return;
	for (l = 0; l < 4 * PAGE_SIZE; l++)
		buf[l] = l & 0xff;
	/* one line per address space and offset, the rcs in the order of lens[] */
	for (a = 0; a < ARRAY_SIZE(sweep_spaces); a++)
		for (o = 0; o < ARRAY_SIZE(offs); o++) {
			char line[128];
			int pos = 0;

			for (l = 0; l < ARRAY_SIZE(lens); l++) {
				rc = stb(zdev, sweep_spaces[a], offs[o], buf, lens[l]);
				pos += scnprintf(line + pos, sizeof(line) - pos, "%s%d",
						 l ? "," : "", rc);
				stores++;
			}
			pr_info("STBT: %s SW as=%d off=0x%llx rc=%s\n", n, sweep_spaces[a],
				offs[o], line);
		}
	pr_info("STBT: %s SWEEP done stores=%d\n", n, stores);
	free_pages((unsigned long)buf, 2);
}

/*
 * The sweep of PCI LOAD (__zpci_load()) and PCI STORE (__zpci_store()): lengths 1, 2,
 * 4 and 8 at a few offsets in and beyond the BARs, onto the MSI-X table and the PBA,
 * and at the offsets just below 2^64, against every address space of sweep_spaces[].
 * Prints, per address space and offset, a line of the loads' rcs and one of the
 * stores', each in the order of lens[]:
 *   STBT: <function> LG as=<pcias> off=0x<offset> rc=<len 1>,<2>,<4>,<8>
 *   STBT: <function> SG as=<pcias> off=0x<offset> rc=<len 1>,<2>,<4>,<8>
 * and at the end "STBT: <function> LGSG done loads=<n> stores=<n>". Each store writes
 * back what the load of the same length there read (0 where the load failed), so that
 * the stores change neither the configuration space nor the MSI-X table.
 */
static void stbtest_lgsg(struct pci_dev *pdev)
{
	static const int lens[] = { 1, 2, 4, 8 };
	static const u64 offs[] = { 0x0, 0x8, 0x800, 0xff8, 0x1000, NEAR_2_64 };
	struct zpci_dev *zdev = to_zpci(pdev);
	const char *n = pci_name(pdev);
	int a, o, l, loads = 0, stores = 0;

	for (a = 0; a < ARRAY_SIZE(sweep_spaces); a++)
		for (o = 0; o < ARRAY_SIZE(offs); o++) {
			u64 data[ARRAY_SIZE(lens)];
			int rc[ARRAY_SIZE(lens)];

			for (l = 0; l < ARRAY_SIZE(lens); l++) {
				data[l] = 0;
				rc[l] = __zpci_load(&data[l], ZPCI_CREATE_REQ(zdev->fh,
						    sweep_spaces[a], lens[l]), offs[o]);
				if (rc[l])
					data[l] = 0;
				loads++;
			}
			pr_info("STBT: %s LG as=%d off=0x%llx rc=%d,%d,%d,%d\n", n,
				sweep_spaces[a], offs[o], rc[0], rc[1], rc[2], rc[3]);
			for (l = 0; l < ARRAY_SIZE(lens); l++) {
				rc[l] = __zpci_store(data[l], ZPCI_CREATE_REQ(zdev->fh,
						     sweep_spaces[a], lens[l]), offs[o]);
				stores++;
			}
			pr_info("STBT: %s SG as=%d off=0x%llx rc=%d,%d,%d,%d\n", n,
				sweep_spaces[a], offs[o], rc[0], rc[1], rc[2], rc[3]);
		}
	pr_info("STBT: %s LGSG done loads=%d stores=%d\n", n, loads, stores);
}

/*
 * mis=1: against a stub that misbehaves (pcistb-stub.py --misbehave) in its reply to a
 * waited store at SF+0xf00: that store, then one at SF+0xf80; each with its rc and the
 * milliseconds the vCPU waited.
 */
static bool mis;
module_param(mis, bool, 0444);

/*
 * alias_uid=N: for the function with that uid (x-ism-post=on, a stub with
 * --misbehave late-error), after the misbehaving store: 63000 posted data moves, then
 * 5000 waited stores, so that QEMU's 16-bit message IDs wrap once around the ID of the
 * store whose reply the stub withholds; every store after it must succeed.
 */
static int alias_uid = -1;
module_param(alias_uid, int, 0444);

/*
 * alias_wc_uid=N: the same for a function whose stub also takes x_waited_channel and
 * stalls on a posted store at offset 0 (--stall-on 0): before the misbehaving store,
 * that store and BACKLOG posted 4 KiB moves, which the stalled stub leaves queued in
 * QEMU, so that the misbehaving store leaves on the main connection (the waited
 * channel takes a request only with nothing queued) while the channel stays open. The
 * 5000 waited stores of the wrap then take the waited channel: their IDs must keep
 * clear of the late reply's too.
 */
static int alias_wc_uid = -1;
module_param(alias_wc_uid, int, 0444);
#define BACKLOG 200

static void stbtest_alias(struct pci_dev *pdev)
{
	struct zpci_dev *zdev = to_zpci(pdev);
	const char *n = pci_name(pdev);
	int i, failed = 0, wfailed = 0;
	u8 buf[16] = { 0 };
	ktime_t t0 = ktime_get();

	for (i = 0; i < 63000; i++)
		failed += stb(zdev, 0, 0x100, buf, 8) != 0;
	for (i = 0; i < 5000; i++)
		wfailed += stb(zdev, 0, SF | 0x180, buf, 8) != 0;
	pr_info("STBT: %s ALIAS posted=63000 failed=%d waited=5000 failed=%d ms=%lld\n", n,
		failed, wfailed, ktime_ms_delta(ktime_get(), t0));
}

/*
 * unanswered_uid=N: for the function with that uid (a stub with --never-answer
 * SF+0x1d00 and a short x-msg-timeout), after the misbehaving store: UNANSWERED stores
 * that the stub never answers, each followed by one it answers. A server that still
 * answers is not gone, however many of its requests timed out over the device's life.
 */
static int unanswered_uid = -1;
module_param(unanswered_uid, int, 0444);
#define UNANSWERED 70

static void stbtest_unanswered(struct pci_dev *pdev)
{
	struct zpci_dev *zdev = to_zpci(pdev);
	int i, timedout = 0, failed = 0;
	u8 buf[16] = { 0 };

	for (i = 0; i < UNANSWERED; i++) {
		timedout += stb(zdev, 0, SF | 0x1d00, buf, 16) != 0;
		failed += stb(zdev, 0, SF | 0x1d80, buf, 16) != 0;
	}
	pr_info("STBT: %s UNANSWERED n=%d timedout=%d answered_failed=%d\n", pci_name(pdev),
		UNANSWERED, timedout, failed);
}

/* The backlog of alias_wc_uid: posted moves that a stalled stub leaves queued. */
static void stbtest_backlog(struct pci_dev *pdev)
{
	struct zpci_dev *zdev = to_zpci(pdev);
	int i, failed = 0;
	u8 *page;

	page = (u8 *)get_zeroed_page(GFP_KERNEL);
	if (!page)
		return;
	failed += stb(zdev, 0, 0, page, 16) != 0;
	for (i = 0; i < BACKLOG; i++)
		failed += stb(zdev, 0, 0x1000, page, PAGE_SIZE) != 0;
	pr_info("STBT: %s BACKLOG n=%d failed=%d\n", pci_name(pdev), BACKLOG + 1, failed);
	free_page((unsigned long)page);
}

static void stbtest_mis(struct pci_dev *pdev)
{
	struct zpci_dev *zdev = to_zpci(pdev);
	const char *n = pci_name(pdev);
	u8 buf[16] = { 0 };
	ktime_t t0;
	int rc;

	if (zdev->uid == alias_wc_uid)
		stbtest_backlog(pdev);
	t0 = ktime_get();
	rc = stb(zdev, 0, SF | 0xf00, buf, 16);
	pr_info("STBT: %s MIS store rc=%d ms=%lld\n", n, rc, ktime_ms_delta(ktime_get(), t0));
	if (zdev->uid == alias_uid || zdev->uid == alias_wc_uid)
		stbtest_alias(pdev);
	if (zdev->uid == unanswered_uid)
		stbtest_unanswered(pdev);
	t0 = ktime_get();
	rc = stb(zdev, 0, SF | 0xf80, buf, 16);
	pr_info("STBT: %s MIS after rc=%d ms=%lld\n", n, rc, ktime_ms_delta(ktime_get(), t0));
}

/*
 * dmaread_uid=N: for the function with that uid (a stub with --dma-read), a 512 KiB DMA
 * buffer with a pattern, named to the stub by a store at SF+0x1c00; the stub then reads
 * it with VFIO_USER_DMA_READ, and QEMU's reply is larger than its socket's send buffer.
 * The vCPU sleeps meanwhile (QEMU serves the read under the BQL), then stores once more.
 */
static int dmaread_uid = -1;
module_param(dmaread_uid, int, 0444);
#define DMAREAD_LEN (512 * 1024)

static void stbtest_dmaread(struct pci_dev *pdev)
{
	struct zpci_dev *zdev = to_zpci(pdev);
	const char *n = pci_name(pdev);
	__be64 req[2];
	dma_addr_t iova;
	int i, rc, rc2;
	u8 *buf;

	/* no driver has the function: QEMU serves its DMA only with bus mastering on */
	pci_set_master(pdev);
	if (dma_set_mask_and_coherent(&pdev->dev, DMA_BIT_MASK(64))) {
		pr_info("STBT: %s DMAREAD no 64-bit DMA mask\n", n);
		return;
	}
	buf = dma_alloc_coherent(&pdev->dev, DMAREAD_LEN, &iova, GFP_KERNEL);
	if (!buf) {
		pr_info("STBT: %s DMAREAD no DMA buffer\n", n);
		return;
	}
	for (i = 0; i < DMAREAD_LEN; i++)
		buf[i] = (i * 7 + (i >> 12)) & 0xff;
	req[0] = cpu_to_be64(iova);
	req[1] = cpu_to_be64(DMAREAD_LEN);
	rc = stb(zdev, 0, SF | 0x1c00, req, sizeof(req));
	msleep(3000);
	rc2 = stb(zdev, 0, SF | 0x1c80, req, sizeof(req));
	pr_info("STBT: %s DMAREAD rc=%d after rc=%d\n", n, rc, rc2);
	dma_free_coherent(&pdev->dev, DMAREAD_LEN, buf, iova);
	pci_clear_master(pdev);
}

/* Every IBM (1014) function: the ISM one (04ed) and any test function beside it. */
static int __init stbtest_init(void)
{
	struct pci_dev *pdev = NULL;

	while ((pdev = pci_get_device(PCI_VENDOR_ID_IBM, PCI_ANY_ID, pdev))) {
		if (dead)
			stbtest_dead(pdev);
		else if (queue)
			stbtest_queue(pdev);
		else if (sweep) {
			stbtest_sweep(pdev);
			stbtest_lgsg(pdev);
		}
		else if (mis)
			stbtest_mis(pdev);
		else
			stbtest_one(pdev);
		if (to_zpci(pdev)->uid == dmaread_uid)
			stbtest_dmaread(pdev);
	}
	pr_info("STBT: done\n");
	return 0;
}

static void __exit stbtest_exit(void)
{
}
module_init(stbtest_init);
module_exit(stbtest_exit);
MODULE_LICENSE("GPL");
