/*
 * A two-rank MPI check for tests/compat/test_mpi.sh: ping-pong of every power of two from
 * 1 B to 4 MiB (rank 0 sends a pattern, rank 1 checks every byte and answers with another),
 * an allreduce and an alltoall whose every element is checked. Prints one line per phase
 * and, from rank 0, "mpi_check: OK" and the 1 B half round-trip time; exits non-zero on
 * the first wrong byte.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZE (4u << 20)
#define ITERS	 10

static int rank;

static uint8_t pattern(size_t i, unsigned size, unsigned iter, int from)
{
	return (uint8_t)(i * 131u + size * 7u + iter * 13u + (unsigned)from * 101u);
}

static void fill(uint8_t *b, unsigned size, unsigned iter, int from)
{
	for (size_t i = 0; i < size; i++)
		b[i] = pattern(i, size, iter, from);
}

static void check(const uint8_t *b, unsigned size, unsigned iter, int from)
{
	for (size_t i = 0; i < size; i++)
		if (b[i] != pattern(i, size, iter, from)) {
			fprintf(stderr, "rank %d: size %u iter %u: byte %zu is 0x%02x, expected 0x%02x\n",
				rank, size, iter, i, b[i], pattern(i, size, iter, from));
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
}

int main(int argc, char **argv)
{
	int nranks;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	if (nranks != 2) {
		if (rank == 0)
			fprintf(stderr, "mpi_check: needs exactly 2 ranks, got %d\n", nranks);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	uint8_t *buf = malloc(MAX_SIZE);
	if (!buf)
		MPI_Abort(MPI_COMM_WORLD, 1);
	int peer = 1 - rank;
	double lat1 = 0;
	for (unsigned size = 1; size <= MAX_SIZE; size *= 2) {
		unsigned iters = size >= (1u << 20) ? 3 : ITERS;
		double t0 = 0;
		for (unsigned it = 0; it < iters; it++) {
			if (it == 1)
				t0 = MPI_Wtime(); /* the first exchange may set up the connection */
			if (rank == 0) {
				fill(buf, size, it, 0);
				MPI_Send(buf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
				memset(buf, 0, size);
				MPI_Recv(buf, (int)size, MPI_BYTE, peer, 2, MPI_COMM_WORLD,
					 MPI_STATUS_IGNORE);
				check(buf, size, it, 1);
			} else {
				memset(buf, 0, size);
				MPI_Recv(buf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD,
					 MPI_STATUS_IGNORE);
				check(buf, size, it, 0);
				fill(buf, size, it, 1);
				MPI_Send(buf, (int)size, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
			}
		}
		if (size == 1)
			lat1 = (MPI_Wtime() - t0) / (iters - 1) / 2 * 1e6;
	}
	if (rank == 0)
		printf("pingpong 1 B .. 4 MiB: every byte checked (1 B half round trip %.1f us)\n",
		       lat1);

	/* allreduce: element i of rank r is r * 1000003 + i; the sum is known. */
	enum { N = 1 << 18 };
	int64_t *in = malloc(N * sizeof(*in)), *out = malloc(N * sizeof(*out));
	if (!in || !out)
		MPI_Abort(MPI_COMM_WORLD, 1);
	for (int64_t i = 0; i < N; i++)
		in[i] = rank * 1000003 + i;
	MPI_Allreduce(in, out, N, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
	for (int64_t i = 0; i < N; i++)
		if (out[i] != 1000003 + 2 * i) {
			fprintf(stderr, "rank %d: allreduce element %lld wrong\n", rank, (long long)i);
			MPI_Abort(MPI_COMM_WORLD, 3);
		}
	if (rank == 0)
		printf("allreduce %d x int64: every element checked\n", N);

	/* alltoall: block b of rank r's send buffer goes to rank b. */
	enum { B = 1 << 17 };
	uint8_t *sb = malloc(2 * B), *rb = malloc(2 * B);
	if (!sb || !rb)
		MPI_Abort(MPI_COMM_WORLD, 1);
	for (int b = 0; b < 2; b++)
		for (size_t i = 0; i < B; i++)
			sb[b * B + i] = (uint8_t)(rank * 37 + b * 11 + i * 3);
	MPI_Alltoall(sb, B, MPI_BYTE, rb, B, MPI_BYTE, MPI_COMM_WORLD);
	for (int from = 0; from < 2; from++)
		for (size_t i = 0; i < B; i++)
			if (rb[from * B + i] != (uint8_t)(from * 37 + rank * 11 + i * 3)) {
				fprintf(stderr, "rank %d: alltoall block %d byte %zu wrong\n", rank,
					from, i);
				MPI_Abort(MPI_COMM_WORLD, 4);
			}
	if (rank == 0)
		printf("alltoall 2 x %d B: every byte checked\n", B);
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0)
		printf("mpi_check: OK\n");
	free(buf);
	free(in);
	free(out);
	free(sb);
	free(rb);
	MPI_Finalize();
	return 0;
}
