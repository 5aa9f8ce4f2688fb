/*
 * ncclrec.c: several real NCCL ranks in processes of their own, each pattern ncclprof must keep
 * whole, and what each rank issued written down as the truth a replay must give.
 *
 *   ncclrec NRANKS OUTDIR [ITERS]
 *
 * Needs one CUDA GPU and NCCL >= 2.30.3 (several ranks on one GPU: NCCL_MULTI_RANK_GPU_ENABLE=1,
 * src/init.cc). record.sh builds it, forces the network path and chains the recording plugin
 * behind ncclprof; this program only runs NCCL. Every rank writes OUTDIR/truth-<rank>.json: per
 * pattern, the calls it made (function, count, element size, how many times, on which
 * communicator), so a test can hold ncclprof's figures from the recorded calls against it.
 *
 * Patterns whose setup can be refused (buffer registration, symmetric windows) are run only
 * when every rank's setup succeeded (decided together through shared memory: one rank running a
 * collective alone would hang the others), and the truth says which ran.
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAXR 16

/* Shared between the ranks (one anonymous shared mapping made before the fork). */
struct shared {
  pthread_barrier_t bar;
  ncclUniqueId id;
  int ok[MAXR];
};

static struct shared* sh;
static int rank, nranks, iters;
static FILE* truth;
static int ntruth;

static void die(const char* what, const char* err) {
  fprintf(stderr, "ncclrec rank %d: %s: %s\n", rank, what, err);
  exit(1);
}
#define CU(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) die(#x, cudaGetErrorString(e_)); } while (0)
#define NC(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess && r_ != ncclInProgress) die(#x, ncclGetErrorString(r_)); } while (0)

static void barrier(void) { pthread_barrier_wait(&sh->bar); }

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

/* Whether every rank's setup step succeeded: each says its own, then all read all. */
static int all_ok(int mine) {
  sh->ok[rank] = mine;
  barrier();
  int all = 1;
  for (int r = 0; r < nranks; r++) all &= sh->ok[r];
  barrier();
  return all;
}

/* One truth line: `times` calls of `func` with `count` elements of `esize` bytes. */
static void said(const char* pattern, const char* comm, const char* func, size_t count, int esize,
                 int times, const char* note) {
  fprintf(truth, "%s\n    {\"pattern\": \"%s\", \"comm\": \"%s\", \"func\": \"%s\", \"count\": %zu, "
          "\"esize\": %d, \"times\": %d, \"note\": \"%s\"}", ntruth++ ? "," : "", pattern, comm, func,
          count, esize, times, note);
}

static void wait_comm(ncclComm_t c) { /* a non-blocking communicator's call has finished */
  ncclResult_t st;
  do NC(ncclCommGetAsyncError(c, &st)); while (st == ncclInProgress);
  if (st != ncclSuccess) die("non-blocking call", ncclGetErrorString(st));
}

#define N_BIG (1 << 20)   /* 4 MiB of floats */
#define N_MID (1 << 16)
#define N_SMALL 1024

static float *sendb, *recvb;
static cudaStream_t st;

static void collectives(ncclComm_t c) {
  for (int i = 0; i < iters; i++) NC(ncclAllReduce(sendb, recvb, N_BIG, ncclFloat, ncclSum, c, st));
  said("allreduce", "main", "AllReduce", N_BIG, 4, iters, "");
  for (int i = 0; i < iters; i++) NC(ncclAllReduce(sendb, recvb, N_SMALL, ncclFloat, ncclSum, c, st));
  said("allreduce_small", "main", "AllReduce", N_SMALL, 4, iters, "");
  for (int i = 0; i < iters; i++) NC(ncclBroadcast(sendb, recvb, N_MID, ncclFloat, 0, c, st));
  said("broadcast", "main", "Broadcast", N_MID, 4, iters, "root 0");
  for (int i = 0; i < iters; i++) NC(ncclAllGather(sendb, recvb, N_MID, ncclFloat, c, st));
  said("allgather", "main", "AllGather", N_MID, 4, iters, "count per rank");
  for (int i = 0; i < iters; i++) NC(ncclReduceScatter(sendb, recvb, N_MID, ncclFloat, ncclSum, c, st));
  said("reducescatter", "main", "ReduceScatter", N_MID, 4, iters, "count per rank");
  for (int i = 0; i < iters; i++) NC(ncclAlltoAll(sendb, recvb, N_SMALL, ncclFloat, c, st));
  said("alltoall_api", "main", "AlltoAll", N_SMALL, 4, iters, "count per peer");
  CU(cudaStreamSynchronize(st));
}

static void point_to_point(ncclComm_t c) {
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  for (int i = 0; i < iters; i++) {
    NC(ncclGroupStart());
    NC(ncclSend(sendb, N_MID * 4, ncclFloat, next, c, st));
    NC(ncclRecv(recvb, N_MID * 4, ncclFloat, prev, c, st));
    NC(ncclGroupEnd());
  }
  said("ring", "main", "Send", N_MID * 4, 4, iters, "to rank+1, grouped with the Recv");
  said("ring", "main", "Recv", N_MID * 4, 4, iters, "from rank-1");
  for (int i = 0; i < iters; i++) {
    NC(ncclGroupStart());
    for (int p = 0; p < nranks; p++) {
      NC(ncclSend(sendb + (size_t)p * N_SMALL, N_SMALL, ncclFloat, p, c, st));
      NC(ncclRecv(recvb + (size_t)p * N_SMALL, N_SMALL, ncclFloat, p, c, st));
    }
    NC(ncclGroupEnd());
  }
  said("alltoall_p2p", "main", "Send", N_SMALL, 4, iters * nranks, "one to every rank, itself included");
  said("alltoall_p2p", "main", "Recv", N_SMALL, 4, iters * nranks, "");
  for (int i = 0; i < iters; i++) {
    NC(ncclGroupStart());
    NC(ncclAllReduce(sendb, recvb, N_MID, ncclFloat, ncclSum, c, st));
    NC(ncclAllReduce(sendb + N_MID, recvb + N_MID, N_MID, ncclFloat, ncclSum, c, st));
    NC(ncclGroupEnd());
  }
  said("grouped_colls", "main", "AllReduce", N_MID, 4, 2 * iters, "two per group");
  CU(cudaStreamSynchronize(st));
}

/* An all-to-all and an AllReduce captured once into a CUDA graph, replayed `iters` times. */
static void graph(ncclComm_t c) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CU(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  NC(ncclGroupStart());
  for (int p = 0; p < nranks; p++) {
    NC(ncclSend(sendb + (size_t)p * N_SMALL, N_SMALL, ncclFloat, p, c, st));
    NC(ncclRecv(recvb + (size_t)p * N_SMALL, N_SMALL, ncclFloat, p, c, st));
  }
  NC(ncclGroupEnd());
  NC(ncclAllReduce(sendb, recvb, N_MID, ncclFloat, ncclSum, c, st));
  CU(cudaStreamEndCapture(st, &g));
  CU(cudaGraphInstantiate(&ge, g, 0));
  for (int i = 0; i < iters; i++) CU(cudaGraphLaunch(ge, st));
  CU(cudaStreamSynchronize(st));
  CU(cudaGraphExecDestroy(ge));
  CU(cudaGraphDestroy(g));
  said("graph", "main", "Send", N_SMALL, 4, iters * nranks, "captured once, replayed");
  said("graph", "main", "Recv", N_SMALL, 4, iters * nranks, "captured once, replayed");
  said("graph", "main", "AllReduce", N_MID, 4, iters, "captured once, replayed");
}

static void registered(ncclComm_t c) {
  void *hs = NULL, *hr = NULL;
  int mine = ncclCommRegister(c, sendb, (size_t)N_BIG * 4, &hs) == ncclSuccess &&
             ncclCommRegister(c, recvb, (size_t)N_BIG * 4, &hr) == ncclSuccess;
  if (all_ok(mine)) {
    for (int i = 0; i < iters; i++) NC(ncclAllReduce(sendb, recvb, N_BIG, ncclFloat, ncclSum, c, st));
    CU(cudaStreamSynchronize(st));
    said("registered", "main", "AllReduce", N_BIG, 4, iters, "buffers registered with ncclCommRegister");
  } else said("registered", "main", "AllReduce", N_BIG, 4, 0, "ncclCommRegister refused: not run");
  if (hs) ncclCommDeregister(c, hs);
  if (hr) ncclCommDeregister(c, hr);
}

static void symmetric(ncclComm_t c) {
  size_t bytes = (size_t)N_MID * 4 * MAXR;
  void *s = NULL, *r = NULL;
  ncclWindow_t ws = NULL, wr = NULL;
  int mine = ncclMemAlloc(&s, bytes) == ncclSuccess && ncclMemAlloc(&r, bytes) == ncclSuccess;
  if (all_ok(mine)) {
    mine = ncclCommWindowRegister(c, s, bytes, &ws, NCCL_WIN_COLL_SYMMETRIC) == ncclSuccess &&
           ncclCommWindowRegister(c, r, bytes, &wr, NCCL_WIN_COLL_SYMMETRIC) == ncclSuccess;
    if (all_ok(mine)) {
      for (int i = 0; i < iters; i++) NC(ncclAllReduce(s, r, N_MID, ncclFloat, ncclSum, c, st));
      for (int i = 0; i < iters; i++) NC(ncclAllGather(s, r, N_MID, ncclFloat, c, st));
      CU(cudaStreamSynchronize(st));
      said("symmetric", "main", "AllReduce", N_MID, 4, iters, "symmetric windows");
      said("symmetric", "main", "AllGather", N_MID, 4, iters, "symmetric windows, count per rank");
    } else said("symmetric", "main", "AllReduce", N_MID, 4, 0, "window registration refused: not run");
    if (ws) ncclCommWindowDeregister(c, ws);
    if (wr) ncclCommWindowDeregister(c, wr);
  } else said("symmetric", "main", "AllReduce", N_MID, 4, 0, "ncclMemAlloc refused: not run");
  if (s) ncclMemFree(s);
  if (r) ncclMemFree(r);
}

/* A non-blocking communicator split from c (each call may return ncclInProgress). */
static void nonblocking(ncclComm_t c) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t nb;
  NC(ncclCommSplit(c, 0, rank, &nb, &cfg));
  wait_comm(nb);
  for (int i = 0; i < iters; i++) {
    NC(ncclAllReduce(sendb, recvb, N_MID, ncclFloat, ncclSum, nb, st));
    wait_comm(nb);
  }
  CU(cudaStreamSynchronize(st));
  said("nonblocking", "nonblocking", "AllReduce", N_MID, 4, iters, "split with blocking=0");
  NC(ncclCommFinalize(nb));
  wait_comm(nb);
  NC(ncclCommDestroy(nb));
}

/* Each rank alone in a communicator of one: NCCL reports such collectives by API events only. */
static void solo(ncclComm_t c) {
  ncclComm_t one;
  NC(ncclCommSplit(c, rank, 0, &one, NULL));
  for (int i = 0; i < iters; i++) NC(ncclAllReduce(sendb, recvb, N_MID, ncclFloat, ncclSum, one, st));
  CU(cudaStreamSynchronize(st));
  said("solo", "solo", "AllReduce", N_MID, 4, iters, "a communicator of one rank");
  NC(ncclCommFinalize(one));
  NC(ncclCommDestroy(one));
}

static void run_rank(const char* out) {
  char path[4096];
  snprintf(path, sizeof path, "%s/truth-%d.json", out, rank);
  truth = fopen(path, "w");
  if (!truth) die("open", path);
  CU(cudaSetDevice(0));
  CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  CU(cudaMalloc((void**)&sendb, (size_t)N_BIG * 4 * 2));
  CU(cudaMalloc((void**)&recvb, (size_t)N_BIG * 4 * 2));
  CU(cudaMemset(sendb, 0, (size_t)N_BIG * 4 * 2));
  /* Rank 0 makes the id after the fork: nothing touches CUDA or NCCL before it. */
  if (rank == 0) NC(ncclGetUniqueId(&sh->id));
  barrier();
  ncclComm_t c;
  NC(ncclCommInitRank(&c, nranks, sh->id, rank));
  int v = 0;
  ncclGetVersion(&v);
  fprintf(truth, "{\"rank\": %d, \"nranks\": %d, \"pid\": %d, \"nccl_version\": %d, \"iters\": %d, \"calls\": [",
          rank, nranks, (int)getpid(), v, iters);
  static void (*const steps[])(ncclComm_t) = {collectives, point_to_point, graph, registered,
                                               symmetric, nonblocking, solo};
  static const char* const names[] = {"collectives", "point_to_point", "graph", "registered",
                                      "symmetric", "nonblocking", "solo"};
  enum { NSTEPS = sizeof steps / sizeof steps[0] };
  double took[NSTEPS];
  for (size_t k = 0; k < NSTEPS; k++) {
    barrier();
    if (rank == 0) fprintf(stderr, "ncclrec: %s\n", names[k]);
    double t0 = now_ns();
    steps[k](c); /* each step ends with its stream synchronized */
    took[k] = now_ns() - t0;
  }
  /* How long each step took on this rank, GPU and proxy included (tools/nccl/record/overhead.sh
   * compares them between profiler plugins). */
  fprintf(truth, "\n  ], \"step_ns\": {");
  for (size_t k = 0; k < NSTEPS; k++) fprintf(truth, "%s\"%s\": %.0f", k ? ", " : "", names[k], took[k]);
  fprintf(truth, "}}\n");
  fclose(truth);
  NC(ncclCommFinalize(c));
  NC(ncclCommDestroy(c));
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: ncclrec NRANKS OUTDIR [ITERS]\n");
    return 2;
  }
  nranks = atoi(argv[1]);
  iters = argc > 3 ? atoi(argv[3]) : 20;
  if (nranks < 2 || nranks > MAXR || iters < 1) die("arguments", "NRANKS 2..16, ITERS >= 1");
  sh = (struct shared*)mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) die("mmap", "shared memory");
  pthread_barrierattr_t a;
  pthread_barrierattr_init(&a);
  pthread_barrierattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_barrier_init(&sh->bar, &a, (unsigned)nranks);
  for (int r = 0; r < nranks; r++) {
    pid_t p = fork();
    if (p < 0) die("fork", "");
    if (p == 0) {
      rank = r;
      char log[4096];
      const char* dir = getenv("NCCLREC_LOGDIR"); /* each rank's recorder log of its own */
      if (dir) {
        snprintf(log, sizeof log, "%s/calls-%d.log", dir, r);
        setenv("NCCLPROF_RECORDER_LOG", log, 1);
      }
      /* A host of its own per rank (NCCL_HOSTID, src/misc/utils.cc getHostHash): NCCL then sees
       * one GPU per node and connects the ranks through the network, never P2P on the GPU. */
      if (getenv("NCCLREC_SEPARATE_HOSTS")) {
        snprintf(log, sizeof log, "ncclrec-host-%d", r);
        setenv("NCCL_HOSTID", log, 1);
      }
      run_rank(argv[2]);
      return 0;
    }
  }
  int failed = 0, status;
  while (wait(&status) > 0) failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  return failed;
}
