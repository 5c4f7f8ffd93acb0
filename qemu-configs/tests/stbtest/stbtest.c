// SPDX-License-Identifier: GPL-2.0
/*
 * PCISTB shapes against the first ISM function (1014:04ed), for
 * qemu-configs/tests/pcistb-smoke.sh: prints "STBT: <case> rc=<__zpci_store_block()>".
 * Loads, runs once and stays loaded (a failing init would make insmod retry).
 */
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/gfp.h>
#include <asm/pci.h>
#include <asm/pci_io.h>
#include <asm/pci_insn.h>

static int stb(struct zpci_dev *zdev, int bar, u64 off, void *src, int len)
{
	return __zpci_store_block(src, ZPCI_CREATE_REQ(zdev->fh, bar, len), off);
}

static int __init stbtest_init(void)
{
	struct pci_dev *pdev = pci_get_device(0x1014, 0x04ed, NULL);
	struct zpci_dev *zdev;
	u8 *buf;
	int i;

	if (!pdev) {
		pr_info("STBT: no ISM function\n");
		return -ENODEV;
	}
	zdev = to_zpci(pdev);
	buf = (u8 *)__get_free_pages(GFP_KERNEL, 1);
	for (i = 0; i < 2 * PAGE_SIZE; i++)
		buf[i] = i & 0xff;
	pr_info("STBT: fh=0x%x\n", zdev->fh);
	pr_info("STBT: A len5 off37 src+4093 (crosses page) rc=%d\n", stb(zdev, 0, 37, buf + 4093, 5));
	pr_info("STBT: B len4096 off0x1000 src+3 rc=%d\n", stb(zdev, 0, 0x1000, buf + 3, 4096));
	pr_info("STBT: C len1 off0x2fff src+1 rc=%d\n", stb(zdev, 0, 0x2fff, buf + 1, 1));
	pr_info("STBT: D len8 off0x3ffc (crosses 4K of PCI offset) rc=%d\n", stb(zdev, 0, 0x3ffc, buf, 8));
	pr_info("STBT: E len4097 off0x5000 rc=%d\n", stb(zdev, 0, 0x5000, buf, 4097));
	pr_info("STBT: F len16 off0x800 (device rejects) rc=%d\n", stb(zdev, 0, 0x800, buf + 8, 16));
	pr_info("STBT: G len8 off0x200000 (beyond 1M BAR) rc=%d\n", stb(zdev, 0, 0x200000, buf, 8));
	pr_info("STBT: done\n");
	free_pages((unsigned long)buf, 1);
	pci_dev_put(pdev);
	return 0;
}

static void __exit stbtest_exit(void)
{
}
module_init(stbtest_init);
module_exit(stbtest_exit);
MODULE_LICENSE("GPL");
