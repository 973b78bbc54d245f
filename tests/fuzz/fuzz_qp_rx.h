/*
 * The fixture of fuzz_qp_rx and its input format, shared with the seed generator
 * (gen_corpus.c). See docs/fuzzing.md.
 *
 * Fixture (rebuilt for every input, in one persistent context): four QPs in RTS,
 * connected to a fake peer -- a UDP socket of the harness that nobody reads but the
 * harness, which drains it -- at PSN 0 both ways:
 *   FQ_RC   RC; posted: WRITE 64 B (PSN 0), READ 3000 B (PSN 1-3, three responses),
 *           SEND 2500 B (PSN 4-6), CMP_SWAP (PSN 7), FETCH_ADD (PSN 8),
 *           SEND_WITH_IMM 0 B (PSN 9); 4 receives.
 *   FQ_UC   UC; posted: SEND 2000 B (PSN 0-1), WRITE_WITH_IMM 100 B (PSN 2); 2 receives.
 *   FQ_UD   UD, Q_Key FQ_QKEY; posted: SEND 100 B to the peer; 2 receives.
 *   FQ_SRQ  RC on an SRQ holding 4 receives; posted: SEND 100 B (PSN 0).
 * Path MTU 1024, receive buffers of FQ_RECV_LEN bytes. Memory: one fixed mapping at FQ_MEM_VA (so a
 * packet can name an address without knowing the run), guard pages at both ends, an unregistered
 * canary page, a remote-read-only MR; the harness aborts if a canary or the read-only MR changes.
 *
 * Input: records  ctl(1) | len(2, big-endian) | bytes[len]
 *   ctl & FQ_TARGET   0..3: the datagram is for that QP: the harness writes its QPN
 *                     into BTH (the QPN depends on the run); 4..7: BTH left as is,
 *                     delivered on FQ_RC's socket (lookups of QPs that are not there).
 *   ctl & FQ_SRC      where it comes from: FQ_SRC_PEER (the QP's peer; for a UD
 *                     target the DETH source QPN is pointed at the peer's port too),
 *                     FQ_SRC_FOREIGN (another port), FQ_SRC_OTHER_IP (127.0.0.2, the
 *                     peer's port), FQ_SRC_RAW (the peer, nothing rewritten but BTH).
 *   ctl & FQ_FIXCRC   recompute the trailing CRC after the rewrites.
 *   ctl & FQ_FLUSH    hand the datagrams queued so far to the receive path now (one
 *                     receive pass), otherwise they queue up (at most 32).
 *   ctl & FQ_TIMER    not a datagram: run the target QP's timer as if len ms had
 *                     passed (bytes[] absent).
 * Keys: an R_Key in RETH, AtomicETH or IETH whose upper 16 bits are 0 names an MR of
 * the fixture by its low bits (FQ_KEY_RW, FQ_KEY_RO) and is replaced by its real key.
 */
#ifndef SWV_FUZZ_QP_RX_H
#define SWV_FUZZ_QP_RX_H

enum { FQ_RC, FQ_UC, FQ_UD, FQ_SRQ, FQ_NQPS };

#define FQ_TARGET	0x07
#define FQ_SRC		0x18
#define FQ_SRC_PEER	0x00
#define FQ_SRC_FOREIGN	0x08
#define FQ_SRC_OTHER_IP 0x10
#define FQ_SRC_RAW	0x18
#define FQ_FIXCRC	0x20
#define FQ_FLUSH	0x40
#define FQ_TIMER	0x80
#define FQ_MAX_LEN	9000 /* beyond any MTU: the QPs must refuse oversized packets */
#define FQ_MAX_BATCH	32

#define FQ_QKEY 0x11111111u
#define FQ_MTU	1024u

/* The fixed mapping; offsets from FQ_MEM_VA. */
#define FQ_MEM_VA  0x10000000ull
#define FQ_MEM_LEN 0x10000u
#define FQ_GUARD0  0x0000u /* 4 KiB PROT_NONE */
#define FQ_RW	   0x1000u /* 48 KiB: local write, remote write/read/atomic */
#define FQ_RW_LEN  0xc000u
#define FQ_CANARY  0xd000u /* 4 KiB, never registered */
#define FQ_RO	   0xe000u /* 4 KiB: remote read only */
#define FQ_RO_LEN  0x1000u
#define FQ_GUARD1  0xf000u /* 4 KiB PROT_NONE */

#define FQ_KEY_RW 1u
#define FQ_KEY_RO 2u

/* Inside FQ_RW (offsets from FQ_RW): */
#define FQ_OFF_SRC	0x0000u /* send / WRITE source */
#define FQ_OFF_READ	0x1000u /* READ destination, 3000 B */
#define FQ_OFF_ATOMIC	0x2000u /* CMP_SWAP result, FETCH_ADD result at +8 */
#define FQ_OFF_TARGET	0x2100u /* a free area for the peer's WRITEs and atomics */
#define FQ_OFF_RC_RECV	0x3000u /* 4 x 0x800 */
#define FQ_OFF_UC_RECV	0x5000u /* 2 x 0x800 */
#define FQ_OFF_SRQ_RECV 0x6000u /* 4 x 0x800 */
#define FQ_OFF_UD_RECV	0x8000u /* 2 x 0x800 (40 B GRH area + MTU) */
#define FQ_RECV_LEN	0x800u

#endif
