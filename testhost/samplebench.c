/*
 * samplebench.c — what sampled tracing (NCCLPROF_TRACE_SAMPLE=N) costs: per callback against
 * metrics only, and on disk.
 *
 * The plugin reads N once, when its first communicator starts, so each N is measured in a
 * process of its own: this scenario runs itself again once per N (0: metrics only, 1, 100,
 * 10000), and each child measures, alternating in one process as the main bench does, the floor
 * (the empty plugin plus one TSC read per callback) and ncclprof with the default mask and with
 * every event type, on the bench's AllReduce (bench.c). A ratio to the floor is taken inside one
 * process; the ratio of N to metrics only is the ratio of two such ratios.
 *
 * Disk: one more child traces every operation (N = 1) of a larger AllReduce (--channels 4 x
 * --steps 16 per ProxyOp by default), and reports the trace's bytes per operation traced; the
 * disk per hour of a job is that times the operations it would trace (the model is printed
 * with the numbers).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../profiler/core.h"
#include "scenarios.h"

static const unsigned sb_every[] = {0, 1, 100, 10000};
#define SB_N (int)(sizeof sb_every / sizeof sb_every[0])
#define SB_ROUNDS 3 /* processes per N */

/* The job the disk figure is extrapolated to: 8 ranks, a 10 ms training step with 50
 * AllReduces, each of 4 channels x 16 steps per ProxyOp. */
#define MODEL_RANKS 8
#define MODEL_STEP_S 0.010
#define MODEL_OPS_PER_STEP 50

/* One child: floor and ncclprof alternating; prints one JSON line. */
static int child_cost(const opts* o) {
  setenv("NCCLPROF_WINDOW_SLOTS", "16384", 0); /* both sets (operation, detail) within the 32 MiB cap */
  /* At N = 1 every operation is written (gigabytes over the run): rotation keeps 64 MiB. The
   * trigger is off: on a busy machine a preempted thread makes an operation "slow" now and
   * then, and the K operations it traces would blur what N costs (a triggered operation costs
   * what one at N = 1 does). */
  setenv("NCCLPROF_TRACE_MAX_MB", "64", 0);
  setenv("NCCLPROF_TRACE_TRIGGER", "off", 0);
  bench_descriptors();
  bench_lib empty, prof;
  open_lib(&empty, o->empty_lib, "bench-empty");
  open_lib(&prof, o->lib, "bench-ncclprof");
  int reps = o->reps >= 1 ? o->reps : 1;
  if (reps > 64) reps = 64;
  const int bursts = 10, per = 1000, channels = 2;
  double floor_cb[64], def_cb[64], all_cb[64];
  for (int rep = 0; rep < reps; rep++) {
    empty.mask = NPABI_ALL_TYPES;
    run r = run_one(&empty, channels, bursts, per, 1);
    floor_cb[rep] = r.ns / (double)r.callbacks;
    prof.mask = BENCH_DEFAULT_MASK;
    prof.set_mask(prof.mask);
    r = run_one(&prof, channels, bursts, per, 0);
    def_cb[rep] = r.ns / (double)r.callbacks;
    prof.mask = NPABI_ALL_TYPES;
    prof.set_mask(prof.mask);
    r = run_one(&prof, channels, bursts, per, 0);
    all_cb[rep] = r.ns / (double)r.callbacks;
  }
  prof.t->finalize(prof.ctx); /* the drainer has processed and written everything */
  uint64_t st[NP_S_COUNT] = {0}, c[NP_C_COUNT] = {0};
  prof.stats(st, NP_S_COUNT);
  prof.counters(c, NP_C_COUNT);
  double fl = median(floor_cb, reps), d = median(def_cb, reps), a = median(all_cb, reps);
  printf("{\"ns_per_callback_floor\":%.2f,\"ns_per_callback_default\":%.2f,"
         "\"ns_per_callback_all\":%.2f,\"ratio_default_vs_floor\":%.3f,\"ratio_all_vs_floor\":%.3f,"
         "\"ops_traced\":%llu,\"ops_sampled_away\":%llu,\"triggers\":%llu,\"trace_files\":%llu,"
         "\"dropped\":%llu}\n",
         fl, d, a, d / fl, a / fl, (unsigned long long)st[NP_S_SAMPLED_OPS],
         (unsigned long long)st[NP_S_SAMPLED_AWAY], (unsigned long long)st[NP_S_SAMPLED_TRIGGERS],
         (unsigned long long)st[NP_S_SAMPLED_FILES],
         (unsigned long long)(c[NP_C_DROPPED_FULL] + c[NP_C_DROPPED_DETAIL] + c[NP_C_DROPPED_THREADS]));
  return 0;
}

/* The disk child: every operation traced, bytes per operation. */
static int child_disk(const opts* o) {
  setenv("NCCLPROF_WINDOW_SLOTS", "16384", 0); /* both sets (operation, detail) within the 32 MiB cap */
  bench_steps = o->steps > 0 ? o->steps : 16;
  int channels = o->channels > 2 ? o->channels : 4;
  bench_descriptors();
  bench_lib prof;
  open_lib(&prof, o->lib, "bench-disk");
  prof.mask = BENCH_DEFAULT_MASK;
  prof.set_mask(prof.mask);
  run r = run_one(&prof, channels, 5, 100, 0);
  prof.t->finalize(prof.ctx);
  uint64_t st[NP_S_COUNT] = {0};
  prof.stats(st, NP_S_COUNT);
  double ops = (double)st[NP_S_SAMPLED_OPS], bytes = (double)st[NP_S_SAMPLED_BYTES];
  printf("{\"channels\":%d,\"steps\":%d,\"collectives\":%llu,\"ops_traced\":%.0f,\"bytes\":%.0f,"
         "\"bytes_per_op\":%.1f,\"files_deleted\":%llu}\n",
         channels, bench_steps, (unsigned long long)r.collectives, ops, bytes,
         ops > 0 ? bytes / ops : 0, (unsigned long long)st[NP_S_SAMPLED_DELETED]);
  return 0;
}

/* Runs this scenario again as a child with `every` and `role`; its JSON line goes to out. */
static int run_child(const opts* o, unsigned every, const char* role, char* out, size_t cap) {
  int pipefd[2];
  if (pipe(pipefd) != 0) return -1;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    dup2(pipefd[1], 1);
    close(pipefd[0]);
    close(pipefd[1]);
    char n[16];
    snprintf(n, sizeof n, "%u", every);
    if (every) setenv("NCCLPROF_TRACE_SAMPLE", n, 1);
    else unsetenv("NCCLPROF_TRACE_SAMPLE");
    setenv("NCCLPROF_BENCH_SAMPLE_CHILD", role, 1);
    char reps[16], ch[16], steps[16];
    snprintf(reps, sizeof reps, "%d", o->reps);
    snprintf(ch, sizeof ch, "%d", o->channels);
    snprintf(steps, sizeof steps, "%d", o->steps);
    execl("/proc/self/exe", "ncclprof-testhost", "--lib", o->lib, "--empty-lib", o->empty_lib,
          "--reps", reps, "--channels", ch, "--steps", steps, "bench-sample", (char*)NULL);
    _exit(127);
  }
  close(pipefd[1]);
  size_t n = 0;
  for (ssize_t k; n + 1 < cap && (k = read(pipefd[0], out + n, cap - 1 - n)) > 0;) n += (size_t)k;
  out[n] = 0;
  close(pipefd[0]);
  int status;
  waitpid(pid, &status, 0);
  while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' ')) out[--n] = 0;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 && n > 0 ? 0 : -1;
}

static double json_num(const char* js, const char* key) {
  char k[64];
  snprintf(k, sizeof k, "\"%s\":", key);
  const char* p = strstr(js, k);
  return p ? atof(p + strlen(k)) : 0;
}

/* A figure of N's children: the median over its rounds. */
static double med_of(char res[][1024], int rounds, const char* key) {
  double v[SB_ROUNDS];
  for (int r = 0; r < rounds; r++) v[r] = json_num(res[r], key);
  return median(v, rounds);
}

int scenario_bench_sample(const opts* o) {
  const char* role = getenv("NCCLPROF_BENCH_SAMPLE_CHILD");
  if (role && !strcmp(role, "cost")) return child_cost(o);
  if (role && !strcmp(role, "disk")) return child_disk(o);
  /* Each N runs SB_ROUNDS times, the order of N turned every round, so a process that happens to
   * start on a slow moment (or the first one, on some VMs) does not bias one N. */
  static char res[SB_N][SB_ROUNDS][1024];
  char disk[1024];
  for (int r = 0; r < SB_ROUNDS; r++)
    for (int k = 0; k < SB_N; k++) {
      int i = (k + r) % SB_N;
      if (run_child(o, sb_every[i], "cost", res[i][r], sizeof res[i][r]) != 0) {
        fprintf(stderr, "bench-sample: the child for N=%u failed\n", sb_every[i]);
        return 1;
      }
    }
  if (run_child(o, 1, "disk", disk, sizeof disk) != 0) {
    fprintf(stderr, "bench-sample: the disk child failed\n");
    return 1;
  }
  static const char* const keys[] = {"ns_per_callback_floor", "ns_per_callback_default",
                                     "ns_per_callback_all", "ratio_default_vs_floor",
                                     "ratio_all_vs_floor"};
  double m[SB_N][5];
  printf("{\"scenario\":\"bench-sample\",\"reps\":%d,\"rounds\":%d,\"configs\":{", o->reps, SB_ROUNDS);
  for (int i = 0; i < SB_N; i++) {
    if (sb_every[i]) printf(",\"sample_%u\":{", sb_every[i]);
    else printf("\"metrics_only\":{");
    for (int k = 0; k < 5; k++) {
      m[i][k] = med_of(res[i], SB_ROUNDS, keys[k]);
      printf("\"%s\":%.3f,", keys[k], m[i][k]);
    }
    printf("\"last_round\":%s}", res[i][SB_ROUNDS - 1]);
  }
  /* Two views of N against metrics only, across processes: the ratio of the two processes'
   * ratios to their own floor, and the plain ratio of ncclprof's ns per callback (which holds
   * when the floor itself wanders, as on a busy machine). */
  printf("},\"ratio_vs_metrics_only\":{");
  for (int i = 1; i < SB_N; i++)
    printf("%s\"sample_%u\":{\"default\":%.3f,\"all\":%.3f,\"default_ns\":%.3f,\"all_ns\":%.3f}",
           i > 1 ? "," : "", sb_every[i], m[i][3] / m[0][3], m[i][4] / m[0][4], m[i][1] / m[0][1],
           m[i][2] / m[0][2]);
  double per_op = json_num(disk, "bytes_per_op");
  double ops_h = MODEL_OPS_PER_STEP * 3600.0 / MODEL_STEP_S; /* per rank */
  printf("},\"disk\":%s,\"disk_model\":{\"ranks\":%d,\"step_s\":%.3f,\"allreduces_per_step\":%d,"
         "\"ops_per_hour_per_rank\":%.0f,\"gb_per_hour_all_ranks\":{",
         disk, MODEL_RANKS, MODEL_STEP_S, MODEL_OPS_PER_STEP, ops_h);
  for (int i = 1; i < SB_N; i++)
    printf("%s\"sample_%u\":%.3f", i > 1 ? "," : "", sb_every[i],
           ops_h / sb_every[i] * per_op * MODEL_RANKS / 1e9);
  printf("}}}\n");
  return 0;
}
