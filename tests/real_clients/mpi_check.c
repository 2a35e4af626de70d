/*
 * mpi_check: what an MPI program asks of the fabric under it, each result checked byte for byte.
 * Run with 2 or more ranks (tests/real_clients/mpi_test.sh runs it over droce, one rank on each
 * droce host, through OpenMPI's pml ucx and osc ucx).
 *
 *   point-to-point: blocking send/receive from 1 byte to 4 MiB (eager and rendezvous) both ways,
 *                   64 non-blocking messages in flight at once, sendrecv around a ring, a
 *                   wildcard receive (MPI_ANY_SOURCE, MPI_ANY_TAG) and its status, probe
 *   collectives:    barrier, bcast (8 B and 1 MiB), reduce, allreduce (int and double sums over
 *                   1 M elements), allgather, alltoall
 *   one-sided:      a window per rank; put and get under fences, accumulate (MPI_SUM) from
 *                   every rank, passive target (lock/put/unlock), fetch_and_op and
 *                   compare_and_swap on a shared counter
 *
 * Prints "ok: WHAT" or "FAIL: WHAT (detail)" per check on rank 0 (a failing check on another rank
 * is reported by that rank), then "mpi_check: N checks, F failures". Exit status 0 when every
 * rank saw no failure, 1 otherwise.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;
static int checks, failures;

static void check(int ok, const char *what, const char *detail) {
  ++checks;
  if (!ok) {
    ++failures;
    printf("FAIL: [rank %d] %s (%s)\n", rank, what, detail ? detail : "");
    fflush(stdout);
  }
}

/* A rank's view of a check that every rank must pass: reported once, by rank 0. */
static void check_all(int ok, const char *what) {
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  if (rank == 0) {
    if (all) printf("ok: %s\n", what);
    else printf("FAIL: %s (on some rank)\n", what);
    fflush(stdout);
  }
  ++checks;
  if (!all) ++failures;
}

/* The byte at offset i of a message from `src` with `salt`. */
static unsigned char pattern(int src, int salt, size_t i) {
  return (unsigned char)((i * 131u + (unsigned)src * 17u + (unsigned)salt * 7u + (i >> 8)) & 0xffu);
}

static void fill(unsigned char *p, size_t n, int src, int salt) {
  for (size_t i = 0; i < n; ++i) p[i] = pattern(src, salt, i);
}

static int matches(const unsigned char *p, size_t n, int src, int salt) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != pattern(src, salt, i)) return 0;
  return 1;
}

static void point_to_point(void) {
  static const size_t sizes[] = {1, 7, 64, 1000, 4096, 8192, 65536, 262144, 1 << 20, 4 << 20};
  const size_t max = 4 << 20;
  unsigned char *sbuf = malloc(max), *rbuf = malloc(max);
  const int peer = rank ^ 1;
  int ok = 1;
  /* Pairs (0,1), (2,3), ...; an odd last rank sits out. */
  if (peer < size) {
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; ++k) {
      const size_t n = sizes[k];
      fill(sbuf, n, rank, (int)k);
      memset(rbuf, 0, n);
      MPI_Status st;
      if (rank % 2 == 0) {
        MPI_Send(sbuf, (int)n, MPI_BYTE, peer, (int)k, MPI_COMM_WORLD);
        MPI_Recv(rbuf, (int)n, MPI_BYTE, peer, (int)k, MPI_COMM_WORLD, &st);
      } else {
        MPI_Recv(rbuf, (int)n, MPI_BYTE, peer, (int)k, MPI_COMM_WORLD, &st);
        MPI_Send(sbuf, (int)n, MPI_BYTE, peer, (int)k, MPI_COMM_WORLD);
      }
      int got = 0;
      MPI_Get_count(&st, MPI_BYTE, &got);
      char detail[96];
      snprintf(detail, sizeof detail, "%zu bytes: count %d, data %s", n, got,
               matches(rbuf, n, peer, (int)k) ? "ok" : "wrong");
      check(got == (int)n && matches(rbuf, n, peer, (int)k), "send/recv", detail);
      ok = ok && got == (int)n && matches(rbuf, n, peer, (int)k);
    }
  }
  check_all(ok, "send/recv, 1 B to 4 MiB, both ways, data checked");

  /* 64 messages of 16 KiB in flight each way at once. */
  ok = 1;
  if (peer < size) {
    enum { kMsgs = 64, kLen = 16384 };
    unsigned char *out = malloc((size_t)kMsgs * kLen), *in = malloc((size_t)kMsgs * kLen);
    MPI_Request req[2 * kMsgs];
    for (int i = 0; i < kMsgs; ++i) {
      fill(out + (size_t)i * kLen, kLen, rank, 100 + i);
      MPI_Irecv(in + (size_t)i * kLen, kLen, MPI_BYTE, peer, 100 + i, MPI_COMM_WORLD, &req[i]);
    }
    for (int i = 0; i < kMsgs; ++i)
      MPI_Isend(out + (size_t)i * kLen, kLen, MPI_BYTE, peer, 100 + i, MPI_COMM_WORLD, &req[kMsgs + i]);
    MPI_Waitall(2 * kMsgs, req, MPI_STATUSES_IGNORE);
    for (int i = 0; i < kMsgs; ++i) ok = ok && matches(in + (size_t)i * kLen, kLen, peer, 100 + i);
    check(ok, "isend/irecv x64", "a message's data");
    free(out);
    free(in);
  }
  check_all(ok, "64 isend/irecv of 16 KiB in flight each way, each matched by tag, data checked");

  /* Around the ring: each rank sends to the next and receives from the previous. */
  {
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    const size_t n = 100000;
    fill(sbuf, n, rank, 7);
    MPI_Sendrecv(sbuf, (int)n, MPI_BYTE, next, 7, rbuf, (int)n, MPI_BYTE, prev, 7, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    check_all(matches(rbuf, n, prev, 7), "sendrecv around the ring, 100000 bytes");
  }

  /* Wildcards: rank 0 takes one message from every other rank in whatever order they come. */
  {
    ok = 1;
    if (rank == 0) {
      unsigned seen = 0;
      for (int i = 1; i < size; ++i) {
        MPI_Status st;
        int n = 0;
        MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_BYTE, &n);
        MPI_Recv(rbuf, n, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        ok = ok && st.MPI_TAG == 500 + st.MPI_SOURCE && n == 1000 + st.MPI_SOURCE &&
             matches(rbuf, (size_t)n, st.MPI_SOURCE, 5);
        seen |= 1u << (st.MPI_SOURCE & 31);
      }
      ok = ok && (size == 1 || seen != 0);
    } else {
      fill(sbuf, 1000 + (size_t)rank, rank, 5);
      MPI_Send(sbuf, 1000 + rank, MPI_BYTE, 0, 500 + rank, MPI_COMM_WORLD);
    }
    check_all(ok, "probe and receive with MPI_ANY_SOURCE/MPI_ANY_TAG: source, tag, count and data");
  }
  free(sbuf);
  free(rbuf);
}

static void collectives(void) {
  MPI_Barrier(MPI_COMM_WORLD);
  check_all(1, "barrier");

  /* bcast from the last rank, small and large. */
  {
    const size_t sizes[] = {8, 1 << 20};
    for (int k = 0; k < 2; ++k) {
      const size_t n = sizes[k];
      unsigned char *b = malloc(n);
      if (rank == size - 1) fill(b, n, size - 1, 20 + k);
      else memset(b, 0, n);
      MPI_Bcast(b, (int)n, MPI_BYTE, size - 1, MPI_COMM_WORLD);
      char what[64];
      snprintf(what, sizeof what, "bcast of %zu bytes from rank %d", n, size - 1);
      check_all(matches(b, n, size - 1, 20 + k), what);
      free(b);
    }
  }

  /* allreduce: element i of rank r is r * 1000 + i; the sum over ranks is known. */
  {
    const int n = 1 << 20;
    int *vi = malloc(sizeof(int) * n), *si = malloc(sizeof(int) * n);
    double *vd = malloc(sizeof(double) * n), *sd = malloc(sizeof(double) * n);
    for (int i = 0; i < n; ++i) {
      vi[i] = rank * 1000 + (i % 100000);
      vd[i] = rank + i * 0.5;
    }
    MPI_Allreduce(vi, si, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(vd, sd, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    const long rank_sum = (long)size * (size - 1) / 2;
    int ok = 1;
    for (int i = 0; i < n && ok; ++i) {
      ok = si[i] == (int)(rank_sum * 1000 + (long)size * (i % 100000)) &&
           sd[i] == (double)rank_sum + size * (i * 0.5);
    }
    check_all(ok, "allreduce (sum) of 1 M ints and 1 M doubles");
    /* reduce to rank 0: the maximum. */
    int mine = rank * 3 + 1, max = -1;
    MPI_Reduce(&mine, &max, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
    check_all(rank != 0 || max == (size - 1) * 3 + 1, "reduce (max) to rank 0");
    free(vi);
    free(si);
    free(vd);
    free(sd);
  }

  /* allgather and alltoall: block j from rank r says (r, j). */
  {
    const int block = 20000;
    unsigned char *out = malloc((size_t)block * size), *in = malloc((size_t)block * size);
    fill(out, block, rank, 30);
    MPI_Allgather(out, block, MPI_BYTE, in, block, MPI_BYTE, MPI_COMM_WORLD);
    int ok = 1;
    for (int r = 0; r < size; ++r) ok = ok && matches(in + (size_t)r * block, block, r, 30);
    check_all(ok, "allgather, 20000 bytes per rank");
    for (int j = 0; j < size; ++j) fill(out + (size_t)j * block, block, rank, 40 + j);
    MPI_Alltoall(out, block, MPI_BYTE, in, block, MPI_BYTE, MPI_COMM_WORLD);
    ok = 1;
    for (int r = 0; r < size; ++r) ok = ok && matches(in + (size_t)r * block, block, r, 40 + rank);
    check_all(ok, "alltoall, 20000 bytes per pair");
    free(out);
    free(in);
  }
}

static void one_sided(void) {
  const int n = 1 << 16; /* ints per rank's window */
  int *base = NULL;
  MPI_Win win;
  MPI_Win_allocate((MPI_Aint)n * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  int *mine = malloc(sizeof(int) * n), *got = malloc(sizeof(int) * n);

  /* put under fences: each rank writes its block into the next rank's window. */
  for (int i = 0; i < n; ++i) base[i] = -1;
  for (int i = 0; i < n; ++i) mine[i] = rank * 100000 + i;
  MPI_Win_fence(0, win);
  MPI_Put(mine, n, MPI_INT, next, 0, n, MPI_INT, win);
  MPI_Win_fence(0, win);
  int ok = 1;
  for (int i = 0; i < n && ok; ++i) ok = base[i] == prev * 100000 + i;
  check_all(ok, "put (fence), 256 KiB into the next rank's window");

  /* get under fences: read the next rank's window back (it holds what its previous rank put). */
  memset(got, 0, sizeof(int) * n);
  MPI_Win_fence(0, win);
  MPI_Get(got, n, MPI_INT, next, 0, n, MPI_INT, win);
  MPI_Win_fence(0, win);
  ok = 1;
  for (int i = 0; i < n && ok; ++i) ok = got[i] == rank * 100000 + i;
  check_all(ok, "get (fence), 256 KiB from the next rank's window");

  /* accumulate: every rank adds (r + 1) * i into rank 0's first 1000 ints. */
  MPI_Win_fence(0, win);
  if (rank == 0)
    for (int i = 0; i < 1000; ++i) base[i] = 0;
  MPI_Win_fence(0, win);
  for (int i = 0; i < 1000; ++i) mine[i] = (rank + 1) * i;
  MPI_Accumulate(mine, 1000, MPI_INT, 0, 0, 1000, MPI_INT, MPI_SUM, win);
  MPI_Win_fence(0, win);
  ok = 1;
  if (rank == 0)
    for (int i = 0; i < 1000 && ok; ++i) ok = base[i] == size * (size + 1) / 2 * i;
  check_all(ok, "accumulate (sum) from every rank into rank 0");
  MPI_Win_fence(0, win);

  /* Passive target: lock the next rank's window, put, unlock; then the owner reads it. */
  MPI_Win_lock(MPI_LOCK_EXCLUSIVE, next, 0, win);
  for (int i = 0; i < 100; ++i) mine[i] = 7000000 + rank * 1000 + i;
  MPI_Put(mine, 100, MPI_INT, next, 2000, 100, MPI_INT, win);
  MPI_Win_unlock(next, win);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win);
  ok = 1;
  for (int i = 0; i < 100 && ok; ++i) ok = base[2000 + i] == 7000000 + prev * 1000 + i;
  MPI_Win_unlock(rank, win);
  check_all(ok, "lock/put/unlock (passive target) into the next rank");

  /* Atomics on rank 0's int 3000: each rank adds 1 ten times (fetch_and_op), then each tries
   * one compare_and_swap from the known total to the total + 100 + rank: exactly one wins. */
  MPI_Win_fence(0, win);
  if (rank == 0) base[3000] = 0;
  MPI_Win_fence(0, win);
  MPI_Win_lock_all(0, win);
  int one = 1, before = -1, prior_max = -1;
  for (int i = 0; i < 10; ++i) {
    MPI_Fetch_and_op(&one, &before, MPI_INT, 0, 3000, MPI_SUM, win);
    MPI_Win_flush(0, win);
    if (before > prior_max) prior_max = before;
  }
  MPI_Win_unlock_all(win);
  MPI_Barrier(MPI_COMM_WORLD);
  int total = -1;
  MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
  MPI_Get(&total, 1, MPI_INT, 0, 3000, 1, MPI_INT, win);
  MPI_Win_unlock(0, win);
  check_all(total == 10 * size && prior_max >= 9 && prior_max < 10 * size,
            "fetch_and_op: 10 atomic adds from every rank, each saw an earlier value");
  MPI_Barrier(MPI_COMM_WORLD);
  int expect = 10 * size, desired = 10 * size + 100 + rank, result = -1;
  MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
  MPI_Compare_and_swap(&desired, &expect, &result, MPI_INT, 0, 3000, win);
  MPI_Win_unlock(0, win);
  int won = result == 10 * size, winners = 0;
  MPI_Allreduce(&won, &winners, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
  MPI_Get(&total, 1, MPI_INT, 0, 3000, 1, MPI_INT, win);
  MPI_Win_unlock(0, win);
  check_all(winners == 1 && total >= 10 * size + 100 && total < 10 * size + 100 + size,
            "compare_and_swap: exactly one rank wins, the value is its");

  MPI_Win_free(&win);
  free(mine);
  free(got);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2) {
    if (rank == 0) fprintf(stderr, "mpi_check: run with 2 or more ranks\n");
    MPI_Finalize();
    return 2;
  }
  point_to_point();
  collectives();
  one_sided();
  int all = 0;
  MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("mpi_check: %d checks, %d failures\n", checks, all);
  MPI_Finalize();
  return all == 0 ? 0 : 1;
}
