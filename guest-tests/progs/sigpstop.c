/*
 * sigpstop: powers the guest off while its other CPU changes a page table, over and
 * over (qemu-configs/tests/sigp-stop.sh; QEMU patch s390x-sigp-exclusive).
 *
 * A thread on CPU 1 toggles 256 pages between read-only and writable. The process also
 * has CPU 0 (its main thread sleeps there, then powers off from there), so each change
 * is a global IPTE, which QEMU's TCG turns into a TLB flush of all CPUs: CPU 1's own
 * part runs as exclusive work. The power-off's SIGP STOP from CPU 0 to CPU 1 then comes
 * while CPU 1 has such work queued, often: stock QEMU 10.2 waits in each for the other
 * (the guest never powers off).
 *
 * Usage: sigpstop [MS]   (the loop runs MS milliseconds before the power-off; 200)
 * Prints "SIGPSTOP: powering off after N changes"; then the guest is gone, or not.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/reboot.h>
#include <unistd.h>

/* Each page a change covers is one IPTE, so one TLB flush of all CPUs: many per call. */
#define PAGES 256
#define SIZE (PAGES * 4096)

static volatile char *page;
static volatile unsigned long changes;

static int pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof(set), &set);
}

static void *churn(void *arg)
{
	(void)arg;
	if (pin(1))
		perror("sigpstop: CPU 1");
	for (;;) {
		mprotect((void *)page, SIZE, PROT_READ);
		mprotect((void *)page, SIZE, PROT_READ | PROT_WRITE);
		for (int i = 0; i < PAGES; i++)   /* present and writable again */
			page[i * 4096]++;
		changes++;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int ms = argc > 1 ? atoi(argv[1]) : 200;
	pthread_t t;

	if (pin(0)) {
		perror("sigpstop: CPU 0");
		return 1;
	}
	page = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (page == MAP_FAILED) {
		perror("sigpstop: mmap");
		return 1;
	}
	for (int i = 0; i < PAGES; i++)
		page[i * 4096] = 1;
	if (pthread_create(&t, NULL, churn, NULL)) {
		fprintf(stderr, "sigpstop: no thread\n");
		return 1;
	}
	usleep(ms * 1000);
	printf("SIGPSTOP: powering off after %lu changes\n", changes);
	fflush(stdout);
	sync();
	reboot(RB_POWER_OFF);
	perror("sigpstop: reboot");
	return 1;
}
