//go:build ncclprof_front

/*
 * chain.c — NCCLPROF_CHAIN: a second profiler plugin, loaded and driven the way NCCL would.
 *
 * Loading, once, at the first communicator (doc §2.1–§2.2): NCCLPROF_CHAIN is a file name or
 * path for dlopen(RTLD_NOW|RTLD_LOCAL); failing that, a bare name (no '/', not lib*.so) means
 * libnccl-profiler-<name>.so; a prefix of STATIC_PLUGIN means the main program; "none" means
 * nothing. The symbols ncclProfiler_vN are tried from the version NCCL uses for ncclprof down to
 * v1; the first one found is the version the chained plugin is driven at, and every call is
 * converted to it as NCCL's own adapters would (src/plugin/profiler/profiler_vN.cc).
 *
 * Handles. NCCL holds ncclprof's handle for an event; the chained plugin's is found from it:
 *   - ncclprof recorded the event (handle bit 0 set): a side table per communicator indexed by
 *     the handle's window, slot and low epoch bits, each entry tagged with the whole handle, so
 *     an entry outlives its slot's reuse by NP_CHAIN_GEN - 1 more epochs of that window;
 *   - ncclprof did not (its mask, full windows: it returned a sentinel) and the chained plugin
 *     did: NCCL gets a chain handle instead, bit 63 set and bit 0 clear, ncclprof's sentinel in
 *     bits 1–2 (what ncclprof is shown as parent or stop), naming a cell of a global ring;
 *   - graph-captured API events, which every replay names as parent for as long as the graph
 *     lives, are also kept in a small insert-only table.
 * Entries are written in a sequence-lock pattern: a reader racing the entry's reuse gets a
 * miss, never another event's handle. A miss (the mapping was overwritten) is counted and
 * reported once; the chained plugin then gets a NULL parent, or no stop or state, as for an
 * event it never saw. Nothing here allocates, locks or logs on NCCL's threads. A chain handle
 * carries its communicator's index.
 *
 * Finalize. The chained plugin may free its context, and the handles it issued under it, in
 * finalize; NCCL may still be calling back on that communicator meanwhile (a finalize racing
 * callbacks of other threads). So forwarding runs inside the core's active section (np_enter:
 * what the drainer's grace period waits for), and a communicator's finalize first stops
 * forwarding (has_ctx), waits for the forwards in flight (np_quiesce), forgets every handle
 * of that communicator, and only then calls the chained plugin's finalize: no call reaches it
 * with a context it finalized, or a handle issued under one.
 *
 * Failures: a library that does not load, has no symbol, is a copy of ncclprof, or has a table
 * whose function pointers are not code of that library (each must lie in an executable mapping
 * of the very object that exports the table: /proc/self/maps, read once at load; a pointer into
 * its data, or into libc's _exit, is refused before anything is called); an init returning an
 * error; an error from any later call. Each is reported once through NCCL's logger (from the
 * drainer for callbacks, which must not log), the plugin is detached (never called again) and
 * ncclprof goes on. Its library stays mapped once its code has run: it may have started threads.
 * A plugin that crashes inside its own code is not caught: leaving foreign code by siglongjmp from a signal handler leaves its locks (malloc's among
 * them) held, turning a crash into a hang of the training job, and a process-wide handler would
 * compete with CUDA's and Go's own.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "chain.h"
#include "hot.h"

int np_chain_on;

#define NP_CHAIN_GEN 4            /* side entries per slot: epochs are told apart by their low bits */
#define NP_CHAIN_CELLS (1u << 16) /* handles of events only the chained plugin recorded */
#define NP_CHAIN_PINS (1u << 14)  /* graph-captured API events */
#define NP_CHAIN_PROBES 32
#define NP_CHAIN_TAG (1ull << 63)
#define NP_CHAIN_SEQ_SHIFT 13 /* chain handles: bits 3–12 the communicator, the sequence above */
#define NP_PIN_GONE NP_H_SKIPPED   /* a pin of a finalized communicator: probes go on past it */

typedef struct np_centry {
  uint64_t tag; /* the handle NCCL holds; 0 while being written */
  void* ch;     /* the chained plugin's handle (NULL: it returned none) */
} np_centry;

/* Any version's descriptor and state arguments. */
typedef union np_descr_any {
  npabi_descr_v1_t v1;
  npabi_descr_v2_t v2;
  npabi_descr_v3_t v3;
  npabi_descr_v4_t v4;
  npabi_descr_v5_t v5;
  npabi_descr_v6_t v6;
} np_descr_any;
typedef union np_args_any {
  npabi_args_v1_t v1;
  npabi_args_v4_t v4;
} np_args_any;

static const size_t np_descr_size[7] = {0, sizeof(npabi_descr_v1_t), sizeof(npabi_descr_v2_t),
                                        sizeof(npabi_descr_v3_t), sizeof(npabi_descr_v4_t),
                                        sizeof(npabi_descr_v5_t), sizeof(npabi_descr_v6_t)};

static struct {
  pthread_mutex_t mu; /* loading, and init/finalize of communicators */
  int tried;          /* loading was attempted */
  int abi;            /* the version NCCL calls ncclprof with */
  int ver;            /* the chained plugin's version */
  const npabi_profiler_v1_t* t; /* its table: the six pointers sit alike in every version */
  char name[64];
  int live;           /* 1 while it is called (release-stored after everything it needs) */
  int mask;           /* its activation mask: it may keep the pointer and change it later */
  int seen_mask;      /* the value fwd was computed from */
  uint32_t fwd;       /* the event types it is called for */
  int* nccl_mask;     /* NCCL's process-wide mask */
  void* ctx[NP_MAX_COMMS];
  int has_ctx[NP_MAX_COMMS];
  np_centry* side[NP_MAX_COMMS];
  np_centry* cells;
  np_centry* pins;
  uint64_t next_seq;
  uint64_t lost, pins_full, err_code;
  const char* err_call;
  int err_reported, lost_reported, pins_reported, mask_restored;
} np_ch = {.mu = PTHREAD_MUTEX_INITIALIZER};

static __thread uint64_t np_cseq_next __attribute__((tls_model("initial-exec")));
static __thread uint64_t np_cseq_end __attribute__((tls_model("initial-exec")));

/* Our own tables: chaining ncclprof to itself is refused. */
extern npabi_profiler_v1_t ncclProfiler_v1, ncclProfiler_v2, ncclProfiler_v3, ncclProfiler_v4,
    ncclProfiler_v5, ncclProfiler_v6;

static void np_chain_logf(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  np_log(NPABI_LOG_WARN, buf);
}

/* ------------------------------------------------------------------- loading */

static void* np_chain_open(const char* name, char* err, size_t cap) {
  size_t n = strlen(name);
  if (strncasecmp(name, "STATIC_PLUGIN", n) == 0) return dlopen(NULL, RTLD_NOW | RTLD_LOCAL);
  void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (lib) return lib;
  snprintf(err, cap, "%s", dlerror());
  int lib_so = n >= 6 && strncmp(name, "lib", 3) == 0 && strcmp(name + n - 3, ".so") == 0;
  if (strchr(name, '/') || lib_so) return NULL;
  char alt[300];
  snprintf(alt, sizeof alt, "libnccl-profiler-%s.so", name);
  lib = dlopen(alt, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) snprintf(err, cap, "%s; %s", alt, dlerror());
  return lib;
}

/* The loaded object p lies in (its link map), NULL for none. */
static const void* np_object_of(const void* p) {
  Dl_info info;
  void* lm = NULL;
  if (p == NULL || dladdr1(p, &info, &lm, RTLD_DL_LINKMAP) == 0) return NULL;
  return lm;
}

enum { NP_MAP_R = 1, NP_MAP_X = 4 };

/* The mappings of /proc/self/maps holding each of the n addresses: its end (0: none) and its
 * permissions (NP_MAP_*). One pass over the file; at load, under mu, never on NCCL's threads'
 * hot path. Returns 0 when the file cannot be read. */
static int np_maps_find(const uintptr_t* addr, int n, uintptr_t* end, int* perm) {
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[8192];
  size_t have = 0;
  for (int i = 0; i < n; i++) end[i] = 0, perm[i] = 0;
  for (;;) {
    ssize_t got = read(fd, buf + have, sizeof buf - 1 - have);
    if (got <= 0) break;
    have += (size_t)got;
    buf[have] = 0;
    char* line = buf;
    char* nl;
    while ((nl = memchr(line, '\n', have - (size_t)(line - buf))) != NULL) {
      unsigned long lo, hi;
      char perms[5];
      if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) == 3)
        for (int i = 0; i < n; i++)
          if (addr[i] >= lo && addr[i] < hi)
            end[i] = hi,
            perm[i] = (perms[0] == 'r' ? NP_MAP_R : 0) | (perms[2] == 'x' ? NP_MAP_X : 0);
      line = nl + 1;
    }
    have -= (size_t)(line - buf);
    memmove(buf, line, have);
    if (have == sizeof buf - 1) have = 0; /* a line longer than the buffer: not one we need */
  }
  close(fd);
  return 1;
}

/* Whether every function of the table is code of lib: each pointer inside an executable
 * mapping of the object that lib is (not merely of some loaded object: a pointer into its data
 * crashes the job at the first call, one to libc's _exit ends it). *name gets the table's name
 * when that lies in a readable mapping of lib (copied at most up to the mapping's end). */
static int np_table_ok(void* lib, const npabi_profiler_v1_t* t, char* name, size_t cap) {
  const void* fns[5] = {(const void*)t->init, (const void*)t->startEvent, (const void*)t->stopEvent,
                        (const void*)t->recordEventState, (const void*)t->finalize};
  void* lm = NULL;
  if (dlinfo(lib, RTLD_DI_LINKMAP, &lm) != 0 || lm == NULL) return 0;
  uintptr_t addr[6], end[6];
  int perm[6];
  for (int i = 0; i < 5; i++) {
    if (np_object_of(fns[i]) != lm) return 0;
    addr[i] = (uintptr_t)fns[i];
  }
  addr[5] = (uintptr_t)t->name;
  if (!np_maps_find(addr, 6, end, perm)) return 1; /* no /proc: the object check alone */
  for (int i = 0; i < 5; i++)
    if (!end[i] || !(perm[i] & NP_MAP_X)) return 0;
  if (t->name && end[5] && (perm[5] & NP_MAP_R) && np_object_of(t->name) == lm) {
    size_t n = strnlen(t->name, end[5] - addr[5] < cap ? end[5] - addr[5] : cap - 1);
    if (n < cap) memcpy(name, t->name, n), name[n] = 0;
  }
  return 1;
}

static int np_is_self(const void* t) {
  return t == &ncclProfiler_v1 || t == &ncclProfiler_v2 || t == &ncclProfiler_v3 ||
         t == &ncclProfiler_v4 || t == &ncclProfiler_v5 || t == &ncclProfiler_v6;
}

static np_centry* np_chain_map(size_t entries) {
  void* m = mmap(NULL, entries * sizeof(np_centry), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  return m == MAP_FAILED ? NULL : (np_centry*)m;
}

/* ------------------------------------------------------------------- communicators */

static inline uint32_t np_tag_comm(uint64_t tag) {
  return (uint32_t)(tag >> 3) & (NP_MAX_COMMS - 1);
}

/* Whether the chained plugin holds a context for communicator idx (PXN events, of other
 * processes' communicators, always pass). */
static inline int np_chain_comm_live(uint32_t idx) {
  return idx == NP_PXN_COMM || __atomic_load_n(&np_ch.has_ctx[idx], __ATOMIC_ACQUIRE);
}

/* Finds the symbol of the newest version up to `abi`, checks the table; mu held. */
static int np_chain_attach(void* lib, const char* env, int abi) {
  const npabi_profiler_v1_t* t = NULL;
  int v;
  for (v = abi; v >= 1 && t == NULL; v--) {
    char sym[32];
    snprintf(sym, sizeof sym, "ncclProfiler_v%d", v);
    t = (const npabi_profiler_v1_t*)dlsym(lib, sym);
  }
  if (t == NULL) {
    np_chain_logf("NCCLPROF_CHAIN=%s has no ncclProfiler_v%d … ncclProfiler_v1 symbol (not a "
                  "profiler plugin NCCL of this version could load); ncclprof continues without it",
                  env, abi);
    return -1; /* its code never ran: it can be closed */
  }
  if (np_is_self(t)) {
    np_chain_logf("NCCLPROF_CHAIN=%s is ncclprof itself; ncclprof continues without chaining", env);
    return 0;
  }
  if (dlsym(lib, "ncclprof_version") != NULL) { /* its control API: another copy of ncclprof */
    np_chain_logf("NCCLPROF_CHAIN=%s is a copy of ncclprof (another file of the same plugin): two "
                  "instances would double every output; ncclprof continues without chaining", env);
    return -1; /* nothing of it ran but its constructor: it can be closed */
  }
  snprintf(np_ch.name, sizeof np_ch.name, "%s", env);
  if (!np_table_ok(lib, t, np_ch.name, sizeof np_ch.name)) {
    np_chain_logf("NCCLPROF_CHAIN=%s: its ncclProfiler_v%d table has a NULL or invalid function "
                  "pointer (each must be code of that library); ncclprof continues without it",
                  env, v + 1);
    return 0;
  }
  np_ch.cells = np_chain_map(NP_CHAIN_CELLS);
  np_ch.pins = np_chain_map(NP_CHAIN_PINS);
  if (np_ch.cells == NULL || np_ch.pins == NULL) {
    np_chain_logf("NCCLPROF_CHAIN=%s: no memory for its handle tables; ncclprof continues "
                  "without it", env);
    return 0;
  }
  np_ch.t = t;
  np_ch.ver = v + 1;
  return 1;
}

static void np_chain_setup(int abi) {
  if (np_ch.tried) return;
  np_ch.tried = 1;
  np_ch.abi = abi;
  const char* env = getenv("NCCLPROF_CHAIN");
  if (env == NULL || *env == 0 || strcasecmp(env, "none") == 0) return;
  char err[512] = "";
  void* lib = np_chain_open(env, err, sizeof err);
  if (lib == NULL) {
    np_chain_logf("NCCLPROF_CHAIN=%s cannot be loaded (%s); ncclprof continues without it", env,
                  err);
    return;
  }
  int r = np_chain_attach(lib, env, abi);
  if (r < 0) dlclose(lib);
  if (r <= 0) return;
  __atomic_store_n(&np_ch.live, 1, __ATOMIC_RELEASE);
}

/* ------------------------------------------------------------------- masks */

/* The event types the chained plugin is called for: the ones its mask makes NCCL start. */
static uint32_t np_chain_fwd_of(int mask, int ver) {
  uint32_t known = npabi_types_of(ver), f = 0;
  for (uint32_t b = 1; b <= NPABI_CE_BATCH; b <<= 1)
    if ((known & b) && npabi_mask_wants((int)(mask & known), b)) f |= b;
  return f;
}

uint32_t np_chain_nccl_mask(void) {
  if (!__atomic_load_n(&np_ch.live, __ATOMIC_ACQUIRE)) return 0;
  return (uint32_t)__atomic_load_n(&np_ch.mask, __ATOMIC_RELAXED) & npabi_types_of(np_ch.ver);
}

/* Follows the chained plugin's mask into the forwarding set and NCCL's mask. */
static void np_chain_follow_mask(void) {
  int m = __atomic_load_n(&np_ch.mask, __ATOMIC_RELAXED);
  __atomic_store_n(&np_ch.seen_mask, m, __ATOMIC_RELAXED);
  __atomic_store_n(&np_ch.fwd, np_chain_fwd_of(m, np_ch.ver), __ATOMIC_RELEASE);
  int* p = __atomic_load_n(&np_ch.nccl_mask, __ATOMIC_ACQUIRE);
  if (p) __atomic_store_n(p, (int)(np_get_mask() | np_chain_nccl_mask()), __ATOMIC_RELEASE);
}

/* ------------------------------------------------------------------- handle tables */

static inline int np_is_tag(uint64_t h) { return (h & (NP_CHAIN_TAG | 1)) == NP_CHAIN_TAG; }
static inline int np_is_own_sentinel(uint64_t h) {
  return h == NP_H_DROPPED || h == NP_H_SKIPPED || h == NP_H_DISABLED;
}

/* Sequence-lock order: the tag is cleared before the handle changes and set after, and a
 * reader checks the tag on both sides of its read. (ThreadSanitizer does not model fences: its
 * build makes every access sequentially consistent instead.) */
#if defined(NP_TSAN)
#define NP_SEQ_FENCE(order) ((void)0)
#define NP_SEQ_ORDER __ATOMIC_SEQ_CST
#else
#define NP_SEQ_FENCE(order) __atomic_thread_fence(order)
#define NP_SEQ_ORDER __ATOMIC_RELAXED
#endif

static inline void np_entry_put(np_centry* e, uint64_t tag, void* ch) {
  __atomic_store_n(&e->tag, 0, NP_SEQ_ORDER);
  NP_SEQ_FENCE(__ATOMIC_RELEASE);
  __atomic_store_n(&e->ch, ch, NP_SEQ_ORDER);
  __atomic_store_n(&e->tag, tag, __ATOMIC_RELEASE);
}

static inline int np_entry_get(np_centry* e, uint64_t tag, void** ch) {
  if (__atomic_load_n(&e->tag, __ATOMIC_ACQUIRE) != tag) return 0;
  void* c = __atomic_load_n(&e->ch, NP_SEQ_ORDER);
  NP_SEQ_FENCE(__ATOMIC_ACQUIRE);
  if (__atomic_load_n(&e->tag, NP_SEQ_ORDER) != tag) return 0;
  *ch = c;
  return 1;
}

/* Side entries of a communicator: for each window set, window and epoch's low bits a row of
 * slots; then, for ProxyOps and ProxySteps (arena cells, core.h), one entry per cell and
 * generation's low bits. */
static size_t np_side_windows(void) { return 2 * (size_t)np_cfg.nwin * NP_CHAIN_GEN * np_cfg.nslots; }
static size_t np_side_size(void) { return np_side_windows() + (size_t)np_cfg.ncells * NP_CHAIN_GEN; }

/* The side entry of one of ncclprof's handles; NULL when its communicator is not chained. */
static inline np_centry* np_side_entry(uint64_t h) {
  np_centry* s = __atomic_load_n(&np_ch.side[np_h_comm(h)], __ATOMIC_ACQUIRE);
  if (s == NULL) return NULL;
  if (np_h_is_cell(h)) {
    uint32_t cell = np_h_cell(h);
    if (cell >= np_cfg.ncells) return NULL;
    return &s[np_side_windows() + (size_t)cell * NP_CHAIN_GEN + (np_h_gen(h) & (NP_CHAIN_GEN - 1))];
  }
  uint32_t win = np_h_win(h), slot = np_h_slot(h);
  if (win >= np_cfg.nwin || slot >= np_cfg.nslots) return NULL;
  size_t row = ((size_t)np_h_set(h) * np_cfg.nwin + win) * NP_CHAIN_GEN +
               (np_h_epoch(h) & (NP_CHAIN_GEN - 1));
  return &s[row * np_cfg.nslots + slot];
}

static inline np_centry* np_tag_entry(uint64_t tag) {
  return &np_ch.cells[(tag >> NP_CHAIN_SEQ_SHIFT) & (NP_CHAIN_CELLS - 1)];
}

static inline uint32_t np_pin_hash(uint64_t h) {
  return (uint32_t)((h * 0x9E3779B97F4A7C15ull) >> 40);
}

static void np_pin(uint64_t h, void* ch) {
  for (uint32_t i = 0; i < NP_CHAIN_PROBES; i++) {
    np_centry* e = &np_ch.pins[(np_pin_hash(h) + i) & (NP_CHAIN_PINS - 1)];
    uint64_t expect = 0, gone = NP_PIN_GONE;
    if (__atomic_compare_exchange_n(&e->tag, &expect, NP_H_DROPPED, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED) ||
        __atomic_compare_exchange_n(&e->tag, &gone, NP_H_DROPPED, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED)) {
      __atomic_store_n(&e->ch, ch, __ATOMIC_RELAXED);
      __atomic_store_n(&e->tag, h, __ATOMIC_RELEASE); /* a claimed entry keeps its handle */
      return;
    }
  }
  __atomic_fetch_add(&np_ch.pins_full, 1, __ATOMIC_RELAXED);
}

static int np_pinned(uint64_t h, void** ch) {
  for (uint32_t i = 0; i < NP_CHAIN_PROBES; i++) {
    np_centry* e = &np_ch.pins[(np_pin_hash(h) + i) & (NP_CHAIN_PINS - 1)];
    uint64_t t = __atomic_load_n(&e->tag, __ATOMIC_ACQUIRE);
    if (t == h) {
      *ch = __atomic_load_n(&e->ch, __ATOMIC_RELAXED);
      return 1;
    }
    if (t == 0) return 0;
  }
  return 0;
}

enum { NP_NONE = -1, NP_LOST = 0, NP_FOUND = 1 };

/* The chained plugin's handle for a handle NCCL passed: NP_FOUND (*ch may be NULL: it returned
 * none, or its communicator is finalized), NP_LOST (overwritten: counted), or NP_NONE (NULL, a
 * sentinel, or not one of ours). Called inside an active section (see Finalize above). */
static int np_chain_find(uint64_t h, void** ch) {
  *ch = NULL;
  if ((np_is_tag(h) && !np_chain_comm_live(np_tag_comm(h))) ||
      ((h & 1) && !np_chain_comm_live(np_h_comm(h))))
    return NP_FOUND; /* finalized for the chained plugin: nothing of it is called again */
  if (np_is_tag(h)) {
    if (np_entry_get(np_tag_entry(h), h, ch) || np_pinned(h, ch)) return NP_FOUND;
  } else if (h & 1) {
    np_centry* e = np_side_entry(h);
    if (e == NULL) return NP_FOUND; /* a communicator the chained plugin does not know */
    if (np_entry_get(e, h, ch) || np_pinned(h, ch)) return NP_FOUND;
  } else {
    return NP_NONE;
  }
  __atomic_fetch_add(&np_ch.lost, 1, __ATOMIC_RELAXED);
  return NP_LOST;
}

/* A parent for the chained plugin: its own handle for ours, a foreign pointer as it is. Sets
 * *none when it has no handle for that parent (it returned NULL, or never saw it). */
static void* np_chain_parent(void* p, int* none) {
  void* ch;
  int r = np_chain_find((uint64_t)(uintptr_t)p, &ch);
  if (r == NP_FOUND) {
    *none = ch == NULL;
    return ch;
  }
  if (r == NP_LOST || p == NULL || np_is_own_sentinel((uint64_t)(uintptr_t)p)) {
    *none = r != NP_LOST;
    return NULL;
  }
  *none = 0;
  return p;
}

/* NCCL's handle for an event (on communicator idx), remembered with the chained plugin's. */
static void np_chain_keep(uint64_t h, void* ch, uint32_t idx, int pinned, void** eh) {
  uint64_t key = h;
  if (h & 1) {
    np_centry* e = np_side_entry(h);
    if (e) np_entry_put(e, h, ch);
  } else if (ch != NULL) {
    if (np_cseq_next == np_cseq_end) { /* a block of sequence numbers per thread */
      np_cseq_next = __atomic_fetch_add(&np_ch.next_seq, 64, __ATOMIC_RELAXED);
      np_cseq_end = np_cseq_next + 64;
    }
    key = NP_CHAIN_TAG | (np_cseq_next++ << NP_CHAIN_SEQ_SHIFT) | ((uint64_t)idx << 3) | (h & 6);
    np_entry_put(np_tag_entry(key), key, ch);
    *eh = (void*)(uintptr_t)key;
  } else {
    return;
  }
  if (pinned && ch != NULL) np_pin(key, ch);
}

/* ------------------------------------------------------------------- errors */

static void np_chain_error(npabi_result_t r, const char* call) {
  if (__atomic_exchange_n(&np_ch.live, 0, __ATOMIC_ACQ_REL) == 0) return;
  np_ch.err_call = call;
  __atomic_store_n(&np_ch.err_code, (uint64_t)r + 1, __ATOMIC_RELEASE);
}

void np_chain_report(void) {
  if (!__atomic_load_n(&np_chain_on, __ATOMIC_ACQUIRE)) return; /* init failures are said there */
  uint64_t code = __atomic_load_n(&np_ch.err_code, __ATOMIC_ACQUIRE);
  if (code && !__atomic_exchange_n(&np_ch.err_reported, 1, __ATOMIC_ACQ_REL)) {
    np_chain_logf("chained profiler plugin %s returned error %d from %s: it is detached (not "
                  "called again); ncclprof continues", np_ch.name, (int)code - 1, np_ch.err_call);
  }
  uint64_t lost = __atomic_load_n(&np_ch.lost, __ATOMIC_RELAXED);
  if (lost && !np_ch.lost_reported) {
    np_ch.lost_reported = 1;
    np_chain_logf("chained profiler plugin %s: %llu of its handles could not be found (ncclprof's "
                  "windows were reused while NCCL still referred to them); it got NULL parents or "
                  "missed stops. Raise NCCLPROF_WINDOW_SLOTS to keep them longer",
                  np_ch.name, (unsigned long long)lost);
  }
  if (__atomic_load_n(&np_ch.pins_full, __ATOMIC_RELAXED) && !np_ch.pins_reported) {
    np_ch.pins_reported = 1;
    np_chain_logf("chained profiler plugin %s: more graph-captured operations than the %u kept "
                  "for it; replays of the others may reach it with NULL parents",
                  np_ch.name, NP_CHAIN_PINS);
  }
  if (__atomic_load_n(&np_ch.live, __ATOMIC_ACQUIRE)) {
    if (__atomic_load_n(&np_ch.mask, __ATOMIC_RELAXED) !=
        __atomic_load_n(&np_ch.seen_mask, __ATOMIC_RELAXED))
      np_chain_follow_mask();
  } else if (!np_ch.mask_restored && np_ch.nccl_mask) { /* NCCL no longer emits for it */
    np_ch.mask_restored = 1;
    __atomic_store_n(np_ch.nccl_mask, (int)np_get_mask(), __ATOMIC_RELEASE);
  }
}

/* ------------------------------------------------------------------- init and finalize */

static npabi_result_t np_chain_call_init(void** cctx, uint64_t id, const char* name, int nnodes,
                                         int nranks, int rank, npabi_logger_t logfn) {
  const void* init = (const void*)np_ch.t->init;
  if (np_ch.ver <= 3) return ((npabi_init_v1_fn)init)(cctx, &np_ch.mask);
  if (np_ch.ver == 4)
    return ((npabi_init_v4_fn)init)(cctx, &np_ch.mask, name, id, nnodes, nranks, rank, logfn);
  return ((npabi_init_v5_fn)init)(cctx, id, &np_ch.mask, name, nnodes, nranks, rank, logfn);
}

static int np_chain_sides(uint32_t idx) {
  size_t n = np_side_size();
  uint32_t need[2] = {NP_PXN_COMM, idx};
  for (int i = 0; i < 2; i++) {
    if (np_ch.side[need[i]]) continue;
    np_centry* s = np_chain_map(n);
    if (s == NULL) return 0;
    __atomic_store_n(&np_ch.side[need[i]], s, __ATOMIC_RELEASE);
  }
  return 1;
}

void np_chain_init(int abi, void* own_ctx, uint64_t comm_id, const char* name, int nnodes,
                   int nranks, int rank, npabi_logger_t logfn, int* mask) {
  np_comm* c = np_comm_of_ctx(own_ctx);
  if (c == NULL) return; /* ncclprof does not profile it: neither does what it chains */
  uint32_t idx = (uint32_t)(c - np_comms);
  pthread_mutex_lock(&np_ch.mu);
  np_chain_setup(abi);
  int ready = __atomic_load_n(&np_ch.live, __ATOMIC_ACQUIRE) && np_chain_sides(idx);
  if (!ready && __atomic_load_n(&np_ch.live, __ATOMIC_ACQUIRE))
    np_chain_logf("chained profiler plugin %s: no memory for the handle table of communicator "
                  "%llx; it does not see that communicator", np_ch.name, (unsigned long long)comm_id);
  pthread_mutex_unlock(&np_ch.mu);
  if (!ready) return;
  /* Its init runs outside the lock: communicators NCCL creates on several threads at once are
   * not made to wait for each other's. */
  void* cctx = NULL;
  npabi_result_t r = np_chain_call_init(&cctx, comm_id, name, nnodes, nranks, rank, logfn);
  if (r != NPABI_SUCCESS) {
    np_chain_error(r, "init");
    if (!__atomic_exchange_n(&np_ch.err_reported, 1, __ATOMIC_ACQ_REL))
      np_chain_logf("chained profiler plugin %s returned error %d from init: it is detached (not "
                    "called again); ncclprof continues", np_ch.name, (int)r);
    return;
  }
  pthread_mutex_lock(&np_ch.mu);
  __atomic_store_n(&np_ch.ctx[idx], cctx, __ATOMIC_RELAXED); /* published by has_ctx below */
  __atomic_store_n(&np_ch.has_ctx[idx], 1, __ATOMIC_RELEASE);
  if (mask) __atomic_store_n(&np_ch.nccl_mask, mask, __ATOMIC_RELEASE);
  np_chain_follow_mask();
  if (!np_chain_on) {
    char msg[256];
    snprintf(msg, sizeof msg, "chaining profiler plugin %s (ABI v%d; NCCL calls ncclprof at v%d)",
             np_ch.name, np_ch.ver, np_ch.abi);
    np_log(NPABI_LOG_INFO, msg);
    __atomic_store_n(&np_chain_on, 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&np_ch.mu);
}

/* Forgets every handle of communicator idx (forwarding to it has stopped and no forward is in
 * flight): its side entries, its chain handles and its pins. mu held. */
static void np_chain_forget(uint32_t idx) {
  np_centry* s = np_ch.side[idx];
  for (size_t i = 0; s && i < np_side_size(); i++) /* atomic: forwards may have written them */
    __atomic_store_n(&s[i].tag, 0, __ATOMIC_RELAXED);
  for (uint32_t i = 0; i < NP_CHAIN_CELLS; i++) {
    uint64_t tag = __atomic_load_n(&np_ch.cells[i].tag, __ATOMIC_ACQUIRE);
    if (np_is_tag(tag) && np_tag_comm(tag) == idx)
      __atomic_compare_exchange_n(&np_ch.cells[i].tag, &tag, 0, 0, __ATOMIC_ACQ_REL,
                                  __ATOMIC_RELAXED);
  }
  for (uint32_t i = 0; i < NP_CHAIN_PINS; i++) {
    uint64_t tag = __atomic_load_n(&np_ch.pins[i].tag, __ATOMIC_ACQUIRE);
    int mine = np_is_tag(tag) ? np_tag_comm(tag) == idx : (tag & 1) && np_h_comm(tag) == idx;
    if (mine)
      __atomic_compare_exchange_n(&np_ch.pins[i].tag, &tag, NP_PIN_GONE, 0, __ATOMIC_ACQ_REL,
                                  __ATOMIC_RELAXED);
  }
}

/* Waits for the forwards in flight (about 1 s at most, as np_open_comm does). */
static int np_chain_settle(void) {
  for (int i = 0; i < 50; i++)
    if (np_quiesce()) return 1;
  return 0;
}

void np_chain_finalize(void* own_ctx) {
  np_comm* c = np_comm_of_ctx(own_ctx);
  if (c == NULL) return;
  uint32_t idx = (uint32_t)(c - np_comms);
  pthread_mutex_lock(&np_ch.mu);
  int had = __atomic_exchange_n(&np_ch.has_ctx[idx], 0, __ATOMIC_ACQ_REL);
  void* cctx = __atomic_exchange_n(&np_ch.ctx[idx], NULL, __ATOMIC_RELAXED);
  int settled = !had || np_chain_settle();
  if (had && settled) np_chain_forget(idx);
  pthread_mutex_unlock(&np_ch.mu);
  if (!had || !__atomic_load_n(&np_ch.live, __ATOMIC_ACQUIRE)) return;
  if (!settled) { /* a callback is still inside the chained plugin: finalizing now could free
                   * what it uses; its context is leaked instead */
    np_chain_logf("chained profiler plugin %s: a callback on communicator %u stayed inside it for "
                  "over a second while NCCL finalized the communicator; its finalize is not "
                  "called for that communicator (its context is left as it is)", np_ch.name, idx);
    return;
  }
  if (cctx == NULL && np_ch.abi >= 5) return; /* NCCL 2.28+ skips finalize(NULL) */
  npabi_result_t r = np_ch.t->finalize(cctx);
  if (r != NPABI_SUCCESS) {
    np_chain_error(r, "finalize");
    np_chain_report(); /* not on a callback thread: say it now */
  }
}

/* ------------------------------------------------------------------- descriptors */

/* One event, version-neutral: what a descriptor of v1–v4 needs (older plugins only). The
 * proxy members keep one layout from v1 (ProxyOp, ProxyStep) and v3 (KernelCh, NetPlugin) on. */
typedef struct np_cev {
  void* parent;
  int rank;
  const char *name, *func, *dtype, *algo, *proto;
  uint64_t hash, seq;
  const void* sendbuff;
  void *recvbuff, *buff;
  size_t count, traffic;
  int root, peer;
  uint8_t nch, nwarps;
  __typeof__(((npabi_descr_v1_t*)0)->proxyOp) op;
  int step;
  uint8_t channel;
  uint64_t ptimer;
  int64_t net_id;
  void* net_data;
} np_cev;

#define NP_READ_COLL(e, c)                                                                       \
  do {                                                                                           \
    (e)->seq = (c).seqNumber;                                                                    \
    (e)->func = (c).func;                                                                        \
    (e)->sendbuff = (c).sendBuff;                                                                \
    (e)->recvbuff = (c).recvBuff;                                                                \
    (e)->count = (c).count;                                                                      \
    (e)->root = (c).root;                                                                        \
    (e)->dtype = (c).datatype;                                                                   \
    (e)->nwarps = (c).nWarps;                                                                    \
    (e)->algo = (c).algo;                                                                        \
    (e)->proto = (c).proto;                                                                      \
  } while (0)
#define NP_READ_P2P(e, p)                                                                        \
  do {                                                                                           \
    (e)->func = (p).func;                                                                        \
    (e)->buff = (p).buff;                                                                        \
    (e)->dtype = (p).datatype;                                                                   \
    (e)->count = (p).count;                                                                      \
    (e)->peer = (p).peer;                                                                        \
  } while (0)

static void np_read_coll(int abi, const np_descr_any* d, np_cev* e) {
  if (abi >= 4) { /* v5/v6 coll: v4's members, then parentGroup */
    NP_READ_COLL(e, d->v4.coll);
    e->nch = d->v4.coll.nChannels;
    if (abi >= 5) e->parent = d->v5.coll.parentGroup; /* the v4 hierarchy */
    return;
  }
  if (abi == 3) {
    NP_READ_COLL(e, d->v3.coll);
    e->nch = d->v3.coll.nMaxChannels;
  } else {
    NP_READ_COLL(e, d->v2.coll);
    e->nch = d->v2.coll.nMaxChannels;
    e->traffic = d->v2.coll.trafficBytes;
  }
  e->name = d->v2.coll.name; /* same place in v2 and v3 */
  e->hash = d->v2.coll.commHash;
}

static void np_read_p2p(int abi, const np_descr_any* d, np_cev* e) {
  if (abi >= 4) {
    NP_READ_P2P(e, d->v4.p2p);
    e->nch = d->v4.p2p.nChannels;
    if (abi >= 5) e->parent = d->v5.p2p.parentGroup;
    return;
  }
  NP_READ_P2P(e, d->v2.p2p); /* v2 and v3 alike */
  e->name = d->v2.p2p.name;
  e->hash = d->v2.p2p.commHash;
}

/* Reads NCCL's descriptor (version abi, 2–6) into e; parents as NCCL passed them. */
static void np_read(int abi, uint64_t bit, const np_descr_any* d, np_cev* e) {
  memset(e, 0, sizeof *e);
  e->parent = d->v1.parentObj;
  e->rank = d->v1.rank;
  if (bit == NPABI_COLL) np_read_coll(abi, d, e);
  if (bit == NPABI_P2P) np_read_p2p(abi, d, e);
  e->op = d->v1.proxyOp;
  e->step = d->v1.proxyStep.step;
  if (abi >= 3) {
    e->channel = d->v3.kernelCh.channelId;
    e->net_id = d->v3.netPlugin.id;
    e->net_data = d->v3.netPlugin.data;
  }
  if (abi >= 4) e->ptimer = d->v4.kernelCh.pTimer;
}

/* v1 carries enum values: a name's index in NCCL's order, the table size when unknown. */
static uint8_t np_enum(const char* s, const char* const* names, int n) {
  for (int i = 0; s && i < n; i++)
    if (strcmp(s, names[i]) == 0) return (uint8_t)i;
  return (uint8_t)n;
}
#define NP_ENUM(s, table) np_enum((s), (table), (int)(sizeof(table) / sizeof((table)[0])))

#define NP_WRITE_COLL(c, e)                                                                      \
  do {                                                                                           \
    (c).seqNumber = (e)->seq;                                                                    \
    (c).sendBuff = (e)->sendbuff;                                                                \
    (c).recvBuff = (e)->recvbuff;                                                                \
    (c).count = (e)->count;                                                                      \
    (c).root = (e)->root;                                                                        \
    (c).nWarps = (e)->nwarps;                                                                    \
  } while (0)
#define NP_WRITE_STRINGS(c, e)                                                                   \
  do {                                                                                           \
    (c).func = (e)->func;                                                                        \
    (c).datatype = (e)->dtype;                                                                   \
    (c).algo = (e)->algo;                                                                        \
    (c).proto = (e)->proto;                                                                      \
  } while (0)
#define NP_WRITE_P2P(p, e)                                                                       \
  do {                                                                                           \
    (p).buff = (e)->buff;                                                                        \
    (p).count = (e)->count;                                                                      \
    (p).peer = (e)->peer;                                                                        \
  } while (0)

static void np_write_coll(int ver, const np_cev* e, np_descr_any* out) {
  switch (ver) {
  case 4:
    NP_WRITE_COLL(out->v4.coll, e);
    NP_WRITE_STRINGS(out->v4.coll, e);
    out->v4.coll.nChannels = e->nch;
    return;
  case 3:
    NP_WRITE_COLL(out->v3.coll, e);
    NP_WRITE_STRINGS(out->v3.coll, e);
    out->v3.coll.nMaxChannels = e->nch;
    break;
  case 2:
    NP_WRITE_COLL(out->v2.coll, e);
    NP_WRITE_STRINGS(out->v2.coll, e);
    out->v2.coll.nMaxChannels = e->nch;
    out->v2.coll.trafficBytes = e->traffic;
    break;
  default:
    NP_WRITE_COLL(out->v1.coll, e);
    out->v1.coll.func = NP_ENUM(e->func, np_func_names);
    out->v1.coll.datatype = NP_ENUM(e->dtype, np_dtype_names);
    out->v1.coll.algo = NP_ENUM(e->algo, np_algo_names);
    out->v1.coll.proto = NP_ENUM(e->proto, np_proto_names);
    out->v1.coll.nMaxChannels = e->nch;
    out->v1.coll.trafficBytes = e->traffic;
  }
  out->v1.coll.name = e->name; /* same place in v1–v3 */
  out->v1.coll.commHash = e->hash;
}

static void np_write_p2p(int ver, const np_cev* e, np_descr_any* out) {
  if (ver == 4) {
    NP_WRITE_P2P(out->v4.p2p, e);
    out->v4.p2p.func = e->func;
    out->v4.p2p.datatype = e->dtype;
    out->v4.p2p.nChannels = e->nch;
    return;
  }
  if (ver >= 2) { /* v2 and v3 alike */
    NP_WRITE_P2P(out->v2.p2p, e);
    out->v2.p2p.func = e->func;
    out->v2.p2p.datatype = e->dtype;
  } else {
    NP_WRITE_P2P(out->v1.p2p, e);
    out->v1.p2p.func = NP_ENUM(e->func, np_func_names);
    out->v1.p2p.datatype = NP_ENUM(e->dtype, np_dtype_names);
  }
  out->v1.p2p.name = e->name;
  out->v1.p2p.commHash = e->hash;
}

/* Writes e as a descriptor of version ver (1–4) into out, zeroed first as NCCL's adapters do. */
static void np_write(int ver, uint64_t bit, const np_cev* e, np_descr_any* out) {
  memset(out, 0, sizeof *out);
  out->v1.type = (uint8_t)bit;
  out->v1.parentObj = e->parent;
  out->v1.rank = e->rank;
  switch (bit) {
  case NPABI_COLL: np_write_coll(ver, e, out); break;
  case NPABI_P2P: np_write_p2p(ver, e, out); break;
  case NPABI_PROXY_OP: out->v1.proxyOp = e->op; break;
  case NPABI_PROXY_STEP: out->v1.proxyStep.step = e->step; break;
  case NPABI_KERNEL_CH:
    out->v3.kernelCh.channelId = e->channel;
    if (ver >= 4) out->v4.kernelCh.pTimer = e->ptimer;
    break;
  case NPABI_NET_PLUGIN:
    out->v3.netPlugin.id = e->net_id;
    out->v3.netPlugin.data = e->net_data;
    break;
  }
}

static inline int np_is_pxn(uint64_t bit, const np_descr_any* d) {
  return bit == NPABI_PROXY_OP && d->v1.proxyOp.pid != np_pid; /* pid: offset 24 in every version */
}

/* The chained plugin's descriptor for NCCL's d, parents translated. Returns 0 when NCCL would
 * not have started this event for it. */
static int np_chain_descr(int abi, uint64_t bit, const np_descr_any* d, np_descr_any* out) {
  int ver = np_ch.ver, none = 0, none_group = 0;
  int pxn = np_is_pxn(bit, d); /* another process's pointers: passed as they are */
  int coll_like = bit == NPABI_COLL || bit == NPABI_P2P;
  if (ver == abi || (abi == 6 && ver == 5)) { /* v5 members sit in v6 as in v5 */
    memcpy(out, d, np_descr_size[ver]);
    if (!pxn) out->v1.parentObj = np_chain_parent(d->v1.parentObj, &none);
    if (ver >= 5 && bit == NPABI_COLL)
      out->v5.coll.parentGroup = np_chain_parent(d->v5.coll.parentGroup, &none_group);
    if (ver >= 5 && bit == NPABI_P2P)
      out->v5.p2p.parentGroup = np_chain_parent(d->v5.p2p.parentGroup, &none_group);
  } else {
    np_cev e;
    np_read(abi, bit, d, &e);
    if (!pxn) e.parent = np_chain_parent(e.parent, &none);
    np_write(ver, bit, &e, out);
  }
  /* NCCL starts CeSync/CeBatch only under a CeColl handle, and up to 2.27 Coll/P2p only under a
   * Group handle: events the chained plugin would not have got from NCCL directly. */
  if (none && (bit == NPABI_CE_SYNC || bit == NPABI_CE_BATCH)) return 0;
  if (none && coll_like && abi <= 4) return 0;
  return 1;
}

/* The chained plugin's context for an event NCCL sent with ctx, and its communicator's index;
 * 0: not one it knows (or finalized). */
static int np_chain_ctx(void* ctx, int pxn, void** out, uint32_t* idx) {
  np_comm* c = pxn ? NULL : np_comm_of_ctx(ctx);
  uint32_t token;
  if (c == NULL && !pxn && np_ctx_entry(ctx, &token) != NULL)
    return 0; /* ncclprof's context of a communicator since destroyed: never theirs to see */
  if (c != NULL) {
    *idx = (uint32_t)(c - np_comms);
    if (!__atomic_load_n(&np_ch.has_ctx[*idx], __ATOMIC_ACQUIRE)) return 0;
    *out = __atomic_load_n(&np_ch.ctx[*idx], __ATOMIC_RELAXED);
    return 1;
  }
  *idx = NP_PXN_COMM;
  *out = ctx; /* PXN, or a child of a PXN op: another process's context, as NCCL passes it */
  return ctx != NULL;
}

static int np_captured(int abi, uint64_t bit, const np_descr_any* d) {
  if (abi < 5) return 0;
  return (bit == NPABI_GROUP_API && d->v5.groupApi.graphCaptured) ||
         (bit == NPABI_COLL_API && d->v5.collApi.graphCaptured) ||
         (bit == NPABI_P2P_API && d->v5.p2pApi.graphCaptured);
}

/* ncclprof is shown, for a parent that is a chain handle, the sentinel it returned itself. */
static const void* np_own_view(int abi, uint64_t bit, const np_descr_any* d, np_descr_any* copy) {
  void* const* group = NULL;
  if (abi >= 5 && bit == NPABI_COLL) group = &d->v5.coll.parentGroup;
  if (abi >= 5 && bit == NPABI_P2P) group = &d->v5.p2p.parentGroup;
  int p = np_is_tag((uint64_t)(uintptr_t)d->v1.parentObj);
  int g = group && np_is_tag((uint64_t)(uintptr_t)*group);
  if (!p && !g) return d;
  memcpy(copy, d, np_descr_size[abi]);
  if (p) copy->v1.parentObj = (void*)((uintptr_t)d->v1.parentObj & 6);
  if (g && bit == NPABI_COLL) copy->v5.coll.parentGroup = (void*)((uintptr_t)*group & 6);
  if (g && bit == NPABI_P2P) copy->v5.p2p.parentGroup = (void*)((uintptr_t)*group & 6);
  return copy;
}

/* ------------------------------------------------------------------- callbacks */

/* Enters the active section a forward runs in (after ncclprof's own part, which has its own);
 * NULL when the thread has no slot: the chained plugin then misses the call (counted as lost). */
static np_thread* np_chain_enter(void) {
  np_thread* t = np_enter();
  if (NP_UNLIKELY(t == NULL)) __atomic_fetch_add(&np_ch.lost, 1, __ATOMIC_RELAXED);
  return t;
}

npabi_result_t np_chain_start(int abi, void* ctx, void** eh, void* descr, np_start_fn own) {
  if (NP_UNLIKELY(eh == NULL || descr == NULL)) return own(ctx, eh, descr);
  const np_descr_any* d = (const np_descr_any*)descr;
  uint64_t bit = abi >= 5 ? d->v5.type : d->v1.type;
  np_descr_any mine;
  own(ctx, eh, (void*)np_own_view(abi, bit, d, &mine));
  if (NP_UNLIKELY(!__atomic_load_n(&np_ch.live, __ATOMIC_ACQUIRE))) return NPABI_SUCCESS;
  np_thread* t = np_chain_enter();
  if (t == NULL) return NPABI_SUCCESS;
  uint64_t h = (uint64_t)(uintptr_t)*eh;
  void* ch = NULL;
  uint32_t idx = NP_PXN_COMM;
  if ((__atomic_load_n(&np_ch.fwd, __ATOMIC_RELAXED) & bit) && (bit & (bit - 1)) == 0) {
    np_descr_any theirs;
    void* cctx;
    if (np_chain_ctx(ctx, np_is_pxn(bit, d), &cctx, &idx) && np_chain_descr(abi, bit, d, &theirs)) {
      npabi_result_t r =
          ((npabi_result_t(*)(void*, void**, void*))np_ch.t->startEvent)(cctx, &ch, &theirs);
      if (NP_UNLIKELY(r != NPABI_SUCCESS)) {
        np_chain_error(r, "startEvent");
        ch = NULL;
      }
    }
  }
  np_chain_keep(h, ch, idx, np_captured(abi, bit, d), eh);
  np_leave(t);
  return NPABI_SUCCESS;
}

npabi_result_t np_chain_stop(void* eh, npabi_stop_fn own) {
  uint64_t h = (uint64_t)(uintptr_t)eh;
  if (!np_is_tag(h)) own(eh);
  void* ch;
  if (!__atomic_load_n(&np_ch.live, __ATOMIC_ACQUIRE)) return NPABI_SUCCESS;
  np_thread* t = np_chain_enter();
  if (t == NULL) return NPABI_SUCCESS;
  if (np_chain_find(h, &ch) == NP_FOUND && ch) {
    npabi_result_t r = np_ch.t->stopEvent(ch);
    if (NP_UNLIKELY(r != NPABI_SUCCESS)) np_chain_error(r, "stopEvent");
  }
  np_leave(t);
  return NPABI_SUCCESS;
}

/* State arguments for the chained plugin (what NCCL's adapters pass); NULL *skip: none. */
static void* np_chain_args(int layout, npabi_state_t s, void* args, np_args_any* buf, int* skip) {
  int ver = np_ch.ver;
  *skip = 0;
  if (layout < 4 || ver >= 6) return args; /* same layout, same states */
  if (ver >= 4) {
    if ((ver == 4 && s > NPABI_KERNEL_CH_STOP) || (ver == 5 && s >= NPABI_CE_COLL_START)) *skip = 1;
    if (args == NULL && ver == 5 && np_ch.abi == 6) { /* the v5 adapter passes its own args */
      memset(buf, 0, sizeof *buf);
      return buf;
    }
    return args;
  }
  memset(buf, 0, sizeof *buf); /* v1–v3 from v4+: ProxyCtrl (appended count) and step states */
  if (s >= NPABI_PROXY_CTRL_IDLE && s <= NPABI_PROXY_CTRL_APPEND_END) {
    if (args) buf->v1.proxyCtrl.appendedProxyOps = ((npabi_args_v4_t*)args)->proxyCtrl.appendedProxyOps;
  } else if (s < NPABI_PROXY_STEP_SEND_GPU_WAIT || s > NPABI_PROXY_STEP_RECV_GPU_WAIT) {
    *skip = 1;
  }
  return buf;
}

npabi_result_t np_chain_record(int layout, void* eh, npabi_state_t s, void* args,
                               np_record_fn own) {
  uint64_t h = (uint64_t)(uintptr_t)eh;
  if (!np_is_tag(h)) own(eh, s, args);
  void* ch;
  if (!__atomic_load_n(&np_ch.live, __ATOMIC_ACQUIRE)) return NPABI_SUCCESS;
  np_thread* t = np_chain_enter();
  if (t == NULL) return NPABI_SUCCESS;
  np_args_any buf;
  int skip;
  if (np_chain_find(h, &ch) == NP_FOUND && ch != NULL) {
    void* a = np_chain_args(layout, s, args, &buf, &skip);
    npabi_result_t r = skip ? NPABI_SUCCESS :
        ((npabi_result_t(*)(void*, npabi_state_t, void*))np_ch.t->recordEventState)(ch, s, a);
    if (NP_UNLIKELY(r != NPABI_SUCCESS)) np_chain_error(r, "recordEventState");
  }
  np_leave(t);
  return NPABI_SUCCESS;
}
