/*
 * job.c — the demo's job (`ncclmerge demo`): ranks, one process each, that wait for each other
 * as a real job's do, with one planted straggler.
 *
 * Every rank is started with the same --seed and --sync FILE, a new empty file that all ranks
 * grow to the same size and map: a start handshake (the last rank to start sets the start time
 * for all) and, per operation, how many ranks have arrived. Operation i has a slot in the
 * schedule; each rank sleeps until its arrival — the slot, plus a jitter of up to 30 µs drawn
 * from (seed, i, rank), plus --slow-us on every operation of the odd steps for --slow-rank — then
 * calls ncclAllReduce as NCCL 2.29 reports it (launch_group: API events, KernelLaunch, Group,
 * Coll, ProxyOps with timed steps, KernelCh) and counts itself arrived. Its proxy thread starts
 * the network work only once every rank has arrived (run_job waits on the count), so the
 * collective ends on every rank after the last arrival, as a ring does. Steps of JOB_STEP_OPS
 * operations are labelled "step N" with ncclprof_set_step. For ncclmerge why's demo, a rank may
 * also have its GPU start one operation late while its CPU calls on time (--gpu-late-op: its
 * KernelCh starts late and the others' network work waits for it), or its sends of one
 * operation run slow (--net-slow-op).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "scenarios.h"
#include "world.h"

#define JOB_STEP_OPS 5     /* operations per training step */
#define JOB_JITTER_NS 30e3 /* arrivals of ranks that are on time spread this much */

/* The shared file: start handshake, then one arrival count per operation. */
typedef struct job_sync {
  uint64_t start_ns; /* CLOCK_REALTIME of operation 0's slot; 0 until the last rank started */
  uint32_t ready;    /* ranks started */
  uint32_t pad;
  uint32_t arrived[]; /* per operation: ranks that have called it */
} job_sync;

static const size_t job_counts[] = {1 << 14, 1 << 16, 1 << 18, 1 << 20}; /* float32 elements */

static void sleep_until_real(uint64_t at) {
  struct timespec ts = {.tv_sec = (time_t)(at / 1000000000ull), .tv_nsec = (long)(at % 1000000000ull)};
  while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}


/* Maps the shared file, growing it (with zeros) to its size. Ranks that grow it at once set the
 * same size, which never discards what another rank wrote. */
static job_sync* map_sync(const char* path, int iters) {
  size_t bytes = sizeof(job_sync) + sizeof(uint32_t) * (size_t)iters;
  int fd = open(path, O_RDWR | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || ((size_t)st.st_size < bytes && ftruncate(fd, (off_t)bytes) != 0)) {
    fprintf(stderr, "testhost job: --sync %s: %s (it must be a new, empty file shared by all ranks)\n", path,
            strerror(errno));
    exit(2);
  }
  void* m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) {
    perror("testhost job: mmap");
    exit(2);
  }
  return m;
}

/* Every rank waits here until all have started; the last one sets the start for all, far
 * enough ahead for the others to wake. */
static uint64_t start_together(job_sync* s, int nranks) {
  if ((int)__atomic_add_fetch(&s->ready, 1, __ATOMIC_ACQ_REL) == nranks)
    __atomic_store_n(&s->start_ns, (uint64_t)real_ns_i() + 200000000ull, __ATOMIC_RELEASE);
  job_barrier_wait(&s->ready, nranks);
  uint64_t t;
  while ((t = __atomic_load_n(&s->start_ns, __ATOMIC_ACQUIRE)) == 0) {
    struct timespec nap = {0, 20000};
    nanosleep(&nap, NULL);
  }
  return t;
}

static int slow_step(const opts* o, int step) { return o->slow_rank >= 0 && step % 2 == 1; }

/* Operation i's arrival on this rank, ns after the start. Each slot holds the latest arrival
 * plus a few ms for the operation itself. */
static double arrival_ns(const opts* o, int i) {
  double slot = o->slow_us * 1e3 + 4e6;
  double jitter = (double)(mix64(mix64(o->seed ^ mix64((uint64_t)i)) ^ (uint64_t)o->rank) >> 11) / 9007199254740992.0;
  double t = (double)i * slot + jitter * JOB_JITTER_NS;
  if (o->rank == o->slow_rank && slow_step(o, i / JOB_STEP_OPS)) t += o->slow_us * 1e3;
  return t;
}

void scenario_job(const opts* o) {
  if (!o->sync || o->nranks < 2) {
    fprintf(stderr, "testhost job: needs --sync FILE and --nranks >= 2\n");
    exit(2);
  }
  job_sync* s = map_sync(o->sync, o->iters);
  hcomm* c = world_comm("world", 0xD3E0000000000000ull + (uint64_t)o->seed, o->nranks, o->rank, 1);
  int (*set_step)(const char*) = (int (*)(const char*))dlsym(W.plugin.lib, "ncclprof_set_step");
  proxy_start();
  uint64_t start = start_together(s, o->nranks);
  for (int i = 0; i < o->iters; i++) {
    uint64_t at = start + (uint64_t)arrival_ns(o, i);
    if (i % JOB_STEP_OPS == 0 && set_step) {
      char label[32];
      sleep_until_real(at - 200000); /* the step's work begins a little before its first collective */
      snprintf(label, sizeof label, "step %d", i / JOB_STEP_OPS);
      set_step(label);
    }
    sleep_until_real(at);
    op_spec op = {.func = "AllReduce", .count = job_counts[i % 4], .dtype = "ncclFloat32", .algo = "RING",
                  .proto = "SIMPLE", .nchannels = o->channels, .kernel = o->kernel, .chunk = 256 * 1024};
    if (i == o->gpu_late_op) op.gpu_delay_ns = o->slow_us * 1e3;
    if (i == o->net_slow_op) op.send_slow_ns = o->slow_us * 1e3 / o->channels;
    W.op_barrier = &s->arrived[i]; /* this operation's network work waits for every rank */
    launch_group(c, &op, 1, 1);
    W.op_barrier = NULL;
    /* A GPU that is behind arrives when its kernel starts: the other ranks wait until then. */
    if (op.gpu_delay_ns > 0) sleep_until_real(at + (uint64_t)op.gpu_delay_ns);
    __atomic_add_fetch(&s->arrived[i], 1, __ATOMIC_ACQ_REL); /* after its Coll start was recorded */
  }
  proxy_stop();
}
