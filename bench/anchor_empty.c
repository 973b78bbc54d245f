/*
 * The anchor of bench_cntr's counter-read row: an exported function of another shared
 * library with ibv_read_comp_cntr's signature that does the least such a function can
 * (store a value, return 0). Calling it costs what any call through the PLT costs, which
 * is the floor for a library's counter read.
 */
#include <stdint.h>

struct ibv_comp_cntr;

__attribute__((visibility("default"), noinline)) int swv_bench_empty_read(struct ibv_comp_cntr *c,
									  uint64_t *value)
{
	(void)c;
	*value = 1;
	return 0;
}
