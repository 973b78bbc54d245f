/*
 * CRC-32 (IEEE 802.3 / zlib polynomial, reflected 0xEDB88320, init and final XOR
 * 0xFFFFFFFF): the CRC that RoCEv2's ICRC uses. Owner: transport/wire.
 */
#ifndef SWV_TRANSPORT_CRC_H
#define SWV_TRANSPORT_CRC_H

#include <stddef.h>
#include <stdint.h>

/* Running CRC: start with crc = 0 (like zlib's crc32(0, ...)); pre/post inversion
 * is done inside, so swv_crc32(swv_crc32(0,a,n),b,m) == swv_crc32(0,a||b,n+m).
 * buf may be NULL only when len is 0 (the crc is then returned unchanged).
 * Thread-safe; the lookup tables are built once on first use. */
uint32_t swv_crc32(uint32_t crc, const void *buf, size_t len);

/* Same result, always the portable table-driven code (tests compare the two). */
uint32_t swv_crc32_generic(uint32_t crc, const void *buf, size_t len);

/* Name of the implementation swv_crc32 uses on this CPU ("pclmul" or "slice8"). */
const char *swv_crc32_impl(void);

#endif
