/*
 * CRC-32 (transport/crc.c): known vectors, table-driven vs a bitwise reference on
 * random buffers at every alignment, incremental == one-shot, thread-safe first use,
 * and the RoCEv2 ICRC test vector of roce-wire.md 1.3 to show the core matches rxe.
 */
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "check.h"
#include "transport/crc.h"

/* Independent definition: one bit at a time, reflected polynomial. */
static uint32_t crc32_ref(uint32_t crc, const uint8_t *p, size_t n)
{
	crc = ~crc;
	while (n--) {
		crc ^= *p++;
		for (int i = 0; i < 8; i++)
			crc = (crc & 1) ? (crc >> 1) ^ 0xedb88320u : crc >> 1;
	}
	return ~crc;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
	/* xorshift64*: deterministic so a failure reproduces */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}

static const char digits[] = "123456789";

/* Several threads race to be the first caller: the tables must come out right. */
static void *first_use_thread(void *arg)
{
	uintptr_t ok = swv_crc32(0, digits, 9) == 0xcbf43926u;
	return (void *)ok;
}

static void test_first_use_threads(void)
{
	pthread_t t[8];
	for (int i = 0; i < 8; i++)
		CHECK(pthread_create(&t[i], NULL, first_use_thread, NULL) == 0);
	for (int i = 0; i < 8; i++) {
		void *ok;
		CHECK(pthread_join(t[i], &ok) == 0);
		CHECK(ok == (void *)1);
	}
}

static void test_known_vectors(void)
{
	CHECK_EQ(swv_crc32(0, digits, 9), 0xcbf43926u);
	CHECK_EQ(swv_crc32(0, "", 0), 0);
	CHECK_EQ(swv_crc32(0, "a", 1), 0xe8b7be43u);
	static const char fox[] = "The quick brown fox jumps over the lazy dog";
	CHECK_EQ(swv_crc32(0, fox, sizeof(fox) - 1), 0x414fa339u);
	/* rxe's seed: 0xFFFFFFFF after absorbing eight 0xFF bytes, raw (no inversion). */
	uint8_t ff[8];
	memset(ff, 0xff, sizeof(ff));
	CHECK_EQ(~swv_crc32(0, ff, 8), 0xdebb20e3u);
	/* Nothing to absorb: crc unchanged, also for a NULL buffer. */
	CHECK_EQ(swv_crc32(0x12345678u, NULL, 0), 0x12345678u);
	CHECK_EQ(swv_crc32(0x12345678u, NULL, 5), 0x12345678u);
	CHECK_EQ(swv_crc32(0x12345678u, digits, 0), 0x12345678u);
}

static void test_random_vs_reference(void)
{
	static uint8_t buf[8192 + 8];
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)rnd();
	/* Every length 0..1100 at every alignment, then random long ones. */
	for (size_t len = 0; len <= 1100; len++)
		for (size_t off = 0; off < 8; off++) {
			uint32_t seed = (len & 1) ? rnd() : 0;
			uint32_t want = crc32_ref(seed, buf + off, len);
			CHECK_EQ(swv_crc32(seed, buf + off, len), want);
			CHECK_EQ(swv_crc32_generic(seed, buf + off, len), want);
		}
	for (int i = 0; i < 200; i++) {
		size_t off = rnd() % 8, len = rnd() % 8193;
		uint32_t want = crc32_ref(0, buf + off, len);
		CHECK_EQ(swv_crc32(0, buf + off, len), want);
		CHECK_EQ(swv_crc32_generic(0, buf + off, len), want);
	}
	/* All-ones and all-zero data (carry-less folding edge cases). */
	for (int v = 0; v < 256; v += 255) {
		memset(buf, v, sizeof(buf));
		for (size_t len = 0; len <= sizeof(buf) - 8; len += 61)
			CHECK_EQ(swv_crc32(0xffffffffu, buf, len), crc32_ref(0xffffffffu, buf, len));
	}
}

static void test_incremental(void)
{
	uint8_t buf[600];
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)rnd();
	uint32_t whole = swv_crc32(0, buf, sizeof(buf));
	CHECK_EQ(whole, crc32_ref(0, buf, sizeof(buf)));
	for (size_t a = 0; a <= sizeof(buf); a++) {
		uint32_t c = swv_crc32(0, buf, a);
		CHECK_EQ(swv_crc32(c, buf + a, sizeof(buf) - a), whole);
	}
	/* three pieces at random cut points */
	for (int i = 0; i < 1000; i++) {
		size_t a = rnd() % (sizeof(buf) + 1), b = a + rnd() % (sizeof(buf) - a + 1);
		uint32_t c = swv_crc32(0, buf, a);
		c = swv_crc32(c, buf + a, b - a);
		CHECK_EQ(swv_crc32(c, buf + b, sizeof(buf) - b), whole);
	}
}

static size_t unhex(const char *s, uint8_t *out)
{
	size_t n = 0;
	for (; s[0] && s[1]; s += 2) {
		unsigned v;
		CHECK(sscanf(s, "%2x", &v) == 1);
		out[n++] = (uint8_t)v;
	}
	return n;
}

/*
 * roce-wire.md 1.3 IPv4 vector: RC RDMA_WRITE_ONLY in IPv4/UDP with ICRC 58 0c d4 15.
 * ICRC = crc32(8 x 0xff | IPv4 with TOS, TTL, checksum = 1s | UDP with checksum = 1s |
 * BTH with byte 4 = 0xff | rest before the ICRC), stored least-significant byte first.
 */
static void test_rocev2_icrc_vector(void)
{
	static const char hex[] =
		"4500004400004000401126a70a0000010a000002c00112b7003000000a30ffff00000011"
		"8012345600007f0000001000000012340000000568656c6c6f000000580cd415";
	uint8_t pkt[128], masked[128];
	size_t n = unhex(hex, pkt);
	CHECK_EQ(n, 68);
	memcpy(masked, pkt, n);
	masked[1] = 0xff;                     /* IPv4 TOS */
	masked[8] = 0xff;                     /* TTL */
	masked[10] = masked[11] = 0xff;       /* IPv4 header checksum */
	masked[20 + 6] = masked[20 + 7] = 0xff; /* UDP checksum */
	masked[28 + 4] = 0xff;                /* BTH FECN/BECN/resv */
	uint8_t lrh[8];
	memset(lrh, 0xff, sizeof(lrh));
	uint32_t crc = swv_crc32(0, lrh, sizeof(lrh));
	crc = swv_crc32(crc, masked, n - 4);
	CHECK_EQ(crc, 0x15d40c58u);
	uint8_t wire[4] = {(uint8_t)crc, (uint8_t)(crc >> 8), (uint8_t)(crc >> 16),
			   (uint8_t)(crc >> 24)};
	CHECK(memcmp(wire, pkt + n - 4, 4) == 0);
	/* A covered byte (UDP source port) changes the ICRC. */
	uint8_t alt[128];
	memcpy(alt, masked, n);
	alt[20 + 0] ^= 1;
	crc = swv_crc32(swv_crc32(0, lrh, 8), alt, n - 4);
	CHECK(crc != 0x15d40c58u);
}

/* Not an assertion: rough speed figures for the log. */
static void report_speed(const char *name, uint32_t (*fn)(uint32_t, const void *, size_t))
{
	static uint8_t buf[4096];
	struct timespec a, b;
	uint32_t c = 0;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < 20000; i++)
		c = fn(c, buf, sizeof(buf));
	clock_gettime(CLOCK_MONOTONIC, &b);
	double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
	printf("crc32 %s: %.2f GB/s over 4 KiB buffers (%08x)\n", name,
	       20000.0 * 4096 / s / 1e9, c);
}

int main(void)
{
	test_first_use_threads(); /* must run first: exercises the one-time table init */
	test_known_vectors();
	test_random_vs_reference();
	test_incremental();
	test_rocev2_icrc_vector();
	report_speed(swv_crc32_impl(), swv_crc32);
	report_speed("slice8", swv_crc32_generic);
	printf("test_crc: OK\n");
	return 0;
}
