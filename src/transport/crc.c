/*
 * CRC-32 (zlib/IEEE, reflected polynomial 0xEDB88320).
 *
 * Every packet swverbs sends or receives is covered by this CRC, so it sits on the data
 * path. Two implementations, chosen once at first use:
 *  - slicing-by-8 tables (portable): eight lookups retire eight input bytes per step;
 *  - on x86-64 CPUs with PCLMULQDQ, carry-less multiplication folds 64 bytes per step
 *    (several times faster on 4 KiB payloads), and the tables finish the last bytes.
 * Tables and folding constants are computed once under pthread_once: no generated
 * sources, no magic constants to mistype, safe when several threads send their first
 * packet together.
 */
#include "transport/crc.h"

#include <endian.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define SWV_CRC_CLMUL 1
#include <immintrin.h>
#endif

#define CRC32_POLY_REFLECTED 0xedb88320u
#define CRC32_POLY_NORMAL    0x104c11db7ull /* x^32 + ..., bit d = coefficient of x^d */

/* crc_tab[k][b]: CRC register contribution of byte b followed by k zero bytes. */
static uint32_t crc_tab[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

/* Little-endian 32-bit load from any alignment (one mov on x86/arm64). */
static inline uint32_t load_le32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, sizeof(v));
	return le32toh(v);
}

/* Raw register update (no inversion), slicing-by-8. */
static uint32_t crc_raw_tables(uint32_t c, const uint8_t *p, size_t len)
{
	/* Byte steps until p is 8-byte aligned, so the wide loads below are aligned. */
	while (len && ((uintptr_t)p & 7)) {
		c = (c >> 8) ^ crc_tab[0][(c ^ *p++) & 0xff];
		len--;
	}
	while (len >= 8) {
		uint32_t lo = load_le32(p) ^ c;
		uint32_t hi = load_le32(p + 4);
		c = crc_tab[7][lo & 0xff] ^ crc_tab[6][(lo >> 8) & 0xff] ^
		    crc_tab[5][(lo >> 16) & 0xff] ^ crc_tab[4][lo >> 24] ^
		    crc_tab[3][hi & 0xff] ^ crc_tab[2][(hi >> 8) & 0xff] ^
		    crc_tab[1][(hi >> 16) & 0xff] ^ crc_tab[0][hi >> 24];
		p += 8;
		len -= 8;
	}
	while (len--)
		c = (c >> 8) ^ crc_tab[0][(c ^ *p++) & 0xff];
	return c;
}

#ifdef SWV_CRC_CLMUL
/*
 * Folding with carry-less multiply, in the reflected domain. A 16-byte block X loaded
 * little-endian as (lo, hi) is the polynomial L*x^64 + H (byte 0 bit 0 = highest
 * degree). _mm_clmulepi64_si128 of two reflected 64-bit operands yields the reflected
 * 128-bit product times x. Moving X forward by D bits (X*x^D mod P) is therefore
 *     clmul(lo, x^(D+63) mod P) ^ clmul(hi, x^(D-1) mod P),
 * a value below 2^96 that XORs into the block D bits later. After folding everything
 * into one block, its CRC equals the CRC of all the bytes folded into it.
 */
static bool crc_have_clmul;
static uint64_t k_fold512[2], k_fold128[2]; /* {lo constant, hi constant} */

/* x^n mod P, reflected into a 64-bit operand: coefficient of x^d at bit 63 - d. */
static uint64_t xpow_mod_reflected(unsigned n)
{
	uint64_t r = 1;
	for (unsigned i = 0; i < n; i++) {
		r <<= 1;
		if (r & (1ull << 32))
			r ^= CRC32_POLY_NORMAL;
	}
	uint64_t out = 0;
	for (unsigned d = 0; d < 32; d++)
		if (r & (1ull << d))
			out |= 1ull << (63 - d);
	return out;
}

__attribute__((target("pclmul,sse2"))) static inline __m128i fold(__m128i x, __m128i k)
{
	return _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11));
}

/* Raw register update for len >= 64. */
__attribute__((target("pclmul,sse2"))) static uint32_t crc_raw_clmul(uint32_t c,
								     const uint8_t *p, size_t len)
{
	const __m128i k512 = _mm_loadu_si128((const __m128i *)k_fold512);
	const __m128i k128 = _mm_loadu_si128((const __m128i *)k_fold128);
	/* The running register enters as an XOR into the first four message bytes. */
	__m128i x0 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)p), _mm_cvtsi32_si128((int)c));
	__m128i x1 = _mm_loadu_si128((const __m128i *)(p + 16));
	__m128i x2 = _mm_loadu_si128((const __m128i *)(p + 32));
	__m128i x3 = _mm_loadu_si128((const __m128i *)(p + 48));
	p += 64;
	len -= 64;
	/* Four independent lanes hide the multiplier latency. */
	while (len >= 64) {
		x0 = _mm_xor_si128(fold(x0, k512), _mm_loadu_si128((const __m128i *)p));
		x1 = _mm_xor_si128(fold(x1, k512), _mm_loadu_si128((const __m128i *)(p + 16)));
		x2 = _mm_xor_si128(fold(x2, k512), _mm_loadu_si128((const __m128i *)(p + 32)));
		x3 = _mm_xor_si128(fold(x3, k512), _mm_loadu_si128((const __m128i *)(p + 48)));
		p += 64;
		len -= 64;
	}
	__m128i x = _mm_xor_si128(fold(x0, k128), x1);
	x = _mm_xor_si128(fold(x, k128), x2);
	x = _mm_xor_si128(fold(x, k128), x3);
	while (len >= 16) {
		x = _mm_xor_si128(fold(x, k128), _mm_loadu_si128((const __m128i *)p));
		p += 16;
		len -= 16;
	}
	uint8_t blk[16];
	_mm_storeu_si128((__m128i *)blk, x);
	c = crc_raw_tables(0, blk, sizeof(blk));
	return crc_raw_tables(c, p, len);
}

/*
 * The same folding with 256-bit VPCLMULQDQ (AVX2 register width, no AVX-512 needed):
 * four ymm accumulators hold 128 consecutive bytes as eight 16-byte lanes, and each
 * step moves every lane forward by 128 bytes (1024 bits) with one constant pair
 * broadcast to both halves. At the end the eight lanes are folded into one in message
 * order and finished by the 16-byte loop above. Twice the bytes per multiply.
 */
static bool crc_have_vclmul;
static uint64_t k_fold1024[2];

__attribute__((target("vpclmulqdq,avx2,pclmul,sse2"))) static inline __m256i
fold256(__m256i x, __m256i k)
{
	return _mm256_xor_si256(_mm256_clmulepi64_epi128(x, k, 0x00),
				_mm256_clmulepi64_epi128(x, k, 0x11));
}

/* Raw register update for len >= 256. */
__attribute__((target("vpclmulqdq,avx2,pclmul,sse2"))) static uint32_t
crc_raw_vclmul(uint32_t c, const uint8_t *p, size_t len)
{
	const __m256i k1024 = _mm256_broadcastsi128_si256(
		_mm_loadu_si128((const __m128i *)k_fold1024));
	const __m128i k128 = _mm_loadu_si128((const __m128i *)k_fold128);
	__m256i x0 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)p),
				      _mm256_zextsi128_si256(_mm_cvtsi32_si128((int)c)));
	__m256i x1 = _mm256_loadu_si256((const __m256i *)(p + 32));
	__m256i x2 = _mm256_loadu_si256((const __m256i *)(p + 64));
	__m256i x3 = _mm256_loadu_si256((const __m256i *)(p + 96));
	p += 128;
	len -= 128;
	while (len >= 128) {
		x0 = _mm256_xor_si256(fold256(x0, k1024), _mm256_loadu_si256((const __m256i *)p));
		x1 = _mm256_xor_si256(fold256(x1, k1024),
				      _mm256_loadu_si256((const __m256i *)(p + 32)));
		x2 = _mm256_xor_si256(fold256(x2, k1024),
				      _mm256_loadu_si256((const __m256i *)(p + 64)));
		x3 = _mm256_xor_si256(fold256(x3, k1024),
				      _mm256_loadu_si256((const __m256i *)(p + 96)));
		p += 128;
		len -= 128;
	}
	__m128i lane[8] = {
		_mm256_castsi256_si128(x0), _mm256_extracti128_si256(x0, 1),
		_mm256_castsi256_si128(x1), _mm256_extracti128_si256(x1, 1),
		_mm256_castsi256_si128(x2), _mm256_extracti128_si256(x2, 1),
		_mm256_castsi256_si128(x3), _mm256_extracti128_si256(x3, 1),
	};
	__m128i x = lane[0];
	for (int i = 1; i < 8; i++)
		x = _mm_xor_si128(fold(x, k128), lane[i]);
	while (len >= 16) {
		x = _mm_xor_si128(fold(x, k128), _mm_loadu_si128((const __m128i *)p));
		p += 16;
		len -= 16;
	}
	uint8_t blk[16];
	_mm_storeu_si128((__m128i *)blk, x);
	c = crc_raw_tables(0, blk, sizeof(blk));
	return crc_raw_tables(c, p, len);
}
#endif

static void crc_init(void)
{
	for (uint32_t b = 0; b < 256; b++) {
		uint32_t c = b;
		for (int i = 0; i < 8; i++)
			c = (c >> 1) ^ (CRC32_POLY_REFLECTED & (0u - (c & 1u)));
		crc_tab[0][b] = c;
	}
	for (uint32_t b = 0; b < 256; b++)
		for (int k = 1; k < 8; k++)
			crc_tab[k][b] = (crc_tab[k - 1][b] >> 8) ^ crc_tab[0][crc_tab[k - 1][b] & 0xff];
#ifdef SWV_CRC_CLMUL
	k_fold512[0] = xpow_mod_reflected(512 + 63);
	k_fold512[1] = xpow_mod_reflected(512 - 1);
	k_fold128[0] = xpow_mod_reflected(128 + 63);
	k_fold128[1] = xpow_mod_reflected(128 - 1);
	k_fold1024[0] = xpow_mod_reflected(1024 + 63);
	k_fold1024[1] = xpow_mod_reflected(1024 - 1);
	__builtin_cpu_init();
	crc_have_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse2");
	crc_have_vclmul = crc_have_clmul && __builtin_cpu_supports("avx2") &&
			  __builtin_cpu_supports("vpclmulqdq");
	if (getenv("SWVERBS_CRC_NO_VPCLMUL")) /* tests compare both paths */
		crc_have_vclmul = false;
#endif
}

uint32_t swv_crc32(uint32_t crc, const void *buf, size_t len)
{
	if (len == 0 || !buf)
		return crc; /* nothing to absorb (NULL with len > 0 is a caller bug: no-op) */
	pthread_once(&crc_once, crc_init);
#ifdef SWV_CRC_CLMUL
	if (len >= 256 && crc_have_vclmul)
		return ~crc_raw_vclmul(~crc, buf, len);
	if (len >= 64 && crc_have_clmul)
		return ~crc_raw_clmul(~crc, buf, len);
#endif
	return ~crc_raw_tables(~crc, buf, len);
}

uint32_t swv_crc32_generic(uint32_t crc, const void *buf, size_t len)
{
	if (len == 0 || !buf)
		return crc;
	pthread_once(&crc_once, crc_init);
	return ~crc_raw_tables(~crc, buf, len);
}

const char *swv_crc32_impl(void)
{
	pthread_once(&crc_once, crc_init);
#ifdef SWV_CRC_CLMUL
	if (crc_have_vclmul)
		return "vpclmul";
	if (crc_have_clmul)
		return "pclmul";
#endif
	return "slice8";
}
