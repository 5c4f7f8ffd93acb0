// The stream pattern and its checksum, natively on the host (make -C guest-tests/progs
// check): the word-at-a-time paths must agree byte for byte with the definition.
#include "common.h"

#include <stdio.h>
#include <string.h>

static int failures;

static void expect(int ok, const char *what, unsigned off, size_t at)
{
	if (!ok) {
		printf("FAIL %s (offset %u, byte %zu)\n", what, off, at);
		failures++;
	}
}

/* The definition: byte i is byte (i % 8) of splitmix64(seed + i / 8), LSB first. */
static unsigned char pattern_byte(uint64_t seed, uint64_t i)
{
	return (unsigned char)(mix64(seed + i / 8) >> (8 * (i % 8)));
}

int main(void)
{
	unsigned char b[1003];

	for (unsigned off = 0; off < 17; off++) {
		pattern_fill(7, off, b, sizeof(b));
		for (size_t i = 0; i < sizeof(b); i++)
			expect(b[i] == pattern_byte(7, off + i), "pattern_fill", off, i);
		expect(pattern_check(7, off, b, sizeof(b)) == sizeof(b), "check of the pattern", off, 0);
		for (size_t k = 0; k < sizeof(b); k += 13) {
			b[k] ^= 0x10;
			expect(pattern_check(7, off, b, sizeof(b)) == k, "first wrong byte found", off, k);
			b[k] ^= 0x10;
		}
	}
	/* Word-wise FNV-1a: one piece or two at a multiple of 8 give the same value, and
	 * one changed byte changes it. */
	uint64_t whole = fnv1a64(FNV64_INIT, b, sizeof(b));
	expect(fnv1a64(fnv1a64(FNV64_INIT, b, 512), b + 512, sizeof(b) - 512) == whole, "fnv pieces", 0, 512);
	b[700] ^= 1;
	expect(fnv1a64(FNV64_INIT, b, sizeof(b)) != whole, "fnv sees a changed byte", 0, 700);
	expect(fnv1a64(FNV64_INIT, b, 0) == FNV64_INIT, "fnv of nothing", 0, 0);
	printf("pattern_test: %s\n", failures ? "FAIL" : "ok");
	return failures != 0;
}
