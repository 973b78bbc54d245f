/*
 * CRC-32 (zlib/IEEE, reflected polynomial 0xEDB88320), slicing-by-8.
 *
 * Every packet swverbs sends or receives is covered by this CRC, so it sits on the data
 * path: eight table lookups retire eight input bytes per step instead of one. The 8 KiB
 * of tables are computed once, on first use, under pthread_once (cheap to build, no
 * generated sources, safe when several threads send their first packet together).
 */
#include "transport/crc.h"

#include <endian.h>
#include <pthread.h>
#include <string.h>

#define CRC32_POLY 0xedb88320u

/* crc_tab[k][b]: CRC register contribution of byte b followed by k zero bytes. */
static uint32_t crc_tab[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init_tables(void)
{
	for (uint32_t b = 0; b < 256; b++) {
		uint32_t c = b;
		for (int i = 0; i < 8; i++)
			c = (c >> 1) ^ (CRC32_POLY & (0u - (c & 1u)));
		crc_tab[0][b] = c;
	}
	for (uint32_t b = 0; b < 256; b++)
		for (int k = 1; k < 8; k++)
			crc_tab[k][b] = (crc_tab[k - 1][b] >> 8) ^ crc_tab[0][crc_tab[k - 1][b] & 0xff];
}

/* Little-endian 32-bit load from any alignment (one mov on x86/arm64). */
static inline uint32_t load_le32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, sizeof(v));
	return le32toh(v);
}

uint32_t swv_crc32(uint32_t crc, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	if (len == 0 || !buf)
		return crc; /* nothing to absorb (NULL with len > 0 is a caller bug: no-op) */
	pthread_once(&crc_once, crc_init_tables);

	uint32_t c = ~crc;
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
	return ~c;
}
