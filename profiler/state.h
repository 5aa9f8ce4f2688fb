/*
 * state.h — the state the C library's files share, declared once: the communicator table and
 * its windows, arena cells and sums, the per-thread states, the globals the hot path reads,
 * and the functions one file defines for the others (the sections that were core.c, each in
 * its own file, and the adapters). Declarations only: the inline hot path is hot.h, the clock
 * it reads ticks.h; the design is described in core.h. It includes core.h and system headers
 * only, so no header it includes can include it back.
 */
#ifndef NCCLPROF_STATE_H
#define NCCLPROF_STATE_H

#include <pthread.h>
#include <semaphore.h>
#include <stddef.h>
#include <sys/types.h>

#include "core.h"

/* Window states, packed with the epoch in one word: se = epoch << 8 | state. */
enum { NP_W_FREE = 0, NP_W_FILLING = 1, NP_W_CLOSING = 2, NP_W_SEALED = 3 };
#define NP_SE(epoch, state) (((uint64_t)(epoch) << 8) | (uint64_t)(state))
#define NP_SE_STATE(se) ((uint32_t)((se) & 0xff))
#define NP_SE_EPOCH(se) ((uint32_t)((se) >> 8) & NP_EPOCH_MASK)
/* The epoch after e: 28 bits (NP_EPOCH_MASK), never 0 (a thread's block cache uses 0 for "no
 * block"). */
static inline uint32_t np_next_epoch(uint32_t e) {
  uint32_t n = (e + 1) & NP_EPOCH_MASK;
  return n ? n : 1;
}

typedef struct np_window {
  uint64_t se;        /* epoch and state; read by every callback, written rarely */
  uint64_t open_tsc;  /* when it became FILLING */
  uint64_t close_tsc; /* when it became CLOSING */
  np_event* slots;
  uint32_t scan_from; /* drainer only: slots below are known stopped */
  uint32_t pad00;
  uint8_t pad0[24];
  uint32_t claimed; /* next unclaimed slot: its own cache line, the one contended counter */
  uint8_t pad1[60];
} np_window;
_Static_assert(sizeof(np_window) == 128, "np_window keeps its claim counter on its own line");

/* One set of windows (operation or detail). */
typedef struct np_wset {
  uint32_t cur;      /* index of the FILLING window */
  uint32_t rotating; /* rotation in progress */
  uint32_t nwin, nslots, block, trigger;
  uint8_t pad[40];
  np_window win[NP_MAX_WINDOWS];
} np_wset;
_Static_assert(sizeof(np_wset) == 64 + NP_MAX_WINDOWS * 128, "np_wset layout");

/* A collective function's last seq on a communicator and how many times in a row it came:
 * NCCL gives every replay of a CUDA-graph-captured collective the same seqNumber (from 2.26,
 * unless KernelCh is on: src/plugin/profiler.cc ncclProfilerStartTaskEvents, the `persistent`
 * test), so sampling by seq alone would trace all of a graph's replays or none. Written by the
 * threads that start Coll events (the launching thread, CUDA's host-callback thread for
 * replays): relaxed atomics, a race costs one sampling choice, never a count. */
typedef struct np_repeat {
  const char* func; /* NCCL's name string, compared by address */
  uint64_t seq, k;  /* k: repeats of seq so far (0: its first occurrence) */
} np_repeat;
#define NP_REPEATS 8

/* A receive connection (channel, peer) of a communicator, as its proxy thread sees it. NCCL
 * queues a ProxyOp behind the one its connection is running (src/proxy.cc ProxyAppend: the new
 * args becomes `nextPeer`, started for the profiler at once, progressed only when removeOp puts
 * it in its predecessor's place), so it can wait with no state and no step while later
 * operations on other connections finish. Ops of one connection end in start order: one whose
 * connection has not ended every op started before it is queued, not abandoned. */
typedef struct np_conn {
  uint32_t key;      /* channel and peer + 1; 0: unused */
  uint32_t started;  /* receive ProxyOps started on it */
  uint32_t ended;    /* ... of them stopped or retired */
  uint32_t pad;
  uint64_t t_stop;   /* when one of them last stopped (retirements do not count: never progressed) */
} np_conn;
_Static_assert(sizeof(np_conn) == 24, "np_conn layout");

/* An arena cell: a ProxyOp or a ProxyStep while it is in flight. `gs` is the generation << 1,
 * plus 1 while the cell is in use; a handle names the generation it was given, so a stop or
 * state for a freed (or reused) cell is recognised as stale. */
typedef struct __attribute__((aligned(64))) np_cell {
  uint64_t gs;
  uint64_t parent;  /* ProxyOp: its Coll/P2p (a window handle); ProxyStep: its ProxyOp (a cell) */
  uint64_t t_start;
  uint64_t t_last;  /* latest state, or for a ProxyOp its latest step activity */
  uint32_t tid;
  int32_t rank;
  uint8_t type, abi, channel, is_send;
  int32_t peer;
  uint16_t nstates, sflags;
  int32_t last_state; /* npabi_state_t of the latest state, -1 before the first */
  union {
    struct {
      uint64_t t_state[6]; /* NP_ST_* */
      uint64_t trans_size; /* the transfer's own bytes (v1–v3: from the op's running total) */
      int32_t step;
      uint16_t npeerwait;
      uint16_t nrestarts; /* starts of the same step that reused this cell (net.cc restarts) */
    } step;
    struct {
      uint64_t record; /* its record in the operation windows (0 if it got no slot) */
      np_op_progress prog;
      int32_t nsteps, pid;
      uint64_t last_step; /* handle of its latest step (0: none yet, so no step activity) */
    } op;
  } u;
  int32_t chunk; /* ProxyOp: chunkSize, for its record */
  uint32_t conn_seq; /* receive ProxyOp: how many its connection started before it (np_conn) */
} np_cell;
_Static_assert(sizeof(np_cell) == 128, "np_cell is 128 bytes");

/* Transfer sums of one key (see np_xfer in core.h). Written by one thread only: the writer is
 * part of the key, so a bucket is never updated concurrently and needs no atomic
 * read-modify-write; the drainer reads the running sums. */
typedef struct np_xbucket {
  uint64_t key; /* kind << 60 | writer << 48 | rank (24) << 24 | id (24); 0: empty */
  uint64_t size;
  uint64_t n, bytes, sum_t, t_min, t_max;
  uint64_t sum_t2; /* the bits of a double: stored and loaded whole, like the others */
} np_xbucket;
_Static_assert(sizeof(np_xbucket) == 64, "np_xbucket is one cache line");

/* One key of the lost-operation table (core.h np_lost_op); tag 0: empty. */
typedef struct np_lost {
  uint64_t tag;
  const char *func, *dtype, *algo, *proto;
  uint32_t type, nchannels;
  uint64_t n, sum_count;
} np_lost;
_Static_assert(sizeof(np_lost) == 64, "np_lost is one cache line");

/* A communicator's table entry: a union padded to a power of two, so the entry a context
 * names is a shift (see np_ctx_entry). */
typedef union np_comm {
  struct {
    uint32_t state; /* NP_CS(incarnation, NP_COMM_*) (plus INITIALIZING, ABANDONED below) */
    uint32_t idx;
    uint64_t comm_hash, incarnation;
    int32_t rank, nranks, nnodes, abi;
    uint32_t learned; /* v1–v3: hash/name/rank learned from the first Coll/P2p */
    uint32_t ncells;
    npabi_logger_t log;
    uint64_t dropped, stale, late;
    uint64_t orphan_steps; /* ProxySteps whose ProxyOp was not recorded: not folded */
    char name[128];
    void* mem; /* operation windows, arena, transfer sums, lost operations */
    size_t mem_bytes;
    void* dmem; /* detail windows: touched only once a trace wants them */
    size_t dmem_bytes;
    np_cell* cells;
    np_xbucket* xfer;
    np_lost* lost;
    uint64_t xun_n[4], xun_bytes[4]; /* transfers not in a bucket (table full), by NP_X_* */
    uint64_t dropped_type[NP_T_COUNT]; /* not tracked: their figures are missing */
    uint64_t trace_dropped[NP_T_COUNT]; /* recorded for the trace, but it could not get them */
    uint32_t dmem_ready;
    uint64_t fin_tsc; /* when NCCL finalized it: what started before must be read first */
    /* Sampled tracing: Coll/P2p still to trace in full after a slow one (set by the drainer,
     * counted down by the hot path), and the P2P ordinals, one counter per (peer, direction):
     * 2 x nranks, or for v1-v3 (nranks unknown) a fixed NP_P2P_FIXED_PEERS table by peer % it. */
    uint32_t trig_left;
    uint32_t p2p_peers;
    uint64_t* p2p_ord;
    size_t p2p_bytes;
    uint32_t cursor __attribute__((aligned(64))); /* next arena cell: its own cache line */
    /* ProxyOps NCCL may never stop (receive side: CollNet, P2P/SHM copy engine), in start
     * order: a ring of cell handles (NP_RETIRE_RING) read and written only by the thread that
     * starts and stops the communicator's ProxyOps (NCCL's proxy thread), on this same line. */
    uint32_t rq_head, rq_tail;
    uint64_t* rq;
    struct np_conn* conn; /* NP_CONNS receive connections, by the same thread (np_conn_*) */
    uint32_t* owner;      /* per block of NP_CELL_BLOCK cells: its owner (np_block_tag), 0: free */
    np_repeat rep[NP_REPEATS]; /* sampled tracing: collectives repeating a seq (np_sample_pick) */
    np_wset set[2] __attribute__((aligned(64))); /* NP_SET_OP, NP_SET_DETAIL */
  };
  uint8_t bytes_[4096];
} np_comm;
_Static_assert(sizeof(np_comm) == 4096, "np_comm is 4 KiB");
_Static_assert(offsetof(np_comm, set) - offsetof(np_comm, cursor) >= 64, "cursor has its own line");
enum { NP_COMM_INITIALIZING = 5, NP_COMM_ABANDONED = 4 };

/* An entry's state word carries the low 24 bits of its incarnation beside the NP_COMM_* state,
 * so one compare-and-swap checks both: a finalize meant for an earlier incarnation can never
 * finalize the communicator that took the entry over. */
#define NP_CS(inc, st) (((uint32_t)(inc) << 8) | (uint32_t)(st))
#define NP_CS_STATE(w) ((uint32_t)(w) & 0xffu)
#define NP_CS_INC(w) ((uint32_t)(w) >> 8)
static inline uint32_t np_comm_state(const np_comm* c) {
  return NP_CS_STATE(__atomic_load_n(&c->state, __ATOMIC_ACQUIRE));
}

/* The context NCCL holds for a communicator is its entry's address plus a token, the low 12
 * bits of the incarnation (an entry is 4 KiB): contexts of successive communicators on one
 * entry differ, so a late callback or finalize that names an ended one is recognised (unless
 * exactly a multiple of 4096 communicators used the entry in between). */
#define NP_CTX_TOKENS 4096u
_Static_assert(sizeof(np_comm) == NP_CTX_TOKENS, "a token is a byte offset into the entry");
static inline void* np_ctx_of(np_comm* c, uint64_t incarnation) {
  return (char*)c + (incarnation & (NP_CTX_TOKENS - 1));
}

/* Per-thread state. `active` is odd while the thread is inside a callback; only the owner
 * writes it. The caches remember the blocks of slots (per communicator and set) and of arena
 * cells (per communicator) the thread claimed. */
typedef struct np_tcache {
  uint32_t comm, set, win, epoch, next, end; /* epoch 0: no block held */
} np_tcache;
typedef struct np_acache {
  uint32_t comm, next, end; /* end == next: no cell left in the block */
  uint32_t inc;             /* the communicator's incarnation the block is of */
  uint32_t blk;             /* the block owned (its index + 1), 0: none */
  uint32_t pad;
} np_acache;
#define NP_TCACHE 8
#define NP_ACACHE 4
#define NP_CELL_BLOCK 16
#define NP_P2P_FIXED_PEERS 4096 /* P2P ordinal counters when nranks is unknown (v1-v3) */
typedef struct np_thread {
  uint64_t active;
  uint32_t used, tid;
  uint32_t memo_valid, pad;
  /* v1–v3: the bytes of the transfer whose ProxyOp state NCCL recorded just before the step
   * state that carries none (the two calls are back to back on this thread). */
  uint64_t memo_size;
  np_tcache cache[NP_TCACHE];
  np_acache acache[NP_ACACHE];
} np_thread;
_Static_assert(sizeof(np_thread) % 64 == 0, "np_thread is whole cache lines");

/* Hidden: the hot path reaches them PC-relative, not through the GOT. */
#define NP_HIDDEN __attribute__((visibility("hidden")))
extern NP_HIDDEN np_comm np_comms[NP_MAX_COMMS];
extern NP_HIDDEN np_thread np_threads[NP_MAX_THREADS];
extern NP_HIDDEN __thread np_thread* np_tls __attribute__((tls_model("initial-exec")));
extern NP_HIDDEN int np_clock;      /* NP_CLOCK_* */
extern NP_HIDDEN int np_fence_mode; /* 1: no membarrier, writers fence */
extern NP_HIDDEN uint32_t np_record_mask;
extern NP_HIDDEN uint32_t np_detail_on; /* detail events are recorded (a trace wants them) */
/* The clock at the drainer's last pass (0: none yet). The drainer writes it at every pass and
 * the globals beside it (np_record_mask, np_detail_on, np_sample_n) are read by every callback:
 * alone on its cache line, a pass does not take their line away from NCCL's threads. */
typedef struct __attribute__((aligned(64))) np_coarse_clock {
  uint64_t tsc;
  uint8_t pad[56];
} np_coarse_clock;
extern NP_HIDDEN np_coarse_clock np_coarse;
extern NP_HIDDEN uint32_t np_sample_n;  /* NCCLPROF_TRACE_SAMPLE (0: off); set once, at setup */
extern NP_HIDDEN uint64_t np_dropped_type[NP_T_COUNT];
extern NP_HIDDEN uint64_t np_trace_dropped_type[NP_T_COUNT];
extern NP_HIDDEN pid_t np_pid;
enum { NP_CLOCK_TSC = 0, NP_CLOCK_CNTVCT = 1, NP_CLOCK_MONO = 2 };

np_thread* np_thread_attach(void);
void np_rotate(np_comm* c, uint32_t set, uint32_t from);

/* A stop or state for an event whose window was sealed: written as a LATE record. */
#define NP_LATE_STOP 0xffffffffu
void np_late(np_comm* c, np_thread* t, uint64_t h, uint32_t state, uint64_t a0, uint64_t a1,
             int has_args, const np_cell* opfin);
void np_apply_state(np_event* ev, int state, uint64_t a0, uint64_t a1, int has_args,
                    uint64_t now);
void np_cell_state(np_cell* cell, int state, uint64_t a0, int has_args, uint64_t now);
void np_op_record(np_comm* c, np_thread* t, np_cell* op, uint64_t h);
void np_cell_stop(np_comm* c, np_thread* t, np_cell* cell, uint64_t h, uint64_t now);

/* ------------------------------------------------------------------- shared by the sections */

/* state.c */
extern NP_HIDDEN int np_mask_from_api;
extern NP_HIDDEN uint32_t np_threads_hwm;
extern NP_HIDDEN uint32_t np_comms_hwm;
extern NP_HIDDEN sem_t np_sem;
extern NP_HIDDEN int np_setup_done;
extern NP_HIDDEN npabi_logger_t np_logger;
extern NP_HIDDEN int* np_mask_ptr;
extern NP_HIDDEN double np_ticks_per_ns;
extern NP_HIDDEN uint64_t np_setup_tick;

/* log.c */
void np_logf(int level, const char* fmt, ...);

/* config.c */
uint32_t np_mask_ancestors(uint32_t m, int abi);
uint64_t np_fixed_bytes(void);
void np_read_config(void);

/* clock.c */
void np_pick_clock(void);

/* threads.c */
void np_setup(void);

/* comms.c */
void np_populate_detail(np_comm* c);
int np_move_state(np_comm* c, uint32_t w, uint32_t from, uint32_t to);
extern NP_HIDDEN int np_mask_abi;

/* protocol.c */
int np_free_windows(np_wset* ws);

/* ------------------------------------------------------------------- for the adapters */

/* defined by the sections, called from adapters.c */
np_comm* np_pxn_target(void);
void np_learn_comm(np_comm* c, uint64_t hash, const char* name, int rank);
void np_net_start_payload(np_event* ev, const void* data);
void np_lost_add(np_comm* c, int type, const char* func, const char* dtype, const char* algo,
                 const char* proto, uint32_t nch, uint64_t count);
uint64_t np_op_running_total(void* handle, int state, uint64_t total);

#endif /* NCCLPROF_STATE_H */
