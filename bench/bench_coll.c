/*
 * bench_coll: the offloaded broadcast + barrier of examples/swverbs-coll.c against the
 * same algorithms driven by the CPU, in one run: time per broadcast (8 B, 64 KiB,
 * 1 MiB, each followed by a barrier) and CPU time per rank, best of 3 alternating
 * rounds, with the triggered/CPU-driven ratios. Options as swverbs-coll (-n ranks).
 */
#define SWV_COLL_NO_MAIN
#include "../examples/swverbs-coll.c"

int main(int argc, char **argv)
{
	return coll_main(argc, argv, true);
}
