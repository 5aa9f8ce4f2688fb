//go:build ncclprof_front

/*
 * core.c — everything around the hot path that is not per-callback: configuration, the
 * communicator table, thread registration, window rotation, state semantics, and the
 * drainer's side of the window protocol (poll, export, release). See core.h for the design.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "chain.h"
#include "hot.h"

np_comm np_comms[NP_MAX_COMMS] __attribute__((aligned(64)));
np_thread np_threads[NP_MAX_THREADS] __attribute__((aligned(64)));
__thread np_thread* np_tls __attribute__((tls_model("initial-exec")));
int np_clock = NP_CLOCK_MONO;
int np_fence_mode = 1;
uint32_t np_record_mask;
uint32_t np_detail_on;
uint64_t np_coarse_tsc;
uint32_t np_sample_n;
uint64_t np_dropped_type[NP_T_COUNT];
uint64_t np_trace_dropped_type[NP_T_COUNT];
static int np_mask_from_api; /* ncclprof_set_event_mask was called: its mask stays in force */
pid_t np_pid;
np_config np_cfg;
uint64_t np_counters[NP_C_COUNT];

static uint32_t np_threads_hwm; /* threads ever attached (scan bound) */
static uint32_t np_comms_hwm;   /* comm indexes ever used (scan bound) */
static pthread_key_t np_thread_key;
static pthread_once_t np_once = PTHREAD_ONCE_INIT;
static sem_t np_sem;
static int np_setup_done;
static npabi_logger_t np_logger; /* the first logger NCCL gave us */
static int* np_mask_ptr;         /* NCCL's process-wide activation mask */
static double np_ticks_per_ns = 3.0; /* refined by the drainer (np_set_tick_rate) */
static uint64_t np_setup_tick;        /* when the first communicator was created */

/* ------------------------------------------------------------------- logging */

void np_log(int level, const char* msg) {
  npabi_logger_t log = __atomic_load_n(&np_logger, __ATOMIC_ACQUIRE);
  if (log) log(level, NPABI_LOGSYS_INIT | NPABI_LOGSYS_PROFILE, "ncclprof", 0, "%s", msg);
  else if (level <= NPABI_LOG_WARN) fprintf(stderr, "ncclprof: %s\n", msg);
}

static void np_logf(int level, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  np_log(level, buf);
}

/* ------------------------------------------------------------------- configuration */

static const struct {
  const char* name;
  uint32_t bits;
} np_mask_names[] = {
    {"group", NPABI_GROUP},          {"coll", NPABI_COLL},
    {"p2p", NPABI_P2P},              {"proxyop", NPABI_PROXY_OP},
    {"proxystep", NPABI_PROXY_STEP}, {"proxyctrl", NPABI_PROXY_CTRL},
    {"kernelch", NPABI_KERNEL_CH},   {"netplugin", NPABI_NET_PLUGIN},
    {"groupapi", NPABI_GROUP_API},   {"collapi", NPABI_COLL_API},
    {"p2papi", NPABI_P2P_API},       {"kernellaunch", NPABI_KERNEL_LAUNCH},
    {"cecoll", NPABI_CE_COLL},       {"cesync", NPABI_CE_SYNC},
    {"cebatch", NPABI_CE_BATCH},     {"all", NPABI_ALL_TYPES},
    {"none", 0},
    /* What the metrics need; KernelCh is opt-in (users report its cost on small messages). */
    {"default", NPABI_GROUP | NPABI_COLL | NPABI_P2P | NPABI_PROXY_OP | NPABI_PROXY_STEP |
                    NPABI_GROUP_API | NPABI_COLL_API | NPABI_P2P_API | NPABI_KERNEL_LAUNCH},
};

/* NCCLPROF_EVENT_MASK: a number (decimal or 0x hex) or names joined by ',', '|' or '+'. */
uint32_t np_parse_mask(const char* s, int* ok) {
  *ok = 1;
  if (s == NULL || *s == 0) return np_mask_names[17].bits;
  char* end;
  unsigned long v = strtoul(s, &end, 0);
  if (end != s && *end == 0) return (uint32_t)v & NPABI_ALL_TYPES;
  uint32_t mask = 0;
  const char* p = s;
  while (*p) {
    while (*p == ',' || *p == '|' || *p == '+' || *p == ' ') p++;
    const char* q = p;
    while (*q && *q != ',' && *q != '|' && *q != '+' && *q != ' ') q++;
    if (q == p) break;
    size_t n = (size_t)(q - p);
    int found = 0;
    for (size_t i = 0; i < sizeof np_mask_names / sizeof np_mask_names[0]; i++) {
      if (strlen(np_mask_names[i].name) == n && strncasecmp(p, np_mask_names[i].name, n) == 0) {
        mask |= np_mask_names[i].bits;
        found = 1;
      }
    }
    if (!found) *ok = 0;
    p = q;
  }
  return mask;
}

/* NCCL starts the events above every type asked for (a ProxyStep's ProxyOp and operation; its
 * profiler.cc at every tag, docs/nccl-api-patterns.md "Masks"), and what ncclprof records counts
 * only under its operation: an orphan step counts nowhere. So the operations and ProxyOps above
 * what is asked for are recorded too. NCCL 2.23–2.25 (ABI v1, v2) start P2p events only under
 * the Coll, ProxyOp or ProxyStep bit, not P2p's own: there P2p alone also asks for Coll. */
uint32_t np_mask_ancestors(uint32_t m, int abi) {
  if (m & NPABI_NET_PLUGIN) m |= NPABI_PROXY_STEP;
  if (m & NPABI_PROXY_STEP) m |= NPABI_PROXY_OP;
  if (m & (NPABI_PROXY_OP | NPABI_KERNEL_CH)) m |= NPABI_COLL | NPABI_P2P;
  if (abi <= 2 && (m & NPABI_P2P) && !(m & (NPABI_COLL | NPABI_PROXY_OP | NPABI_PROXY_STEP)))
    m |= NPABI_COLL;
  return m;
}

static uint64_t np_env_u64(const char* name, uint64_t def, uint64_t lo, uint64_t hi) {
  const char* s = getenv(name);
  if (s == NULL || *s == 0) return def;
  char* end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 0);
  /* strtoull accepts a sign and wraps: "-18446744073709551612" would read as 4 */
  if (end == s || *end != 0 || errno != 0 || strchr(s, '-') || v < lo || v > hi) {
    np_logf(NPABI_LOG_WARN, "%s=%s is not a number in [%llu, %llu]; using %llu", name, s,
            (unsigned long long)lo, (unsigned long long)hi, (unsigned long long)def);
    return def;
  }
  return v;
}

/* Per-communicator memory besides the windows: arena, transfer sums, lost operations. */
static uint64_t np_fixed_bytes(void) {
  return (uint64_t)np_cfg.ncells * sizeof(np_cell) + NP_XFER_BUCKETS * sizeof(np_xbucket) +
         NP_LOST_KEYS * sizeof(np_lost) + NP_RETIRE_RING * sizeof(uint64_t);
}

static void np_read_config(void) {
  const char* en = getenv("NCCLPROF_ENABLE");
  np_cfg.disabled = en != NULL && (strcmp(en, "0") == 0 || strcasecmp(en, "false") == 0);
  int ok;
  const char* m = getenv("NCCLPROF_EVENT_MASK");
  np_cfg.mask = np_parse_mask(m, &ok);
  if (!ok) {
    np_cfg.mask = np_parse_mask(NULL, &ok);
    np_logf(NPABI_LOG_WARN,
            "NCCLPROF_EVENT_MASK=%s is not understood (use names such as default,kernelch or "
            "coll|p2p, or a number); using the default mask 0x%x", m, np_cfg.mask);
  }
  np_cfg.nwin = (uint32_t)np_env_u64("NCCLPROF_WINDOWS", 4, 2, NP_MAX_WINDOWS);
  np_cfg.nslots = (uint32_t)np_env_u64("NCCLPROF_WINDOW_SLOTS", 4096, 256, NP_MAX_SLOTS);
  /* In-flight ProxyOps and ProxySteps: NCCL keeps at most NCCL_STEPS (8) steps in flight per
   * ProxyOp, so the arena bounds how many ProxyOps can progress at once, not an event rate. */
  uint64_t cells = np_env_u64("NCCLPROF_INFLIGHT_CELLS", 8192, 256, NP_MAX_CELLS);
  np_cfg.ncells = 256;
  while (np_cfg.ncells < cells) np_cfg.ncells <<= 1;
  /* Both window sets (operation and detail) count against the cap. */
  uint64_t fixed = np_fixed_bytes(), win = 2ull * np_cfg.nwin * np_cfg.nslots * NP_SLOT_BYTES;
  if (fixed + win > NP_MAX_COMM_BYTES) {
    uint32_t fit = (uint32_t)((NP_MAX_COMM_BYTES - fixed) / NP_SLOT_BYTES / np_cfg.nwin / 2);
    np_logf(NPABI_LOG_WARN,
            "NCCLPROF_WINDOWS x NCCLPROF_WINDOW_SLOTS needs %llu MiB per communicator (two "
            "window sets), over the 32 MiB cap; using %u slots per window",
            (unsigned long long)((fixed + win) >> 20), fit);
    np_cfg.nslots = fit;
  }
  np_cfg.block = np_cfg.nslots >= 4096 ? 16 : 4;
  np_cfg.trigger = np_cfg.nslots / 4 * 3;
  np_cfg.window_ns = np_env_u64("NCCLPROF_WINDOW_MS", 1000, 1, 3600000) * 1000000ull;
  /* Waiting for a closed window's open events only saves carrying them over (the drainer
   * links across windows), so the waits are short: at least 2 ms for stops already on their
   * way, at most NCCLPROF_GRACE_MS. */
  np_cfg.grace_max_ns = np_env_u64("NCCLPROF_GRACE_MS", 100, 1, 60000) * 1000000ull;
  np_cfg.grace_min_ns = np_cfg.grace_max_ns < 2000000ull ? np_cfg.grace_max_ns : 2000000ull;
  np_cfg.finalize_wait_ns = np_env_u64("NCCLPROF_FINALIZE_TIMEOUT_MS", 5000, 0, 600000) * 1000000ull;
  /* Sampled tracing: 1 in N operations in full (their steps go to the detail windows). */
  np_cfg.sample_every = (uint32_t)np_env_u64("NCCLPROF_TRACE_SAMPLE", 0, 1, 1u << 30);
  __atomic_store_n(&np_sample_n, np_cfg.sample_every, __ATOMIC_RELEASE);
  /* A trace of the whole run wants detail from the first event on. */
  const char* tr = getenv("NCCLPROF_TRACE");
  if (tr != NULL && strcmp(tr, "1") == 0) __atomic_store_n(&np_detail_on, 1, __ATOMIC_RELEASE);
  /* A mask set through the control API before the first communicator wins over the variable. */
  if (!__atomic_load_n(&np_mask_from_api, __ATOMIC_ACQUIRE)) np_record_mask = np_cfg.mask;
}

/* ------------------------------------------------------------------- clock */

static int np_tsc_invariant(void) {
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u) return 0;
  __get_cpuid(0x80000007u, &a, &b, &c, &d);
  return (d >> 8) & 1;
#else
  return 0;
#endif
}

static void np_pick_clock(void) {
  const char* want = getenv("NCCLPROF_CLOCK");
  int force_mono = want && strcasecmp(want, "monotonic") == 0;
#if defined(__x86_64__)
  if (!force_mono && (np_tsc_invariant() || (want && strcasecmp(want, "tsc") == 0))) {
    np_clock = NP_CLOCK_TSC;
    return;
  }
  if (!force_mono)
    np_log(NPABI_LOG_INFO, "TSC is not invariant on this CPU; timestamps use CLOCK_MONOTONIC");
#elif defined(__aarch64__)
  if (!force_mono) {
    np_clock = NP_CLOCK_CNTVCT;
    return;
  }
#endif
  np_clock = NP_CLOCK_MONO;
}

uint64_t np_now(void) { return np_ticks(); }
uint64_t np_first_init(void) { return np_setup_tick; }
int np_clock_kind(void) { return np_clock; }

uint64_t np_clock_nominal_hz(void) {
#if defined(__aarch64__)
  if (np_clock == NP_CLOCK_CNTVCT) {
    uint64_t f;
    __asm__ __volatile__("mrs %0, cntfrq_el0" : "=r"(f));
    return f;
  }
#endif
  return np_clock == NP_CLOCK_MONO ? 1000000000ull : 0;
}

void np_clock_sample(uint64_t* before, uint64_t* mono_raw_ns, uint64_t* real_ns, uint64_t* after) {
  struct timespec m, r;
  *before = np_ticks();
  clock_gettime(CLOCK_MONOTONIC_RAW, &m);
  clock_gettime(CLOCK_REALTIME, &r);
  *after = np_ticks();
  *mono_raw_ns = (uint64_t)m.tv_sec * 1000000000ull + (uint64_t)m.tv_nsec;
  *real_ns = (uint64_t)r.tv_sec * 1000000000ull + (uint64_t)r.tv_nsec;
}

void np_set_tick_rate(double ticks_per_ns) {
  if (ticks_per_ns > 0) np_ticks_per_ns = ticks_per_ns;
}

static uint64_t np_ns_to_ticks(uint64_t ns) { return (uint64_t)((double)ns * np_ticks_per_ns); }

/* ------------------------------------------------------------------- threads */

static void np_thread_exit(void* arg) {
  np_thread* t = (np_thread*)arg;
  np_tls = NULL;
  for (int i = 0; i < NP_TCACHE; i++) t->cache[i].epoch = 0;
  __atomic_store_n(&t->used, 0, __ATOMIC_RELEASE);
}

static void np_setup_once(void) {
  np_pid = getpid();
  pthread_key_create(&np_thread_key, np_thread_exit);
  sem_init(&np_sem, 0, 0);
  np_read_config();
  np_pick_clock();
  np_setup_tick = np_ticks();
  np_ticks_per_ns = np_clock == NP_CLOCK_MONO ? 1.0 : np_ticks_per_ns;
#if !defined(NP_TSAN)
  long q = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  if (q > 0 && (q & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
      syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0)
    np_fence_mode = 0;
#endif
  __atomic_store_n(&np_setup_done, 1, __ATOMIC_RELEASE);
}

static void np_setup(void) { pthread_once(&np_once, np_setup_once); }

/* First callback of a thread: take a free per-thread state. Runs once per thread. */
np_thread* np_thread_attach(void) {
  np_setup();
  uint32_t tid = (uint32_t)syscall(SYS_gettid);
  for (uint32_t i = 0; i < NP_MAX_THREADS; i++) {
    uint32_t k = (tid + i) % NP_MAX_THREADS;
    uint32_t expect = 0;
    if (__atomic_load_n(&np_threads[k].used, __ATOMIC_RELAXED) == 0 &&
        __atomic_compare_exchange_n(&np_threads[k].used, &expect, 1, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED)) {
      np_thread* t = &np_threads[k];
      t->tid = tid;
      for (int j = 0; j < NP_TCACHE; j++) t->cache[j].epoch = 0;
      uint32_t hwm = __atomic_load_n(&np_threads_hwm, __ATOMIC_RELAXED);
      while (k + 1 > hwm &&
             !__atomic_compare_exchange_n(&np_threads_hwm, &hwm, k + 1, 0, __ATOMIC_RELEASE,
                                          __ATOMIC_RELAXED)) {
      }
      pthread_setspecific(np_thread_key, t);
      np_tls = t;
      return t;
    }
  }
  return NULL; /* more than NP_MAX_THREADS threads at once: their events are dropped */
}

/* ------------------------------------------------------------------- communicators */

static uint32_t np_random32(void) {
  uint32_t r = 0;
  if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) /* mix the clock instead */
    r = (uint32_t)(np_ticks() * 0x9E3779B97F4A7C15ull >> 32) ^ (uint32_t)getpid();
  return r | 1;
}

/* Lays out one window set over `mem`. */
static void np_wset_init(np_wset* ws, void* mem) {
  ws->nwin = np_cfg.nwin;
  ws->nslots = np_cfg.nslots;
  ws->block = np_cfg.block;
  ws->trigger = np_cfg.trigger;
  for (uint32_t w = 0; w < ws->nwin; w++) {
    ws->win[w].slots = (np_event*)((char*)mem + (size_t)w * ws->nslots * NP_SLOT_BYTES);
    /* Epochs start at a random value so a value NCCL never got from us (a corrupted or
     * made-up handle) matches a live window with probability 2^-31, not because small
     * epochs are common. */
    __atomic_store_n(&ws->win[w].se, NP_SE(np_random32() & NP_EPOCH_MASK, NP_W_FREE),
                     __ATOMIC_RELEASE);
  }
}

/* Touches the detail windows (a trace wants detail): done by the thread that turns detail on,
 * so NCCL's threads do not take the page faults. */
static void np_populate_detail(np_comm* c) {
  if (c->dmem == NULL || __atomic_load_n(&c->dmem_ready, __ATOMIC_ACQUIRE)) return;
#ifdef MADV_POPULATE_WRITE
  if (madvise(c->dmem, c->dmem_bytes, MADV_POPULATE_WRITE) != 0)
#endif
  {
    /* Older kernels: read a byte per page (the pages are zero; a write could race with a
     * callback that has started using them). The first write then costs a minor fault. */
    volatile const char* p = (const char*)c->dmem;
    for (size_t o = 0; o < c->dmem_bytes; o += 4096) (void)p[o];
  }
  __atomic_store_n(&c->dmem_ready, 1, __ATOMIC_RELEASE);
}

/* Maps a communicator's memory the first time its table entry is used; the memory and the
 * geometry then stay for the life of the process (config is read once). The operation
 * windows, the arena and the sums are populated now so no callback takes a page fault. */
static int np_map_comm(np_comm* c, uint32_t idx) {
  size_t wbytes = (size_t)np_cfg.nwin * np_cfg.nslots * NP_SLOT_BYTES;
  size_t bytes = wbytes + (size_t)np_fixed_bytes();
  if (c->mem) return 1;
  void* m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                 -1, 0);
  if (m == MAP_FAILED) return 0;
  void* d = mmap(NULL, wbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (d == MAP_FAILED) {
    munmap(m, bytes);
    return 0;
  }
  c->mem = m;
  c->mem_bytes = bytes;
  c->dmem = d;
  c->dmem_bytes = wbytes;
  c->idx = idx;
  c->ncells = np_cfg.ncells;
  c->cells = (np_cell*)((char*)m + wbytes);
  c->xfer = (np_xbucket*)(c->cells + c->ncells);
  c->lost = (np_lost*)(c->xfer + NP_XFER_BUCKETS);
  c->rq = (uint64_t*)(c->lost + NP_LOST_KEYS);
  /* Cell generations start random, like window epochs: a made-up handle (a small integer, a
   * corrupted pointer) then names a live cell with probability 2^-30, not because every
   * cell's first generation is 0. */
  for (uint32_t k = 0; k < c->ncells; k++)
    c->cells[k].gs = (uint64_t)(np_random32() & NP_GEN_MASK) << 1;
  np_wset_init(&c->set[NP_SET_OP], m);
  np_wset_init(&c->set[NP_SET_DETAIL], d);
  /* Sampled tracing records its operations' steps there from the start. */
  if (__atomic_load_n(&np_detail_on, __ATOMIC_ACQUIRE) || np_sample_n) np_populate_detail(c);
  return 1;
}

int np_quiesce(void);


/* Starts a new incarnation of a communicator entry: fresh epochs and cell generations
 * (handles of the previous one stay stale forever), window 0 of each set filling, empty sums.
 * Waits first for callbacks that may still be running on the previous incarnation (they
 * re-check the state and bail). */
static void np_open_comm(np_comm* c) {
  for (int i = 0; i < 50 && !np_quiesce(); i++) {
  }
  __atomic_store_n(&c->dropped, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&c->stale, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&c->late, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&c->orphan_steps, 0, __ATOMIC_RELAXED);
  memset(c->dropped_type, 0, sizeof c->dropped_type);
  memset(c->trace_dropped, 0, sizeof c->trace_dropped);
  memset(c->xun_n, 0, sizeof c->xun_n);
  memset(c->xun_bytes, 0, sizeof c->xun_bytes);
  __atomic_store_n(&c->incarnation, c->incarnation + 1, __ATOMIC_RELAXED);
  __atomic_store_n(&c->fin_tsc, 0, __ATOMIC_RELAXED);
  uint64_t now = np_ticks();
  for (uint32_t set = 0; set < 2; set++) {
    np_wset* ws = &c->set[set];
    while (__atomic_exchange_n(&ws->rotating, 1, __ATOMIC_ACQUIRE)) {
    }
    for (uint32_t w = 0; w < ws->nwin; w++) {
      np_window* win = &ws->win[w];
      uint32_t ep = np_next_epoch(NP_SE_EPOCH(win->se));
      __atomic_store_n(&win->claimed, 0, __ATOMIC_RELAXED);
      win->scan_from = 0;
      __atomic_store_n(&win->open_tsc, now, __ATOMIC_RELAXED);
      __atomic_store_n(&win->close_tsc, 0, __ATOMIC_RELAXED);
      __atomic_store_n(&win->se, NP_SE(ep, w == 0 ? NP_W_FILLING : NP_W_FREE), __ATOMIC_RELEASE);
    }
    __atomic_store_n(&ws->cur, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&ws->rotating, 0, __ATOMIC_RELEASE);
  }
  for (uint32_t i = 0; i < c->ncells; i++) { /* a new generation, free */
    uint64_t gs = __atomic_load_n(&c->cells[i].gs, __ATOMIC_RELAXED);
    __atomic_store_n(&c->cells[i].gs, (gs | 1) + 1, __ATOMIC_RELEASE);
  }
  __atomic_store_n(&c->cursor, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&c->rq_head, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&c->rq_tail, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&c->trig_left, 0, __ATOMIC_RELAXED);
  if (c->p2p_ord) memset(c->p2p_ord, 0, c->p2p_bytes);
  memset(c->xfer, 0, NP_XFER_BUCKETS * sizeof(np_xbucket));
  memset(c->lost, 0, NP_LOST_KEYS * sizeof(np_lost));
}

static void np_bump_hwm(uint32_t* hwm, uint32_t v) {
  uint32_t cur = __atomic_load_n(hwm, __ATOMIC_RELAXED);
  while (v > cur && !__atomic_compare_exchange_n(hwm, &cur, v, 0, __ATOMIC_RELEASE,
                                                 __ATOMIC_RELAXED)) {
  }
}

/* The process-wide communicator that holds ProxyOps other processes' proxies started (PXN). */
/* Takes an UNUSED entry for a new incarnation (INITIALIZING); returns 0 if it is not free. */
static int np_claim_entry(np_comm* c) {
  uint32_t w = __atomic_load_n(&c->state, __ATOMIC_RELAXED);
  return NP_CS_STATE(w) == NP_COMM_UNUSED &&
         __atomic_compare_exchange_n(&c->state, &w, NP_CS(NP_CS_INC(w), NP_COMM_INITIALIZING), 0,
                                     __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

/* Moves an entry to `st`, keeping the incarnation its state word carries. */
static void np_set_state(np_comm* c, uint32_t st) {
  uint32_t w = __atomic_load_n(&c->state, __ATOMIC_RELAXED);
  __atomic_store_n(&c->state, NP_CS(NP_CS_INC(w), st), __ATOMIC_RELEASE);
}

/* Compare-and-swap of an entry's state from `from` to `to` within the incarnation in `w`. */
static int np_move_state(np_comm* c, uint32_t w, uint32_t from, uint32_t to) {
  uint32_t expect = NP_CS(NP_CS_INC(w), from);
  return __atomic_compare_exchange_n(&c->state, &expect, NP_CS(NP_CS_INC(w), to), 0,
                                     __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

/* A claimed entry goes live: its new incarnation is published with the state. */
static void np_activate(np_comm* c) {
  __atomic_store_n(&c->state, NP_CS(c->incarnation, NP_COMM_ACTIVE), __ATOMIC_RELEASE);
}

static np_comm* np_pxn_comm(void) {
  np_comm* c = &np_comms[NP_PXN_COMM];
  if (np_comm_state(c) == NP_COMM_ACTIVE) return c;
  if (!np_claim_entry(c)) return NULL;
  if (!np_map_comm(c, NP_PXN_COMM)) {
    np_set_state(c, NP_COMM_UNUSED);
    return NULL;
  }
  np_open_comm(c);
  snprintf(c->name, sizeof c->name, "pxn");
  __atomic_store_n(&c->rank, -1, __ATOMIC_RELAXED);
  np_bump_hwm(&np_comms_hwm, 1);
  np_activate(c);
  return c;
}

np_comm* np_pxn_target(void) {
  np_comm* c = &np_comms[NP_PXN_COMM];
  return np_comm_state(c) == NP_COMM_ACTIVE ? c : NULL;
}

/* The P2P ordinal counters of a communicator about to open: 2 x nranks, or a fixed table when
 * NCCL does not say nranks (v1-v3: peers beyond NP_P2P_FIXED_PEERS share a counter with
 * peer % it, so their ordinals, and which of their operations are sampled, stop lining up).
 * The table of a previous incarnation is reused when it is large enough; a larger one is mapped
 * and the smaller kept mapped (never unmapped: a callback that raced with finalize may still
 * hold it), so what is mapped is at most twice the largest table. np_open_comm zeroes it. */
static void np_map_p2p(np_comm* c, int nranks) {
  uint32_t peers = nranks > 0 ? (uint32_t)nranks : NP_P2P_FIXED_PEERS;
  size_t bytes = (size_t)peers * 2 * sizeof(uint64_t);
  if (c->p2p_ord != NULL && c->p2p_bytes >= bytes) {
    c->p2p_peers = peers;
    return;
  }
  void* m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                 -1, 0);
  if (m == MAP_FAILED) {
    np_logf(NPABI_LOG_WARN, "cannot map %zu bytes for P2P ordinals (%s): this communicator's "
            "P2P operations all get ordinal 0", bytes, strerror(errno));
    c->p2p_peers = 0;
    return;
  }
  c->p2p_ord = (uint64_t*)m;
  c->p2p_bytes = bytes;
  c->p2p_peers = peers;
}

/* The ABI version NCCL calls (np_mask_ancestors), from the first init. */
static int np_mask_abi;

/* At each init: the mask in force gets the ancestors NCCL of this ABI version starts, said
 * once when that adds something. */
static void np_mask_complete(int abi) {
  __atomic_store_n(&np_mask_abi, abi, __ATOMIC_RELEASE);
  uint32_t m = np_get_mask(), full = np_mask_ancestors(m, abi);
  if (full == m) return;
  __atomic_store_n(&np_record_mask, full, __ATOMIC_RELEASE);
  static int said;
  if (!__atomic_exchange_n(&said, 1, __ATOMIC_ACQ_REL))
    np_logf(NPABI_LOG_INFO,
            "event mask 0x%x: NCCL also starts the events above the types asked for; ncclprof "
            "records the operations and ProxyOps among them, so that what it records counts "
            "(mask 0x%x)", m, full);
}

void* np_init_comm(int abi, uint64_t comm_hash, const char* name, int nnodes, int nranks,
                   int rank, npabi_logger_t logfn, int* mask_ptr) {
  np_setup();
  if (logfn) {
    npabi_logger_t none = NULL;
    __atomic_compare_exchange_n(&np_logger, &none, logfn, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
  }
  /* Off by configuration, or the process cannot afford the drainer (loader.c, which says
   * why once): init succeeds, NCCL is asked for nothing. */
  if (np_cfg.disabled || !np_drain_admit()) {
    if (mask_ptr) __atomic_store_n(mask_ptr, 0, __ATOMIC_RELEASE);
    np_count(NP_C_INIT_DISABLED);
    return NULL;
  }
  np_mask_complete(abi);
  /* The mask is one process-wide int; keep its address so the control API can change it. */
  if (mask_ptr) {
    /* the mask in force, a run-time change included; NCCL's other threads may be reading it */
    __atomic_store_n(mask_ptr, (int)np_get_mask(), __ATOMIC_RELEASE);
    __atomic_store_n(&np_mask_ptr, mask_ptr, __ATOMIC_RELEASE);
  }
  np_pxn_comm();
  for (uint32_t i = 1; i < NP_MAX_COMMS; i++) {
    np_comm* c = &np_comms[i];
    if (!np_claim_entry(c)) continue;
    if (!np_map_comm(c, i)) {
      np_set_state(c, NP_COMM_UNUSED);
      np_count(NP_C_INIT_DISABLED);
      np_logf(NPABI_LOG_WARN, "cannot map %zu bytes for event windows (%s); not profiling "
              "this communicator", (size_t)np_cfg.nwin * np_cfg.nslots * NP_SLOT_BYTES,
              strerror(errno));
      return NULL;
    }
    np_open_comm(c);
    np_map_p2p(c, abi >= 4 ? nranks : 0); /* after np_open_comm's wait: no callback inside */
    c->abi = abi;
    c->comm_hash = comm_hash;
    c->nnodes = nnodes;
    c->nranks = nranks;
    /* A late callback that still names the entry's previous context may read it meanwhile. */
    __atomic_store_n(&c->rank, rank, __ATOMIC_RELAXED);
    __atomic_store_n(&c->learned, abi >= 4, __ATOMIC_RELEASE);
    c->log = logfn;
    snprintf(c->name, sizeof c->name, "%s", name ? name : "");
    np_bump_hwm(&np_comms_hwm, i + 1);
    np_activate(c);
    np_kick();
    return np_ctx_of(c, c->incarnation);
  }
  np_count(NP_C_INIT_DISABLED);
  /* Once per process: a job that makes thousands of communicators must not flood its log.
   * Every one skipped is counted in init_disabled. */
  static int warned;
  if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
    np_logf(NPABI_LOG_WARN, "more than %d communicators in this process; not profiling the "
            "ones beyond (counted in init_disabled)", NP_MAX_COMMS - 1);
  return NULL;
}

/* v1–v3 pass the communicator's identity in Coll/P2p descriptors instead of init. */
void np_learn_comm(np_comm* c, uint64_t hash, const char* name, int rank) {
  uint32_t expect = 0;
  if (!__atomic_compare_exchange_n(&c->learned, &expect, 2, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
    return; /* learned already, or another thread is learning */
  c->comm_hash = hash;
  __atomic_store_n(&c->rank, rank, __ATOMIC_RELAXED); /* read by callbacks on other threads */
  if (name) snprintf(c->name, sizeof c->name, "%s", name);
  __atomic_store_n(&c->learned, 1, __ATOMIC_RELEASE);
}

uint64_t np_mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int np_wait_until(int (*done)(void*), void* arg, uint64_t timeout_ns) {
  uint64_t deadline = np_mono_ns() + timeout_ns;
  for (;;) {
    if (done(arg)) return 1;
    uint64_t now = np_mono_ns();
    if (now >= deadline) return 0;
    uint64_t nap = deadline - now < 1000000 ? deadline - now : 1000000; /* 1 ms */
    struct timespec ts = {0, (long)nap};
    nanosleep(&ts, NULL);
  }
}

/* Finalize's wait is over: the drainer processed the communicator, or there is none. */
static int np_finalize_done(void* arg) {
  return np_comm_state((np_comm*)arg) == NP_COMM_DRAINED || !np_drain_live();
}

void np_finalize_comm(void* context) {
  if (context == NULL) { /* NCCL 2.23–2.27 finalize a NULL context */
    np_count(NP_C_NULL_FINALIZE);
    return;
  }
  uint32_t token;
  np_comm* c = np_ctx_entry(context, &token);
  if (c == NULL) return;
  /* Only the incarnation the context was given for, and only once: a finalize of an earlier
   * one (its entry now serves another communicator) is counted and ignored. */
  uint32_t w = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
  if (NP_CS_STATE(w) != NP_COMM_ACTIVE || (NP_CS_INC(w) & (NP_CTX_TOKENS - 1)) != token) {
    np_count(NP_C_STALE_FINALIZE);
    return;
  }
  __atomic_store_n(&c->fin_tsc, np_ticks(), __ATOMIC_RELAXED); /* published by the CAS */
  if (!np_move_state(c, w, NP_COMM_ACTIVE, NP_COMM_FINALIZING)) {
    np_count(NP_C_STALE_FINALIZE);
    return;
  }
  np_kick();
  /* Wait (bounded, by the clock) for the drainer to process what this communicator recorded,
   * so its summary and trace are complete when NCCL's commDestroy returns. */
  if (np_wait_until(np_finalize_done, c, np_cfg.finalize_wait_ns) ||
      !np_move_state(c, w, NP_COMM_FINALIZING, NP_COMM_ABANDONED)) {
    np_set_state(c, NP_COMM_UNUSED); /* drained, or no drainer will come */
    return;
  }
  np_logf(NPABI_LOG_WARN, "finalize of communicator %llx rank %d did not finish processing "
          "within NCCLPROF_FINALIZE_TIMEOUT_MS; it continues in the background",
          (unsigned long long)c->comm_hash, c->rank);
}

/* ------------------------------------------------------------------- windows */

static int np_free_windows(np_wset* ws);

/* Moves a communicator's set from window `from` to a FREE one. If none is free the current
 * window keeps filling (and drops once full) until the drainer gives one back. When fewer than
 * two windows are left free, the drainer is woken rather than left to its next poll: one
 * sem_post per window filled, and only when NCCL is outrunning the poll. */
void np_rotate(np_comm* c, uint32_t set, uint32_t from) {
  np_wset* ws = &c->set[set];
  if (__atomic_exchange_n(&ws->rotating, 1, __ATOMIC_ACQUIRE)) return;
  int wake = 0;
  np_window* w = &ws->win[from];
  uint64_t se = __atomic_load_n(&w->se, __ATOMIC_ACQUIRE);
  if (__atomic_load_n(&ws->cur, __ATOMIC_ACQUIRE) == from && NP_SE_STATE(se) == NP_W_FILLING) {
    for (uint32_t k = 1; k < ws->nwin; k++) {
      uint32_t n = (from + k) % ws->nwin;
      np_window* nw = &ws->win[n];
      uint64_t nse = __atomic_load_n(&nw->se, __ATOMIC_ACQUIRE);
      if (NP_SE_STATE(nse) != NP_W_FREE) continue;
      uint64_t now = np_ticks();
      __atomic_store_n(&nw->open_tsc, now, __ATOMIC_RELAXED);
      __atomic_store_n(&nw->se, NP_SE(NP_SE_EPOCH(nse), NP_W_FILLING), __ATOMIC_RELEASE);
      __atomic_store_n(&w->close_tsc, now, __ATOMIC_RELAXED);
      __atomic_store_n(&w->se, NP_SE(NP_SE_EPOCH(se), NP_W_CLOSING), __ATOMIC_RELEASE);
      __atomic_store_n(&ws->cur, n, __ATOMIC_RELEASE);
      wake = np_free_windows(ws) < 2;
      break;
    }
  }
  __atomic_store_n(&ws->rotating, 0, __ATOMIC_RELEASE);
  if (wake) np_kick();
}

static int np_step_cell(int state) {
  switch (state) {
  case NPABI_PROXY_STEP_SEND_GPU_WAIT: return NP_ST_SEND_GPU_WAIT;
  case NPABI_PROXY_STEP_SEND_PEER_WAIT: return NP_ST_SEND_PEER_WAIT;
  case NPABI_PROXY_STEP_SEND_WAIT: return NP_ST_SEND_WAIT;
  case NPABI_PROXY_STEP_RECV_WAIT: return NP_ST_RECV_WAIT;
  case NPABI_PROXY_STEP_RECV_FLUSH_WAIT: return NP_ST_RECV_FLUSH_WAIT;
  case NPABI_PROXY_STEP_RECV_GPU_WAIT: return NP_ST_RECV_GPU_WAIT;
  default: return -1;
  }
}

void np_late(np_comm* c, np_thread* t, uint64_t h, uint32_t state, uint64_t a0, uint64_t a1,
             int has_args, const np_cell* opfin) {
  uint32_t wi, s, ep;
  /* A late record goes to its event's set: a ProxyOp's (a cell handle) is an operation. */
  uint32_t set = np_h_is_cell(h) ? NP_SET_OP : np_h_set(h);
  np_event* ev = np_claim(c, t, set, &wi, &s, &ep);
  if (ev == NULL) { /* a lost stop: its operation ends up incomplete (or its trace slice) */
    if (set == NP_SET_OP) np_count_drop(c, NP_T_LATE);
    else np_count_trace_drop(c, NP_T_LATE);
    return;
  }
  ev->parent = 0;
  ev->t_start = np_ticks();
  ev->t_stop = ev->t_start;
  ev->tid = t->tid;
  ev->rank = np_comm_rank(c);
  ev->nstates = 0;
  ev->sflags = 0;
  memset(&ev->u, 0, sizeof ev->u);
  ev->u.late.target = h;
  ev->u.late.state = state;
  ev->u.late.arg0 = a0;
  ev->u.late.arg1 = a1;
  ev->u.late.has_args = (uint8_t)has_args;
  if (opfin) ev->u.late.prog = opfin->u.op.prog;
  ev->done = 1;
  __atomic_store_n(&ev->hdr, (uint64_t)ep | ((uint64_t)NP_T_LATE << 32), __ATOMIC_RELEASE);
  __atomic_fetch_add(&c->late, 1, __ATOMIC_RELAXED);
  np_count(NP_C_LATE);
}

/* Copies the network plugin's descriptor (IB queue pair or socket) behind netPlugin.data. */
static void np_copy_net_payload(np_event* ev, const void* data) {
  if (data == NULL) return;
  uint32_t kind = (uint32_t)ev->u.net.id & NPABI_NET_TYPE_MASK;
  size_t n = kind == NPABI_NET_TYPE_IB ? sizeof(npabi_net_ib_v1_t)
           : kind == NPABI_NET_TYPE_SOCK ? sizeof(npabi_net_sock_v1_t) : 0;
  if (n) memcpy(ev->u.net.payload, data, n);
}


void np_apply_state(np_event* ev, int state, uint64_t a0, uint64_t a1, int has_args,
                    uint64_t now) {
  (void)a1;
  ev->nstates++;
  switch (np_ev_type(ev)) {
  case NP_T_PROXY_CTRL:
    if (state < NPABI_PROXY_CTRL_IDLE || state > NPABI_PROXY_CTRL_APPEND_END) break;
    if (ev->u.ctrl.t_first == 0) {
      ev->u.ctrl.t_first = now;
      ev->u.ctrl.first = (uint8_t)state;
    }
    ev->u.ctrl.t_last = now;
    ev->u.ctrl.last = (uint8_t)state;
    if (state == NPABI_PROXY_CTRL_APPEND_END && has_args) ev->u.ctrl.appended = (int32_t)a0;
    return;
  case NP_T_KERNEL_CH:
    if (state != NPABI_KERNEL_CH_STOP) break;
    if (has_args) ev->u.kch.ptimer_stop = a0;
    ev->u.kch.t_stop_state = now;
    return;
  case NP_T_NET_PLUGIN:
    if (state != NPABI_NET_PLUGIN_UPDATE) break;
    if (ev->u.net.t_update == 0) ev->u.net.t_update = now;
    ev->u.net.nupdates++;
    if (has_args) np_copy_net_payload(ev, (const void*)(uintptr_t)a0);
    return;
  case NP_T_GROUP_API:
    if (state == NPABI_GROUP_START_API_STOP) {
      ev->u.gapi.t_start_api_stop = now;
      return;
    }
    if (state == NPABI_GROUP_END_API_START) {
      ev->u.gapi.t_end_api_start = now;
      return;
    }
    break;
  }
  np_count(NP_C_UNKNOWN_STATE);
}

void np_net_start_payload(np_event* ev, const void* data) { np_copy_net_payload(ev, data); }

/* ------------------------------------------------------------------- arena events */

/* A state of a ProxyOp or ProxyStep in flight (the inline path takes most step states). */
void np_cell_state(np_cell* cell, int state, uint64_t a0, int has_args, uint64_t now) {
  __atomic_store_n(&cell->nstates, (uint16_t)(cell->nstates + 1), __ATOMIC_RELAXED);
  if (cell->type == NP_T_PROXY_STEP) {
    int k = np_step_cell(state);
    if (k >= 0) {
      if (k == NP_ST_SEND_PEER_WAIT) cell->u.step.npeerwait++;
      if (cell->u.step.t_state[k] == 0) cell->u.step.t_state[k] = now;
      if ((k == NP_ST_SEND_WAIT || k == NP_ST_RECV_FLUSH_WAIT) && has_args)
        cell->u.step.trans_size = a0;
      cell->last_state = state;
      cell->t_last = now;
      return;
    }
  } else if (state == NPABI_PROXY_OP_IN_PROGRESS ||
             (state >= NPABI_PROXY_OP_SEND_POSTED && state <= NPABI_PROXY_OP_RECV_DONE)) {
    np_op_progress* pg = &cell->u.op.prog;
    if (pg->t_progress == 0) pg->t_progress = now;
    if (has_args && a0 > pg->trans_size) pg->trans_size = a0; /* v1–v3 total */
    cell->last_state = state;
    cell->t_last = now;
    return;
  }
  np_count(NP_C_UNKNOWN_STATE);
}

/* v1–v3: a ProxyOp state carrying the op's running total; returns the bytes it adds (the
 * transfer the step state that follows on this thread is about), or 0 if unknown. */
uint64_t np_op_running_total(void* handle, int state, uint64_t total) {
  uint64_t h = (uint64_t)(uintptr_t)handle, added = 0;
  if (np_is_sentinel(h)) return 0;
  if (!np_h_is_cell(h)) { /* not a ProxyOp of ours: let the general path judge it */
    np_state(handle, state, total, 0, 1);
    return 0;
  }
  np_thread* t = np_enter();
  if (t == NULL) return 0;
  np_comm* c = np_handle_comm(h);
  np_cell* cell = c ? np_cell_of(c, h) : NULL;
  if (cell != NULL && cell->type == NP_T_PROXY_OP) {
    uint64_t had = cell->u.op.prog.trans_size;
    added = total > had ? total - had : 0;
    if (cell->u.op.record == 0) np_op_record(c, t, cell, h); /* its first sign of life */
    np_cell_state(cell, state, total, 1, np_ticks());
  } else if (c != NULL) {
    np_count(NP_C_STALE_HANDLE);
  }
  np_leave(t);
  return added;
}

/* A ProxyStep recorded whole into the detail windows (a trace wants it). */
static void np_step_record(np_comm* c, np_thread* t, const np_cell* s, uint64_t h, uint64_t now) {
  uint32_t wi, slot, ep;
  np_event* ev = np_claim(c, t, NP_SET_DETAIL, &wi, &slot, &ep);
  if (ev == NULL) {
    np_count_trace_drop(c, NP_T_PROXY_STEP);
    return;
  }
  ev->parent = s->parent;
  ev->t_start = s->t_start;
  ev->t_stop = now;
  ev->tid = s->tid;
  ev->rank = s->rank;
  ev->nstates = s->nstates;
  ev->sflags = s->sflags;
  memset(&ev->u.step, 0, sizeof ev->u.step);
  memcpy(ev->u.step.t_state, s->u.step.t_state, sizeof ev->u.step.t_state);
  ev->u.step.trans_size = s->u.step.trans_size;
  ev->u.step.cell = h;
  ev->u.step.step = s->u.step.step;
  ev->u.step.npeerwait = s->u.step.npeerwait;
  ev->done = 1;
  __atomic_store_n(&ev->hdr, (uint64_t)ep | ((uint64_t)NP_T_PROXY_STEP << 32) |
                                 ((uint64_t)s->abi << 40) | ((uint64_t)s->sflags << 48),
                   __ATOMIC_RELEASE);
}

/* A ProxyOp's record in the operation windows (how the drainer links it to its operation),
 * written at its first sign of life (a state, a step, its stop) rather than at its start: a
 * ProxyOp NCCL never reports on (CollNet, P2P/SHM copy engine: docs/nccl-patterns.md) then
 * costs no record, and its operation completes without it. The record keeps the start time. */
void np_op_record(np_comm* c, np_thread* t, np_cell* op, uint64_t h) {
  uint64_t wh = 0, hdr = 0;
  np_event* ev = np_slot_new(c, t, NP_T_PROXY_OP, op->abi, op->parent, op->rank, op->sflags, &wh, &hdr);
  if (ev == NULL) { /* its steps still count: the cell has what they need */
    __atomic_store_n(&op->u.op.record, NP_H_DROPPED, __ATOMIC_RELAXED);
    np_count_drop(c, NP_T_PROXY_OP);
    return;
  }
  ev->t_start = op->t_start;
  memset(&ev->u.op, 0, sizeof ev->u.op);
  ev->u.op.arena = h;
  ev->u.op.pid = op->u.op.pid;
  ev->u.op.channel = op->channel;
  ev->u.op.peer = op->peer;
  ev->u.op.nsteps = op->u.op.nsteps;
  ev->u.op.chunk = op->chunk;
  ev->u.op.is_send = op->is_send;
  __atomic_store_n(&ev->hdr, hdr, __ATOMIC_RELEASE);
  __atomic_store_n(&op->u.op.record, wh, __ATOMIC_RELAXED); /* np_op_retire reads it */
}

/* A ProxyOp stopped: its record in the operation windows gets the stop and what the cell
 * gathered, in place while its window accepts writes, else as a late record. */
static void np_op_finish(np_comm* c, np_thread* t, np_cell* op, uint64_t h, uint64_t now) {
  if (op->u.op.record == 0) np_op_record(c, t, op, h); /* stopped without a state or a step */
  uint64_t rec = op->u.op.record;
  if (rec == NP_H_DROPPED) return; /* it got no slot (counted) */
  np_event* ev = np_slot_of(c, rec, 0);
  if (ev == NULL || np_ev_type(ev) != NP_T_PROXY_OP) {
    np_late(c, t, h, NP_LATE_STOP, 0, 0, 0, op);
    return;
  }
  ev->u.op.prog = op->u.op.prog;
  ev->nstates = op->nstates;
  ev->t_stop = now;
  __atomic_store_n(&ev->done, 1, __ATOMIC_RELEASE);
}

/* Retires a ProxyOp NCCL will never stop, if it is one: no state and no step since it started
 * (net.cc records InProgress and starts steps on its first pass over an operation, so a
 * ProxyOp of net.cc's that had passes has both; one without has no record either). A
 * compare-and-swap frees the generation its handle names, so a cell stopped or reused
 * meanwhile is left alone. The fields are read atomically: the generation was checked first,
 * but another thread may be reusing the cell as they are read (never under NCCL, whose proxy
 * thread alone starts and stops a communicator's ProxyOps). */
static void np_op_retire(np_comm* c, np_thread* t, np_cell* op, uint64_t h, int counter) {
  (void)c;
  (void)t;
  uint64_t gs = __atomic_load_n(&op->gs, __ATOMIC_ACQUIRE);
  if (!(gs & 1) || ((uint32_t)(gs >> 1) & NP_GEN_MASK) != np_h_gen(h)) return;
  if (__atomic_load_n(&op->type, __ATOMIC_RELAXED) != NP_T_PROXY_OP ||
      __atomic_load_n(&op->nstates, __ATOMIC_RELAXED) != 0 ||
      __atomic_load_n(&op->u.op.record, __ATOMIC_RELAXED) != 0)
    return;
  if (!__atomic_compare_exchange_n(&op->gs, &gs, gs + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
    return;
  np_count(counter);
}

/* A ProxyOp stopped after it started at `started`: net.cc progressed it to the end, so every
 * ProxyOp this communicator's proxy thread started before it has had progress passes since,
 * and the operations they belong to are over (a later operation's network work completed).
 * Those still without a state or a step are none of net.cc's: they are retired. */
static void np_retire_due(np_comm* c, np_thread* t, uint64_t started) {
  uint32_t head = __atomic_load_n(&c->rq_head, __ATOMIC_RELAXED);
  uint32_t n = __atomic_load_n(&c->rq_tail, __ATOMIC_RELAXED) - head;
  /* Callers racing on one communicator (never NCCL's one proxy thread) can make the two
   * indexes disagree: at most one lap is looked at, so the loop is bounded whatever they read. */
  if (n > NP_RETIRE_RING) n = NP_RETIRE_RING;
  for (; n > 0; n--, head++) {
    uint64_t h = __atomic_load_n(&c->rq[head & (NP_RETIRE_RING - 1)], __ATOMIC_ACQUIRE);
    np_cell* op = np_cell_of(c, h);
    if (op != NULL && __atomic_load_n(&op->t_start, __ATOMIC_RELAXED) > started)
      break; /* started after the evidence */
    if (op != NULL) np_op_retire(c, t, op, h, NP_C_OPS_RETIRED);
  }
  __atomic_store_n(&c->rq_head, head, __ATOMIC_RELAXED);
}

/* The ring is full: its oldest ProxyOp has seen NP_RETIRE_RING others start after it and no
 * ProxyOp stop (a communicator whose every operation is CollNet, say). Retired if it still has
 * no state and no step; counted apart, since no stop proved its operation over. */
void np_retire_oldest(np_comm* c, np_thread* t) {
  uint32_t head = __atomic_load_n(&c->rq_head, __ATOMIC_RELAXED);
  uint64_t h = __atomic_load_n(&c->rq[head & (NP_RETIRE_RING - 1)], __ATOMIC_ACQUIRE);
  np_cell* op = np_cell_of(c, h);
  if (op != NULL) np_op_retire(c, t, op, h, NP_C_OPS_RETIRED_OLD);
  __atomic_store_n(&c->rq_head, head + 1, __ATOMIC_RELAXED);
}

/* stopEvent of a ProxyOp or ProxyStep: fold, record where wanted, free the cell. */
void np_cell_stop(np_comm* c, np_thread* t, np_cell* cell, uint64_t h, uint64_t now) {
  if (cell->type == NP_T_PROXY_STEP) {
    np_cell* op = np_h_is_cell(cell->parent) && np_h_comm(cell->parent) == c->idx
                      ? np_cell_of(c, cell->parent) : NULL;
    if (cell->sflags & NP_F_NO_OP) op = NULL; /* no pair or channel to fold into */
    else np_step_fold(c, t, cell, op, now);
    /* Recorded whole for a trace: every step while a trace window wants detail, else the
     * steps of operations sampled for the sampled trace. */
    if (__atomic_load_n(&np_detail_on, __ATOMIC_RELAXED) || (cell->sflags & NP_F_SAMPLE_BITS))
      np_step_record(c, t, cell, h, now);
    np_cell_free(cell);
    return;
  }
  uint64_t started = cell->t_start;
  np_op_finish(c, t, cell, h, now);
  np_cell_free(cell);
  if (__atomic_load_n(&c->rq_head, __ATOMIC_RELAXED) != __atomic_load_n(&c->rq_tail, __ATOMIC_RELAXED))
    np_retire_due(c, t, started);
}

/* A Coll or P2p that found no slot: its count goes into the lost-operation table, keyed like
 * an operation, so counts and bytes stay exact (only its timings are missing). */
void np_lost_add(np_comm* c, int type, const char* func, const char* dtype, const char* algo,
                 const char* proto, uint32_t nch, uint64_t count) {
  uint64_t tag = ((uint64_t)(uintptr_t)func * 31 + (uint64_t)(uintptr_t)dtype) * 31 +
                 (uint64_t)(uintptr_t)algo;
  tag = ((tag * 31 + (uint64_t)(uintptr_t)proto) * 31 + nch) * 31 + (uint64_t)type;
  tag = (tag * 0x9E3779B97F4A7C15ull) | 1;
  np_count(NP_C_LOST_OPS);
  for (uint32_t k = 0; k < NP_LOST_KEYS; k++) {
    np_lost* e = &c->lost[(tag + k) % NP_LOST_KEYS];
    uint64_t cur = __atomic_load_n(&e->tag, __ATOMIC_ACQUIRE);
    if (cur == 0) {
      uint64_t zero = 0;
      if (__atomic_compare_exchange_n(&e->tag, &zero, tag, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        e->func = func;
        e->dtype = dtype;
        e->algo = algo;
        e->proto = proto;
        e->type = (uint32_t)type;
        e->nchannels = nch;
        __atomic_store_n(&e->sum_count, count, __ATOMIC_RELAXED);
        __atomic_store_n(&e->n, 1, __ATOMIC_RELEASE); /* publishes the fields */
        return;
      }
      cur = zero;
    }
    /* Another thread may still be writing the fields of an entry it just claimed: only a
     * published entry (n > 0) is compared, and a duplicate entry for one key is harmless. */
    if (cur == tag && __atomic_load_n(&e->n, __ATOMIC_ACQUIRE) > 0 && e->func == func &&
        e->dtype == dtype && e->algo == algo && e->proto == proto && e->nchannels == nch &&
        e->type == (uint32_t)type) {
      __atomic_fetch_add(&e->sum_count, count, __ATOMIC_RELAXED);
      __atomic_fetch_add(&e->n, 1, __ATOMIC_RELEASE);
      return;
    }
  }
  np_count(NP_C_LOST_UNKEYED);
}

/* ------------------------------------------------------------------- drainer */

void np_kick(void) {
  if (!__atomic_load_n(&np_setup_done, __ATOMIC_ACQUIRE)) return;
  int v = 0;
  if (sem_getvalue(&np_sem, &v) == 0 && v > 0) return;
  sem_post(&np_sem);
}

void np_wait(int timeout_ms) {
  if (timeout_ms < 0) {
    while (!__atomic_load_n(&np_setup_done, __ATOMIC_ACQUIRE)) {
      struct timespec ts = {0, 20000000};
      nanosleep(&ts, NULL);
    }
    while (sem_wait(&np_sem) != 0 && errno == EINTR) {
    }
    return;
  }
  if (!__atomic_load_n(&np_setup_done, __ATOMIC_ACQUIRE)) {
    struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
    return;
  }
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += timeout_ms / 1000;
  dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
  if (dl.tv_nsec >= 1000000000) {
    dl.tv_sec++;
    dl.tv_nsec -= 1000000000;
  }
  while (sem_timedwait(&np_sem, &dl) != 0 && errno == EINTR) {
  }
}

/* Whether a CLOSING window still has events that started and have not stopped. */
static int np_has_open(np_window* w, uint32_t epoch, uint32_t nslots) {
  uint32_t n = __atomic_load_n(&w->claimed, __ATOMIC_ACQUIRE);
  if (n > nslots) n = nslots;
  for (uint32_t i = w->scan_from; i < n; i++) {
    np_event* ev = &w->slots[i];
    uint64_t hdr = __atomic_load_n(&ev->hdr, __ATOMIC_ACQUIRE);
    if ((uint32_t)hdr != epoch) continue; /* a hole: claimed in a block but unused so far */
    if (!__atomic_load_n(&ev->done, __ATOMIC_ACQUIRE)) {
      w->scan_from = i;
      return 1;
    }
  }
  w->scan_from = n;
  return 0;
}

/* Waits until no thread is inside a callback that began before the windows were sealed.
 * Returns 0 if some thread stayed inside longer than the bound (try again next poll). */
int np_quiesce(void) {
#if !defined(NP_TSAN)
  if (!np_fence_mode) syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
  else __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
  uint32_t n = __atomic_load_n(&np_threads_hwm, __ATOMIC_ACQUIRE);
  for (uint32_t i = 0; i < n; i++) {
    uint64_t a = __atomic_load_n(&np_threads[i].active, __ATOMIC_SEQ_CST);
    if (!(a & 1)) continue;
    for (int spin = 0; spin < 20000; spin++) { /* ≈ 20 ms at most */
      if (__atomic_load_n(&np_threads[i].active, __ATOMIC_SEQ_CST) != a) goto next;
      if (spin < 100) sched_yield();
      else {
        struct timespec ts = {0, 1000};
        nanosleep(&ts, NULL);
      }
    }
    np_count(NP_C_QUIESCE_TIMEOUT);
    return 0;
  next:;
  }
  return 1;
}

/* CLOSING and SEALED windows of a set in the order they were closed. */
static int np_closed_in_order(np_wset* ws, uint32_t* order) {
  int n = 0;
  for (uint32_t k = 0; k < ws->nwin; k++) {
    uint32_t st = NP_SE_STATE(__atomic_load_n(&ws->win[k].se, __ATOMIC_ACQUIRE));
    if (st != NP_W_CLOSING && st != NP_W_SEALED) continue;
    int j = n++;
    while (j > 0 && __atomic_load_n(&ws->win[order[j - 1]].close_tsc, __ATOMIC_RELAXED) >
                        __atomic_load_n(&ws->win[k].close_tsc, __ATOMIC_RELAXED)) {
      order[j] = order[j - 1];
      j--;
    }
    order[j] = k;
  }
  return n;
}

static int np_free_windows(np_wset* ws) {
  int n = 0;
  for (uint32_t k = 0; k < ws->nwin; k++)
    n += NP_SE_STATE(__atomic_load_n(&ws->win[k].se, __ATOMIC_ACQUIRE)) == NP_W_FREE;
  return n;
}

/* Seals a set's closed windows oldest first, so a window is never processed before an older
 * one that may hold its events' parents. The oldest is sealed without waiting when fewer than
 * two windows are free, so a burst never waits behind a grace period and drops. */
static int np_poll_set(np_comm* c, uint32_t i, uint32_t set, int fin, uint64_t now,
                       np_ready* out, int max) {
  np_wset* ws = &c->set[set];
  uint64_t gmin = np_ns_to_ticks(np_cfg.grace_min_ns), gmax = np_ns_to_ticks(np_cfg.grace_max_ns);
  uint32_t cur = __atomic_load_n(&ws->cur, __ATOMIC_ACQUIRE);
  np_window* cw = &ws->win[cur];
  if (__atomic_load_n(&cw->claimed, __ATOMIC_RELAXED) > 0 &&
      (fin || now - __atomic_load_n(&cw->open_tsc, __ATOMIC_RELAXED) >=
                  np_ns_to_ticks(np_cfg.window_ns)))
    np_rotate(c, set, cur);
  uint32_t order[NP_MAX_WINDOWS];
  int nclosed = np_closed_in_order(ws, order), n = 0;
  int pressure = np_free_windows(ws) < 2;
  for (int j = 0; j < nclosed && n < max; j++) {
    np_window* w = &ws->win[order[j]];
    uint64_t se = __atomic_load_n(&w->se, __ATOMIC_ACQUIRE);
    uint32_t ep = NP_SE_EPOCH(se);
    if (NP_SE_STATE(se) == NP_W_CLOSING) {
      uint64_t age = now - __atomic_load_n(&w->close_tsc, __ATOMIC_RELAXED);
      int early = fin || (pressure && j == 0);
      int at_max = age >= gmax;
      if (!early && !at_max && (age < gmin || np_has_open(w, ep, ws->nslots))) break;
      if (at_max && !early && np_has_open(w, ep, ws->nslots)) np_count(NP_C_SEALED_AT_MAX_GRACE);
      __atomic_store_n(&w->se, NP_SE(ep, NP_W_SEALED), __ATOMIC_SEQ_CST);
    }
    uint32_t claimed = __atomic_load_n(&w->claimed, __ATOMIC_ACQUIRE);
    out[n].comm = i;
    out[n].set = set;
    out[n].win = order[j];
    out[n].epoch = ep;
    out[n].claimed = claimed < ws->nslots ? claimed : ws->nslots;
    out[n].open_tsc = __atomic_load_n(&w->open_tsc, __ATOMIC_RELAXED);
    n++;
  }
  return n;
}

int np_poll(np_ready* out, int max, int flush, int set_mask) {
  uint64_t now = np_ticks();
  __atomic_store_n(&np_coarse_tsc, now, __ATOMIC_RELAXED); /* np_step_clock */
  int n = 0;
  uint32_t hwm = __atomic_load_n(&np_comms_hwm, __ATOMIC_ACQUIRE);
  /* The PXN communicator is never finalized by NCCL: it is flushed whenever one is, so other
   * processes' operations reach the summaries and traces before the job ends. */
  int finalizing = 0;
  for (uint32_t i = 1; i < hwm; i++) {
    uint32_t st = np_comm_state(&np_comms[i]);
    finalizing |= st == NP_COMM_FINALIZING || st == NP_COMM_ABANDONED;
  }
  for (uint32_t i = 0; i < hwm && n < max; i++) {
    np_comm* c = &np_comms[i];
    uint32_t st = np_comm_state(c);
    if (st != NP_COMM_ACTIVE && st != NP_COMM_FINALIZING && st != NP_COMM_ABANDONED) continue;
    int fin = flush || st != NP_COMM_ACTIVE || (i == NP_PXN_COMM && finalizing);
    for (uint32_t set = 0; set < 2 && n < max; set++)
      if (set_mask & (1 << set)) n += np_poll_set(c, i, set, fin, now, out + n, max - n);
  }
  if (n > 0 && !np_quiesce()) return 0; /* sealed windows stay SEALED: retried next poll */
  return n;
}

/* A ProxyOp's progress in the flat record the drainer reads. */
static void np_export_progress(np_record* o, const np_op_progress* p) {
  o->t_aux = p->t_progress;
  o->bytes_aux = p->trans_size;
  o->x_bytes = p->x_bytes;
  o->x_time = p->x_time;
  o->x_n = p->x_n;
  o->steps_done = p->steps_done;
}

int np_export(const np_ready* r, np_record* out, int max) {
  np_comm* c = &np_comms[r->comm];
  np_window* w = &c->set[r->set].win[r->win];
  int n = 0;
  for (uint32_t i = 0; i < r->claimed && n < max; i++) {
    const np_event* ev = &w->slots[i];
    uint64_t hdr = __atomic_load_n(&ev->hdr, __ATOMIC_ACQUIRE);
    if ((uint32_t)hdr != r->epoch) continue;
    np_record* o = &out[n++];
    memset(o, 0, sizeof *o);
    o->type = (uint8_t)(hdr >> 32);
    o->abi = (uint8_t)(hdr >> 40);
    o->flags = (uint16_t)((hdr >> 48) | ev->sflags | (ev->done ? 0 : NP_F_OPEN));
    o->handle = np_handle(r->comm, r->set, r->win, i, r->epoch, (uint16_t)(hdr >> 48));
    o->parent = ev->parent;
    o->t_start = ev->t_start;
    o->t_stop = ev->t_stop;
    o->tid = ev->tid;
    o->rank = ev->rank;
    o->nstates = ev->nstates;
    switch (o->type) {
    case NP_T_COLL:
      o->seq = ev->u.coll.seq;
      o->count = ev->u.coll.count;
      o->parent_group = ev->u.coll.parent_group;
      o->func = ev->u.coll.func;
      o->dtype = ev->u.coll.dtype;
      o->algo = ev->u.coll.algo;
      o->proto = ev->u.coll.proto;
      o->root = ev->u.coll.root;
      o->nchannels = ev->u.coll.nchannels;
      o->nwarps = ev->u.coll.nwarps;
      break;
    case NP_T_P2P:
      o->seq = ev->u.p2p.seq;
      o->count = ev->u.p2p.count;
      o->parent_group = ev->u.p2p.parent_group;
      o->func = ev->u.p2p.func;
      o->dtype = ev->u.p2p.dtype;
      o->peer = ev->u.p2p.peer;
      o->nchannels = ev->u.p2p.nchannels;
      break;
    case NP_T_PROXY_OP:
      o->handle = ev->u.op.arena; /* NCCL's handle: its steps' parent, its late stop's target */
      np_export_progress(o, &ev->u.op.prog);
      o->pid = ev->u.op.pid;
      o->peer = ev->u.op.peer;
      o->nsteps = ev->u.op.nsteps;
      o->chunk = ev->u.op.chunk;
      o->channel = ev->u.op.channel;
      o->is_send = ev->u.op.is_send;
      break;
    case NP_T_PROXY_STEP:
      o->handle = ev->u.step.cell;
      memcpy(o->t_state, ev->u.step.t_state, sizeof o->t_state);
      o->bytes_aux = ev->u.step.trans_size;
      o->step = ev->u.step.step;
      o->npeerwait = ev->u.step.npeerwait;
      break;
    case NP_T_KERNEL_CH:
      o->ptimer_start = ev->u.kch.ptimer_start;
      o->ptimer_stop = ev->u.kch.ptimer_stop;
      o->t_aux = ev->u.kch.t_stop_state;
      o->channel = ev->u.kch.channel;
      break;
    case NP_T_NET_PLUGIN:
      o->net_id = ev->u.net.id;
      o->t_aux = ev->u.net.t_update;
      o->aux = ev->u.net.nupdates;
      memcpy(o->net_payload, ev->u.net.payload, sizeof o->net_payload);
      break;
    case NP_T_PROXY_CTRL:
      o->t_state[0] = ev->u.ctrl.t_first;
      o->t_state[1] = ev->u.ctrl.t_last;
      o->first_state = ev->u.ctrl.first;
      o->last_state = ev->u.ctrl.last;
      o->aux = ev->u.ctrl.appended;
      break;
    case NP_T_GROUP_API:
      o->t_state[0] = ev->u.gapi.t_start_api_stop;
      o->t_state[1] = ev->u.gapi.t_end_api_start;
      o->aux = ev->u.gapi.depth;
      o->graph = ev->u.gapi.graph;
      break;
    case NP_T_COLL_API:
    case NP_T_P2P_API:
      o->count = ev->u.api.count;
      o->stream = ev->u.api.stream;
      o->func = ev->u.api.func;
      o->dtype = ev->u.api.dtype;
      o->root = ev->u.api.root;
      o->graph = ev->u.api.graph;
      break;
    case NP_T_KERNEL_LAUNCH:
      o->stream = ev->u.launch.stream;
      break;
    case NP_T_CE_COLL:
      o->seq = ev->u.ce.seq;
      o->count = ev->u.ce.count;
      o->stream = ev->u.ce.stream;
      o->func = ev->u.ce.func;
      o->dtype = ev->u.ce.dtype;
      o->sync = ev->u.ce.sync;
      o->root = ev->u.ce.root;
      o->batch_size = ev->u.ce.batch_size;
      o->num_batches = ev->u.ce.num_batches;
      o->ce_seq = ev->u.ce.ce_seq;
      o->graph = ev->u.ce.intra_sync;
      break;
    case NP_T_CE_SYNC:
    case NP_T_CE_BATCH:
      o->bytes_aux = ev->u.ceaux.total_bytes;
      o->aux = ev->u.ceaux.n;
      o->graph = ev->u.ceaux.flag;
      break;
    case NP_T_LATE:
      o->late_target = ev->u.late.target;
      o->late_state = ev->u.late.state;
      o->late_arg0 = ev->u.late.arg0;
      o->late_arg1 = ev->u.late.arg1;
      o->late_has_args = ev->u.late.has_args;
      np_export_progress(o, &ev->u.late.prog); /* a ProxyOp's stop: what its cell gathered */
      break;
    }
  }
  __atomic_fetch_add(&np_counters[NP_C_EVENTS], (uint64_t)n, __ATOMIC_RELAXED);
  return n;
}

void np_release(const np_ready* r) {
  np_window* w = &np_comms[r->comm].set[r->set].win[r->win];
  w->scan_from = 0;
  __atomic_store_n(&w->claimed, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&w->se, NP_SE(np_next_epoch(r->epoch), NP_W_FREE), __ATOMIC_RELEASE);
  __atomic_fetch_add(&np_counters[NP_C_WINDOWS_SEALED], 1, __ATOMIC_RELAXED);
}

int np_comm_get(uint32_t i, np_comm_info* o) {
  if (i >= NP_MAX_COMMS || i >= __atomic_load_n(&np_comms_hwm, __ATOMIC_ACQUIRE)) return 0;
  np_comm* c = &np_comms[i];
  memset(o, 0, sizeof *o);
  o->read_tsc = np_ticks(); /* before the windows are looked at: see np_comm_info */
  uint32_t st = np_comm_state(c);
  if (st != NP_COMM_ACTIVE && st != NP_COMM_FINALIZING && st != NP_COMM_ABANDONED) {
    o->state = NP_COMM_UNUSED; /* being set up or torn down: nothing to read yet */
    return 1;
  }
  /* Once finalized, only windows opened before count: callbacks that still arrive (a stop, a
   * state: new events are refused) land in later windows and cannot hold finalize. */
  uint64_t fin = st == NP_COMM_ACTIVE ? 0 : __atomic_load_n(&c->fin_tsc, __ATOMIC_RELAXED);
  o->state = st == NP_COMM_ABANDONED ? NP_COMM_FINALIZING : (int32_t)st;
  o->incarnation = __atomic_load_n(&c->incarnation, __ATOMIC_RELAXED);
  if (__atomic_load_n(&c->learned, __ATOMIC_ACQUIRE) == 1) {
    o->comm_hash = c->comm_hash;
    o->rank = c->rank;
    memcpy(o->name, c->name, sizeof o->name);
  }
  o->dropped = __atomic_load_n(&c->dropped, __ATOMIC_RELAXED);
  for (int k = 0; k < NP_T_COUNT; k++) {
    o->dropped_type[k] = __atomic_load_n(&c->dropped_type[k], __ATOMIC_RELAXED);
    o->trace_dropped[k] = __atomic_load_n(&c->trace_dropped[k], __ATOMIC_RELAXED);
  }
  o->ncells = (int32_t)c->ncells;
  o->stale = __atomic_load_n(&c->stale, __ATOMIC_RELAXED);
  o->late = __atomic_load_n(&c->late, __ATOMIC_RELAXED);
  o->orphan_steps = __atomic_load_n(&c->orphan_steps, __ATOMIC_RELAXED);
  o->name[sizeof o->name - 1] = 0;
  o->nranks = c->nranks;
  o->nnodes = c->nnodes;
  o->abi = c->abi;
  o->nwin = (int32_t)c->set[NP_SET_OP].nwin;
  o->nslots = (int32_t)c->set[NP_SET_OP].nslots;
  for (uint32_t set = 0; set < 2; set++) {
    np_wset* ws = &c->set[set];
    for (uint32_t k = 0; k < ws->nwin; k++) {
      uint64_t se = __atomic_load_n(&ws->win[k].se, __ATOMIC_ACQUIRE);
      uint32_t st = NP_SE_STATE(se);
      if (st == NP_W_CLOSING || st == NP_W_SEALED ||
          (st == NP_W_FILLING && __atomic_load_n(&ws->win[k].claimed, __ATOMIC_RELAXED) > 0)) {
        uint64_t opened = __atomic_load_n(&ws->win[k].open_tsc, __ATOMIC_RELAXED);
        o->open_windows += fin == 0 || opened < fin;
        if (set == NP_SET_OP && opened < o->read_tsc) o->read_tsc = opened;
      }
    }
  }
  return 1;
}

/* ------------------------------------------------------------------- sums and arena, read */

/* A communicator entry whose memory may be read (it was mapped; its data may be stale). */
static np_comm* np_comm_mapped(uint32_t i) {
  if (i >= NP_MAX_COMMS || i >= __atomic_load_n(&np_comms_hwm, __ATOMIC_ACQUIRE)) return NULL;
  np_comm* c = &np_comms[i];
  return c->mem ? c : NULL;
}

static int32_t np_sext24(uint64_t v) { return (int32_t)((uint32_t)(v & 0xffffff) << 8) >> 8; }

int np_xfer_read(uint32_t i, np_xfer* out, int max) {
  np_comm* c = np_comm_mapped(i);
  if (c == NULL) return 0;
  int n = 0;
  for (uint32_t k = 0; k < NP_XFER_BUCKETS; k++) {
    np_xbucket* b = &c->xfer[k];
    uint64_t cnt = __atomic_load_n(&b->n, __ATOMIC_ACQUIRE); /* the fields it covers are in */
    if (cnt == 0) continue;
    if (n == max) return -1;
    uint64_t key = __atomic_load_n(&b->key, __ATOMIC_RELAXED);
    np_xfer* o = &out[n++];
    o->kind = (uint32_t)(key >> 60);
    o->writer = (uint32_t)(key >> 48) & 0xfff;
    o->rank = np_sext24(key >> 24);
    o->id = np_sext24(key);
    o->size = __atomic_load_n(&b->size, __ATOMIC_RELAXED);
    o->n = cnt;
    o->bytes = __atomic_load_n(&b->bytes, __ATOMIC_RELAXED);
    o->sum_t = __atomic_load_n(&b->sum_t, __ATOMIC_RELAXED);
    o->t_min = __atomic_load_n(&b->t_min, __ATOMIC_RELAXED);
    o->t_max = __atomic_load_n(&b->t_max, __ATOMIC_RELAXED);
    uint64_t t2 = __atomic_load_n(&b->sum_t2, __ATOMIC_RELAXED);
    memcpy(&o->sum_t2, &t2, sizeof t2);
  }
  return n;
}

void np_xfer_unkeyed(uint32_t i, uint64_t n[4], uint64_t bytes[4]) {
  np_comm* c = np_comm_mapped(i);
  for (int k = 0; k < 4; k++) {
    n[k] = c ? __atomic_load_n(&c->xun_n[k], __ATOMIC_RELAXED) : 0;
    bytes[k] = c ? __atomic_load_n(&c->xun_bytes[k], __ATOMIC_RELAXED) : 0;
  }
}

int np_lost_read(uint32_t i, np_lost_op* out, int max) {
  np_comm* c = np_comm_mapped(i);
  if (c == NULL) return 0;
  int n = 0;
  for (uint32_t k = 0; k < NP_LOST_KEYS && n < max; k++) {
    np_lost* e = &c->lost[k];
    uint64_t cnt = __atomic_load_n(&e->n, __ATOMIC_ACQUIRE);
    if (cnt == 0) continue;
    out[n].func = e->func;
    out[n].dtype = e->dtype;
    out[n].algo = e->algo;
    out[n].proto = e->proto;
    out[n].type = e->type;
    out[n].nchannels = e->nchannels;
    out[n].n = cnt;
    out[n].sum_count = __atomic_load_n(&e->sum_count, __ATOMIC_RELAXED);
    n++;
  }
  return n;
}

/* Reads cells while NCCL's threads write them: a cell is copied only if its generation is the
 * same before and after, so a copy is of one event (its fields may be a moment apart, which a
 * hang dump, where nothing moves, does not notice). */
int np_arena_scan(uint32_t i, np_open_cell* out, int max) {
  np_comm* c = np_comm_mapped(i);
  if (c == NULL) return 0;
  int n = 0;
  for (uint32_t k = 0; k < c->ncells && n < max; k++) {
    np_cell* cell = &c->cells[k];
    uint64_t gs = __atomic_load_n(&cell->gs, __ATOMIC_ACQUIRE);
    if (!(gs & 1)) continue;
    np_open_cell* o = &out[n];
    memset(o, 0, sizeof *o);
    o->handle = np_ahandle(i, k, (uint32_t)(gs >> 1));
    o->parent = cell->parent;
    o->t_start = cell->t_start;
    o->t_last = cell->t_last;
    o->type = cell->type;
    o->tid = cell->tid;
    o->rank = cell->rank;
    o->peer = cell->peer;
    o->channel = cell->channel;
    o->is_send = cell->is_send;
    o->last_state = cell->last_state;
    if (cell->type == NP_T_PROXY_STEP) {
      memcpy(o->t_state, cell->u.step.t_state, sizeof o->t_state);
      o->step = cell->u.step.step;
    } else {
      o->nsteps = cell->u.op.nsteps;
      o->steps_done = (int32_t)cell->u.op.prog.steps_done;
    }
#if !defined(NP_TSAN)
    __atomic_thread_fence(__ATOMIC_ACQUIRE); /* the field reads above happen before the check */
#endif
    if (__atomic_load_n(&cell->gs, __ATOMIC_ACQUIRE) == gs && o->t_start != 0) n++;
  }
  return n;
}

void np_set_detail(int on) {
  if (on) {
    uint32_t hwm = __atomic_load_n(&np_comms_hwm, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < hwm; i++)
      if (np_comms[i].mem) np_populate_detail(&np_comms[i]);
  }
  __atomic_store_n(&np_detail_on, on ? 1u : 0u, __ATOMIC_RELEASE);
}

int np_detail(void) { return (int)__atomic_load_n(&np_detail_on, __ATOMIC_ACQUIRE); }

uint32_t np_sample_every(void) { return __atomic_load_n(&np_sample_n, __ATOMIC_ACQUIRE); }

/* The drainer saw a slow operation: the communicator's next k Coll/P2p are traced in full (a
 * countdown already running is extended, never shortened). Ignored for another incarnation. */
void np_trigger(uint32_t i, uint64_t incarnation, uint32_t k) {
  np_comm* c = np_comm_mapped(i);
  if (c == NULL || np_comm_state(c) != NP_COMM_ACTIVE ||
      c->incarnation != incarnation)
    return;
  uint32_t cur = __atomic_load_n(&c->trig_left, __ATOMIC_RELAXED);
  while (cur < k && !__atomic_compare_exchange_n(&c->trig_left, &cur, k, 1, __ATOMIC_RELAXED,
                                                 __ATOMIC_RELAXED)) {
  }
}

void np_dropped_read(uint64_t* untracked, uint64_t* trace) {
  for (int k = 0; k < NP_T_COUNT; k++) {
    untracked[k] = __atomic_load_n(&np_dropped_type[k], __ATOMIC_RELAXED);
    trace[k] = __atomic_load_n(&np_trace_dropped_type[k], __ATOMIC_RELAXED);
  }
}

void np_comm_drained(uint32_t i) {
  if (i == NP_PXN_COMM || i >= NP_MAX_COMMS) return;
  np_comm* c = &np_comms[i];
  uint32_t w = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
  if (!np_move_state(c, w, NP_COMM_FINALIZING, NP_COMM_DRAINED))
    np_move_state(c, w, NP_COMM_ABANDONED, NP_COMM_UNUSED); /* finalize gave up waiting */
}

void np_counters_read(uint64_t* out) {
  for (int i = 0; i < NP_C_COUNT; i++) out[i] = __atomic_load_n(&np_counters[i], __ATOMIC_RELAXED);
}

int np_uses_membarrier(void) { return !np_fence_mode; }

/* Runtime mask changes (control API): NCCL reads the int per operation. */
int np_set_mask(uint32_t mask) {
  int* p = __atomic_load_n(&np_mask_ptr, __ATOMIC_ACQUIRE);
  int abi = __atomic_load_n(&np_mask_abi, __ATOMIC_ACQUIRE);
  if (abi) mask = np_mask_ancestors(mask, abi); /* before the first init: np_mask_complete */
  __atomic_store_n(&np_record_mask, mask & NPABI_ALL_TYPES, __ATOMIC_RELEASE);
  __atomic_store_n(&np_mask_from_api, 1, __ATOMIC_RELEASE);
  if (p == NULL || !np_drain_live()) return 0; /* not yet, or the plugin turned itself off */
  /* NCCL's mask also carries what a chained plugin asked for (chain.c). */
  __atomic_store_n(p, (int)((mask & NPABI_ALL_TYPES) | np_chain_nccl_mask()), __ATOMIC_RELEASE);
  return 1;
}

void np_mask_off(void) {
  int* p = __atomic_load_n(&np_mask_ptr, __ATOMIC_ACQUIRE);
  if (p) __atomic_store_n(p, 0, __ATOMIC_RELEASE);
}

const np_config* np_config_get(void) { return &np_cfg; }

uint32_t np_get_mask(void) { return __atomic_load_n(&np_record_mask, __ATOMIC_ACQUIRE); }
