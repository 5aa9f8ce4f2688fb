/*
 * core.h — the plugin's hot path: per-communicator storage for events and the one internal
 * event record every ABI version is turned into.
 *
 * Threads and roles
 *   - NCCL's threads (user, proxy progress, CUDA host callbacks, net plugin) call the adapters,
 *     which call np_start / np_stop / np_record. These never lock, allocate, block or make a
 *     system call (except gettid once per thread, the first time it calls).
 *   - One drainer (the plugin's Go goroutine; a C thread in the sanitizer build) calls np_poll,
 *     np_export and np_release to take closed windows, read them and give them back, and reads
 *     the transfer sums and the in-flight arena (np_xfer_read, np_arena_scan).
 *
 * Where an event lives, by what it is for (so a flood of detail never costs an operation):
 *   - Operation events (Group, Coll, P2p, the API events, KernelLaunch, KernelCh, CE events) are
 *     records in the communicator's OPERATION windows, filled in place as they start, change
 *     state and stop. Only operation events go there, so they come at the rate NCCL issues
 *     operations, a small fraction of what the drainer reads per second.
 *   - ProxyOps and ProxySteps live, while in flight, in the communicator's ARENA: a fixed pool
 *     of cells, each claimed at start and freed at stop, so its size bounds what is in flight,
 *     not a rate. A ProxyStep's stop folds its transfer into the communicator's TRANSFER SUMS
 *     (per rank pair, channel and size: count, bytes, Σtime, Σtime², min and max) and into its
 *     ProxyOp's cell; the metrics and fits need nothing else, so steps never reach the drainer
 *     unless a trace wants them. A ProxyOp also has a record in the operation windows (written
 *     at its first state, step or stop, completed at stop with its progress), which is how
 *     the drainer links it to its operation; one NCCL never reports on (CollNet) has none, and
 *     its cell is retired once a later ProxyOp stops (docs/nccl-patterns.md).
 *   - Detail events (ProxySteps copied whole at their stop, NetPlugin, ProxyCtrl) are recorded
 *     only while a trace window is open (np_detail_on), into the communicator's DETAIL windows.
 *     Those may overflow under a flood: dropped, counted per type, and the trace says so.
 *   - Sampled tracing (NCCLPROF_TRACE_SAMPLE=N): the Coll/P2p start decides whether the operation
 *     is traced in full (np_sample_flags: its seq % N == 0, or for a CUDA graph's replay its
 *     count among its seq's replays; for a P2P the ordinal the plugin counts per peer and direction % N;
 *     or the communicator's trigger countdown) and marks its record
 *     NP_F_SAMPLED / NP_F_TRIGGERED, in the record and in its handle. A ProxyOp copies the
 *     mark from its parent's handle into its own record and cell, a step from its ProxyOp's
 *     cell, and a marked step is recorded whole into the detail windows at its stop whether or
 *     not np_detail_on is set.
 *   - A Coll or P2p that finds no slot (the operation windows full) is not lost: its count is
 *     folded into the communicator's lost-operation table (np_lost_read), so operation counts
 *     and bytes stay exact by construction; only its timings are missing (and counted).
 *
 * Memory: a communicator owns 2 sets of `nwin` windows of `nslots` fixed 128-byte slots, an
 * arena of `ncells` 128-byte cells and a table of transfer sums, mapped once at init (the
 * detail windows are touched only when a trace first wants them), then reused for the life of
 * the process. Nothing grows after init.
 *
 * Handles: what startEvent returns is not a pointer but an encoded value, checked against the
 * current epoch (window) or generation (arena cell) without dereferencing anything:
 *   window record: bit 0 = 1 | bit 1 = 0 | epoch (28) | mark (1) | sample (2) | slot (17) | set (1) | window (3) | comm (10)
 *   arena cell:    bit 0 = 1 | bit 1 = 1 | generation (30) | cell (22)               | comm (10)
 * A stale handle (its window recycled or its cell freed: CUDA-graph replay, stop after
 * finalize) is detected rather than corrupting another event. `sample` carries a record's
 * NP_F_SAMPLED / NP_F_TRIGGERED bits, so a ProxyOp reads its operation's choice from the
 * parent handle NCCL passes, however long after its operation's window was recycled; `mark`
 * carries NP_F_MARK the same way (a P2p; an API call captured in a CUDA graph). Handles with
 * bit 0 clear are sentinels (dropped, not recorded) that every callback accepts.
 *
 * Window life cycle (one 64-bit word holds epoch and state, so both are read at once):
 *   FREE → FILLING → CLOSING → SEALED → FREE (epoch + 1)
 *   FILLING:  current window; new events claim slots here.
 *   CLOSING:  rotated out (count or time trigger) but its events may still stop, record
 *             states, and receive children (parent-aware routing keeps a collective and its
 *             ProxyOps together). The drainer seals it once nothing in it is open (after a
 *             short minimum grace) or after the maximum grace, whichever is first, so an
 *             operation that never gets children or never stops cannot hold it.
 *   SEALED:   no writer can touch it (np_poll waited for quiescence); the drainer reads it.
 * A stop or state that arrives after its window was sealed is written as a small LATE record
 * into the communicator's current window of the same set; the drainer applies it to the event
 * it carried over.
 */
#ifndef NCCLPROF_CORE_H
#define NCCLPROF_CORE_H

#include <stdint.h>

#include "abi.h"

#define NP_MAX_COMMS 1024 /* 10 handle bits; comm 0 holds PXN events of other processes */
#define NP_MAX_WINDOWS 8  /* 3 handle bits */
#define NP_MAX_SLOTS (1u << 17) /* 17 handle bits */
#define NP_MAX_CELLS (1u << 16) /* arena cells per communicator (22 handle bits available) */
#define NP_XFER_BUCKETS 4096    /* transfer sums per communicator (a power of two) */
#define NP_LOST_KEYS 64         /* operation keys of the lost-operation table */
#define NP_RETIRE_RING 1024     /* ProxyOps per communicator awaiting evidence (a power of two) */
#define NP_CONNS 1024           /* receive connections (channel, peer) tracked per communicator (2^k) */
#define NP_SET_OP 0             /* window sets */
#define NP_SET_DETAIL 1
#define NP_SLOT_BYTES 128
#define NP_MAX_THREADS 4096
#define NP_MAX_COMM_BYTES (32u << 20) /* hard cap on a communicator's window memory */
#define NP_PXN_COMM 0
#ifndef NCCLPROF_VERSION
#define NCCLPROF_VERSION "0.1.0"
#endif

/* Internal event types: version-free, dense. NP_T_x == log2(NCCL bit) + 1 for real types. */
enum {
  NP_T_NONE = 0,
  NP_T_GROUP, NP_T_COLL, NP_T_P2P, NP_T_PROXY_OP, NP_T_PROXY_STEP, NP_T_PROXY_CTRL,
  NP_T_KERNEL_CH, NP_T_NET_PLUGIN, NP_T_GROUP_API, NP_T_COLL_API, NP_T_P2P_API,
  NP_T_KERNEL_LAUNCH, NP_T_CE_COLL, NP_T_CE_SYNC, NP_T_CE_BATCH,
  NP_T_LATE, /* a stop or state for an event whose window was already sealed */
  NP_T_COUNT
};

/* Record flags (np_event.flags, np_record.flags). */
enum {
  NP_F_FOREIGN = 1 << 0,        /* PXN: started by another process's proxy; parent not ours */
  NP_F_PARENT_STALE = 1 << 1,   /* parent handle was ours but its window had been recycled */
  NP_F_PARENT_DROPPED = 1 << 2, /* parent was dropped (windows full) */
  NP_F_STOP_TWICE = 1 << 3,
  NP_F_AFTER_STOP = 1 << 4,     /* a state arrived after stop (ignored) */
  NP_F_OPEN = 1 << 5,           /* exported while not yet stopped (np_record only) */
  NP_F_ROUTED = 1 << 6,         /* placed in its parent's CLOSING window */
  NP_F_NO_OP = 1 << 7,          /* ProxyStep whose ProxyOp was not recorded (no pair, channel) */
  /* Sampled tracing (NCCLPROF_TRACE_SAMPLE): the operation is traced in full, chosen at its
   * Coll/P2p start and copied to its ProxyOps and their steps (see np_sample_flags in hot.h). */
  NP_F_SAMPLED = 1 << 8,        /* chosen by its seq (P2P: ordinal) % N == 0, alike on every rank */
  NP_F_TRIGGERED = 1 << 9,      /* one of the K operations after a slow one (the trigger) */
  /* The record's mark, also bit 30 of its handle, so that the events naming it as parent read
   * it without a lookup: a P2p (its receive ProxyOps wait in their channel's queue: np_queue_peer
   * in arena.c); a CollApi or P2pApi captured in a CUDA graph (its Colls are replays:
   * np_sample_pick). */
  NP_F_MARK = 1 << 10,
};
#define NP_F_SAMPLE_BITS (NP_F_SAMPLED | NP_F_TRIGGERED)

/* Sentinel handles: non-NULL, bit 0 clear, accepted and ignored by stop/record. */
#define NP_H_DROPPED ((uint64_t)0x2)  /* no slot was free */
#define NP_H_SKIPPED ((uint64_t)0x4)  /* event type not recorded (mask) */
#define NP_H_DISABLED ((uint64_t)0x6) /* context disabled or foreign */

/* Which ProxyStep / ProxyCtrl state lands in which t_state[] cell. */
enum {
  NP_ST_SEND_GPU_WAIT = 0, NP_ST_SEND_PEER_WAIT = 1, NP_ST_SEND_WAIT = 2,
  NP_ST_RECV_WAIT = 3, NP_ST_RECV_FLUSH_WAIT = 4, NP_ST_RECV_GPU_WAIT = 5,
};

/* What a ProxyOp's arena cell gathers while it is in flight, copied into its record at the stop. */
typedef struct np_op_progress {
  uint64_t t_progress;      /* first InProgress (v4+) or first posted state (v1–v3) */
  uint64_t trans_size;      /* v1–v3: cumulative bytes from the op states */
  uint64_t x_bytes, x_time; /* its send steps' transfers: bytes, Σ ticks (stop − SendWait) */
  uint32_t x_n, steps_done; /* transfers; steps stopped */
} np_op_progress;

/* One slot: the internal event record, written by the hot path. 128 bytes, 64-aligned. */
typedef struct __attribute__((aligned(64))) np_event {
  uint64_t hdr;    /* epoch | type << 32 | abi << 40 | flags << 48; stored last at start */
  uint64_t parent; /* parentObj as NCCL passed it (a handle of ours or foreign) */
  uint64_t t_start;
  uint64_t t_stop;
  uint32_t tid;
  int32_t rank;
  uint32_t done;    /* 1 once stopped; stored last by stop (release) */
  uint16_t nstates; /* recordEventState calls */
  uint16_t sflags;  /* flags set after start (stop twice, state after stop) */
  union {
    struct {
      uint64_t seq, count, parent_group;
      const char *func, *dtype, *algo, *proto;
      int32_t root;
      uint8_t nchannels, nwarps;
    } coll;
    struct {
      uint64_t count, parent_group;
      uint64_t seq; /* the plugin's ordinal of this (communicator, peer, direction), from 0 */
      const char *func, *dtype;
      int32_t peer;
      uint8_t nchannels;
    } p2p;
    struct {
      uint64_t arena;        /* the handle NCCL got: the ProxyOp's cell in the arena */
      np_op_progress prog;   /* filled from the cell at the stop */
      int32_t pid, peer, nsteps, chunk;
      uint8_t channel, is_send;
    } op;
    struct {
      uint64_t t_state[6]; /* NP_ST_* */
      uint64_t trans_size;
      uint64_t cell; /* the handle NCCL got (its arena cell): recorded whole at its stop */
      int32_t step;
      uint16_t npeerwait;
    } step;
    struct {
      uint64_t ptimer_start, ptimer_stop, t_stop_state;
      uint8_t channel;
    } kch;
    struct {
      int64_t id;
      uint64_t t_update;
      uint8_t payload[40]; /* copy of the IB or socket descriptor behind netPlugin.data */
      uint16_t nupdates;
    } net;
    struct {
      uint64_t t_first, t_last;
      int32_t appended;
      uint8_t first, last; /* npabi_state_t values */
    } ctrl;
    struct {
      uint64_t t_start_api_stop, t_end_api_start;
      int32_t depth;
      uint8_t graph;
    } gapi;
    struct {
      uint64_t count, stream;
      const char *func, *dtype;
      int32_t root;
      uint8_t graph;
    } api; /* CollApi and P2pApi */
    struct {
      uint64_t stream;
    } launch;
    struct {
      uint64_t seq, count, stream;
      const char *func, *dtype, *sync;
      int32_t root;
      uint32_t batch_size, num_batches, ce_seq;
      uint8_t intra_sync;
    } ce;
    struct {
      uint64_t total_bytes;
      int32_t n; /* CeSync: nRanks; CeBatch: numOps */
      uint8_t flag; /* CeSync: isComplete; CeBatch: useIntraSync */
    } ceaux;
    struct {
      uint64_t target; /* the handle the stop/state was for */
      uint64_t arg0, arg1;
      uint32_t state;  /* npabi_state_t, or UINT32_MAX for a stop */
      uint8_t has_args; /* 0 none, 1 arg0 is the value, 2 arg0 is a cumulative total */
      np_op_progress prog; /* a ProxyOp's stop: what its cell gathered (as u.op gets in place) */
    } late;
  } u;
} np_event;
_Static_assert(sizeof(np_event) == NP_SLOT_BYTES, "np_event is one 128-byte slot");

/* The flat, union-free form the drainer reads (np_export). Strings are NCCL's static literals. */
typedef struct np_record {
  uint64_t handle, parent, parent_group, t_start, t_stop;
  uint64_t x_bytes, x_time; /* ProxyOp: its transfers' bytes and Σ ticks */
  uint32_t x_n, steps_done; /* ProxyOp: transfers, steps stopped */
  uint64_t seq, count, bytes_aux, stream, ptimer_start, ptimer_stop, t_aux;
  uint64_t t_state[6];
  uint64_t late_target, late_arg0, late_arg1;
  const char *func, *dtype, *algo, *proto, *sync;
  int64_t net_id;
  uint32_t tid, nstates, late_state, ce_seq, batch_size, num_batches;
  int32_t rank, peer, root, pid, nsteps, chunk, step, aux;
  uint16_t flags, npeerwait;
  uint8_t type, abi, channel, nchannels, nwarps, is_send, graph, first_state, last_state,
      late_has_args;
  uint8_t net_payload[40];
} np_record;

/* Communicator description for the drainer. */
typedef struct np_comm_info {
  uint64_t comm_hash, incarnation;
  uint64_t dropped, stale, late, orphan_steps;
  uint64_t dropped_type[NP_T_COUNT];  /* not tracked (figures missing), by NP_T_* */
  uint64_t trace_dropped[NP_T_COUNT]; /* detail records the trace could not get, by NP_T_* */
  /* Every operation event that started before this tick has been handed over by np_poll:
   * the oldest operation window not yet given back opened then (or it is now). */
  uint64_t read_tsc;
  char name[128];
  int32_t rank, nranks, nnodes, abi, state, nwin, nslots, open_windows, ncells;
} np_comm_info;

/* Communicator states (np_comm_info.state). */
enum { NP_COMM_UNUSED = 0, NP_COMM_ACTIVE = 1, NP_COMM_FINALIZING = 2, NP_COMM_DRAINED = 3 };

/* A window handed to the drainer by np_poll. */
typedef struct np_ready {
  uint32_t comm, set, win, epoch, claimed;
  uint64_t open_tsc; /* windows of one communicator and set are handed over oldest first */
} np_ready;

/* Transfer sums of one (kind, rank, peer or channel, size, writer thread), cumulative since
 * the communicator started (np_xfer_read). Times in ticks. */
enum { NP_X_SEND = 1, NP_X_RECV = 2, NP_X_CHANNEL = 3 };
typedef struct np_xfer {
  uint32_t kind, writer;
  int32_t rank, id; /* id: the peer (SEND, RECV) or the channel (CHANNEL) */
  uint64_t size;    /* bytes of each transfer in this bucket; 0: mixed sizes (see bytes) */
  uint64_t n, bytes, sum_t, t_min, t_max;
  double sum_t2;
} np_xfer;

/* A Coll or P2p that found no slot: counted by key so counts and bytes stay exact. */
typedef struct np_lost_op {
  const char *func, *dtype, *algo, *proto;
  uint32_t type, nchannels;
  uint64_t n, sum_count;
} np_lost_op;

/* An event in flight in the arena (np_arena_scan): a ProxyOp or a ProxyStep. */
typedef struct np_open_cell {
  uint64_t handle, parent, t_start;
  uint64_t t_state[6];      /* step: first time in each NP_ST_* state */
  uint64_t t_last;          /* latest state or step activity */
  uint32_t type, tid;
  int32_t rank, peer, step, nsteps, steps_done, last_state;
  uint8_t channel, is_send;
} np_open_cell;

/* Process-wide counters, read by the drainer and the control API. Indexes into np_counters.
 * Each has its one name in np_counter_names (control.c), which the trace, the summary, the
 * metrics and Python all read: a counter added here needs a name there (a test fails without). */
enum {
  NP_C_EVENTS, NP_C_DROPPED_FULL /* not tracked: per type in np_dropped_read */, NP_C_DROPPED_THREADS, NP_C_NULL_HANDLE, NP_C_STALE_HANDLE,
  NP_C_BAD_HANDLE, NP_C_NULL_DESCR, NP_C_UNKNOWN_TYPE, NP_C_UNKNOWN_STATE, NP_C_STOP_TWICE,
  NP_C_AFTER_STOP, NP_C_FOREIGN_EVENT, NP_C_FOREIGN_CONTEXT, NP_C_LATE, NP_C_QUIESCE_TIMEOUT,
  NP_C_INIT_DISABLED, NP_C_NULL_FINALIZE, NP_C_WINDOWS_SEALED, NP_C_SEALED_AT_MAX_GRACE,
  NP_C_DROPPED_DETAIL, /* detail records a trace wanted, detail windows full (trace partial) */
  NP_C_ARENA_FULL,     /* ProxyOps/ProxySteps not recorded: every arena cell in flight */
  NP_C_XFER_UNKEYED,   /* transfers counted in a communicator's totals only (sum table full) */
  NP_C_LOST_OPS,       /* Coll/P2p without a slot, counted in the lost-operation table */
  NP_C_LOST_UNKEYED,   /* ... not even there (more than NP_LOST_KEYS keys): counts are a floor */
  NP_C_ORPHAN_STEPS,   /* ProxySteps whose ProxyOp was not recorded: their transfers are not */
  NP_C_STALE_CONTEXT,  /* callbacks naming the context of a communicator already finalized */
  NP_C_STALE_FINALIZE, /* finalize of such a context (its entry may serve another now): ignored */
  NP_C_AFTER_FINALIZE, /* events started on a communicator being finalized: not recorded */
  NP_C_OPS_RETIRED,    /* ProxyOps NCCL never stopped, retired once a later ProxyOp stopped */
  NP_C_OPS_RETIRED_OLD,/* ... retired after NP_RETIRE_RING later ones started (no stop seen) */
  NP_C_STEP_RESTARTS,  /* ProxySteps started again over the same step (net.cc): cell reused */
  NP_C_COUNT
};

/* Statistics the drainer publishes for the control API (ncclprof_stats). */
enum {
  NP_S_TRACE_FILES, NP_S_TRACE_EVENTS, NP_S_TRACE_BYTES, NP_S_TRACE_ERRORS, NP_S_TRACE_SKIPPED,
  NP_S_SUMMARIES, NP_S_METRICS_EXPORTS, NP_S_METRICS_FAILURES, NP_S_OPS_COMPLETED,
  NP_S_GOROUTINES, NP_S_GO_HEAP,
  NP_S_DRAIN_CPU_NS,  /* CPU time the drainer spent reading and processing windows */
  NP_S_DRAIN_RECORDS, /* records it read */
  NP_S_MEM_DEGRADED,  /* 1 once the drainer stopped tracing because address space ran short */
  /* The sampled trace (NCCLPROF_TRACE_SAMPLE): files written and deleted by rotation, bytes
   * on disk now, operations traced in full and sampled away, triggers fired. */
  NP_S_SAMPLED_FILES, NP_S_SAMPLED_DELETED, NP_S_SAMPLED_BYTES, NP_S_SAMPLED_OPS,
  NP_S_SAMPLED_AWAY, NP_S_SAMPLED_TRIGGERS,
  NP_S_COUNT
};

/* ------------------------------------------------------------------- configuration */
typedef struct np_config {
  uint32_t mask;           /* activation mask written to NCCL */
  uint32_t nwin, nslots;   /* windows per communicator and slots per window */
  uint32_t block;          /* slots a thread claims at once */
  uint32_t trigger;        /* slot index that rotates the window (count trigger) */
  uint64_t window_ns;      /* time trigger (applied by the drainer) */
  uint64_t grace_min_ns, grace_max_ns;
  uint64_t finalize_wait_ns;
  uint32_t ncells;         /* arena cells per communicator (a power of two) */
  uint32_t sample_every;   /* NCCLPROF_TRACE_SAMPLE: trace 1 in N operations in full (0: off) */
  int disabled;            /* NCCLPROF_ENABLE=0 */
} np_config;

/* A Go function C calls (ncclprof_metrics_flush), registered by the Go side as it starts. */
typedef int (*np_go_flush_fn)(int timeout_ms);

/* Below: what the C library defines. The Go library (NP_GO_SIDE) sees only the types and
 * constants above and reaches these functions through drainapi.h, at the end of this file. */
#ifndef NP_GO_SIDE
extern __attribute__((visibility("hidden"))) np_config np_cfg;
extern __attribute__((visibility("hidden"))) uint64_t np_counters[NP_C_COUNT];

/* ------------------------------------------------------------------- adapters */
/* The per-callback functions (np_begin, np_commit, np_stop, np_state) are inline, in hot.h. */

/* Lifecycle, called from init/finalize of every version. */
void* np_init_comm(int abi, uint64_t comm_hash, const char* name, int nnodes, int nranks,
                   int rank, npabi_logger_t logfn, int* mask_ptr);
void np_finalize_comm(void* context);

/* Counter bump for rare paths. */
static inline void np_count(int which) {
  __atomic_fetch_add(&np_counters[which], 1, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------------- drainer API */
/* Blocks until there may be work or `timeout_ms` passes (-1: until the first init). */
void np_wait(int timeout_ms);
/* Wakes the drainer (finalize, flush). */
void np_kick(void);
/* Rotates windows that hit the time trigger, seals CLOSING windows that are ready, waits for
 * writers to leave them, and lists them in out[] (at most max). Returns how many. With
 * `flush` set, every open window is rotated and sealed now (finalize, explicit flush).
 * set_mask: which sets, 1 << NP_SET_OP and/or 1 << NP_SET_DETAIL (the drainer serves the
 * operation windows first, so trace detail can never cost an operation). */
int np_poll(np_ready* out, int max, int flush, int set_mask);
/* Copies the events of a sealed window into out[] (at most max); returns how many. */
int np_export(const np_ready* w, np_record* out, int max);
/* Transfer sums of communicator i (every bucket with transfers); returns how many, or -1 if
 * out cannot hold them all. */
int np_xfer_read(uint32_t i, np_xfer* out, int max);
/* Transfers not in any bucket (the table was full): per kind NP_X_*, count and bytes. */
void np_xfer_unkeyed(uint32_t i, uint64_t n[4], uint64_t bytes[4]);
/* The lost-operation table of communicator i; returns how many keys. */
int np_lost_read(uint32_t i, np_lost_op* out, int max);
/* ProxyOps and ProxySteps in flight in communicator i's arena (at most max); returns how many. */
int np_arena_scan(uint32_t i, np_open_cell* out, int max);
/* Detail recording (whole ProxySteps, NetPlugin, ProxyCtrl into the detail windows): on while
 * a trace wants it. Turning it on maps the detail windows in first (not on NCCL's threads). */
void np_set_detail(int on);
int np_detail(void);
/* Sampled tracing: N of NCCLPROF_TRACE_SAMPLE (0: off), and the trigger: the next k Coll/P2p
 * of communicator i (that incarnation) are traced in full. */
uint32_t np_sample_every(void);
void np_trigger(uint32_t i, uint64_t incarnation, uint32_t k);
/* Events dropped in the whole process, by NP_T_* (each holds NP_T_COUNT): not tracked at all,
 * and detail records a trace wanted but could not get. */
void np_dropped_read(uint64_t* untracked, uint64_t* trace);
/* Gives a sealed window back (epoch + 1). */
void np_release(const np_ready* w);
/* Communicator table: info for index i; returns 0 when the index was never used. */
int np_comm_get(uint32_t i, np_comm_info* out);
/* Tells a finalizing communicator that everything it recorded has been processed. */
void np_comm_drained(uint32_t i);
/* Counter snapshot. */
void np_counters_read(uint64_t* out);
/* CLOCK_MONOTONIC in ns, and a bounded wait by that clock (not by counting naps, which
 * overshoot under load): polls done(arg) every millisecond until it returns non-zero (then 1)
 * or timeout_ns passed (then 0). Not for NCCL's hot path. */
uint64_t np_mono_ns(void);
int np_wait_until(int (*done)(void*), void* arg, uint64_t timeout_ns);
/* Clock: the hot path's counter, and a tight (counter, CLOCK_MONOTONIC_RAW, CLOCK_REALTIME)
 * reading: counter sampled before and after the two clock reads. */
uint64_t np_now(void);
uint64_t np_first_init(void); /* counter value when the first communicator was created */
void np_clock_sample(uint64_t* before, uint64_t* mono_raw_ns, uint64_t* real_ns, uint64_t* after);
int np_clock_kind(void); /* 0 TSC, 1 aarch64 counter, 2 CLOCK_MONOTONIC ns */
uint64_t np_clock_nominal_hz(void); /* known frequency (aarch64 cntfrq, 1e9) or 0: calibrate */
/* Whether writers are quiesced with membarrier (1) or fences (0). */
int np_uses_membarrier(void);
/* Trace window and step label set through the control API (sequence numbers change on every
 * call), and statistics the drainer publishes. */
/* The activation mask in force (NCCLPROF_EVENT_MASK, or the last ncclprof_set_event_mask). */
int np_set_mask(uint32_t mask);
uint32_t np_get_mask(void);
uint64_t np_trace_count(void);
int np_trace_get(uint64_t seq, int* on, uint64_t* tick, char* dir, int cap);
uint64_t np_step_count(void);
int np_step_get(uint64_t seq, uint64_t* tick, char* label, int cap);
void np_stat_set(int i, uint64_t v);
/* Flush requests from the control API: the one to serve (0: none), and its completion. */
uint64_t np_flush_pending(void);
void np_flush_done(uint64_t req);
/* Waits until no thread is inside a callback begun before the call (about 20 ms per thread at
 * most); 0 when one stayed longer (counted). The drainer's grace period; chain.c's finalize. */
int np_quiesce(void);
/* Failures of a chained plugin (NCCLPROF_CHAIN, chain.c), said once through NCCL's logger. */
void np_chain_report(void);
/* Hang-dump requests (ncclprof_dump_inflight): the one to serve, and its completion. */
uint64_t np_dump_pending(void);
void np_dump_done(uint64_t req, int failed);
/* Why a dump request failed (a write error): kept for ncclprof_dump_error(). */
void np_dump_failed(uint64_t req, const char* why);
void np_set_tick_rate(double ticks_per_ns);
/* Logs through NCCL's logger when one was given (warnings the drainer raises). */
void np_log(int level, const char* msg);
/* The configuration read at the first communicator. */
const np_config* np_config_get(void);
/* Address space left under RLIMIT_AS (bytes; INT64_MAX when unlimited, -1 when unknown). */
int64_t np_as_headroom(void);
/* The Go side's functions C calls (control API), registered when it starts. */
void np_set_go_hooks(np_go_flush_fn metrics_flush);
/* The control API's version string (control.c). */
const char* ncclprof_version(void);
int ncclprof_stats(uint64_t* out, int n);
/* The name of counter i (NP_C_*) and of statistic i (NP_S_*); NULL outside the list or if a
 * counter was given no name (control.c). */
const char* ncclprof_counter_name(int i);
const char* ncclprof_stat_name(int i);

/* The loader (loader.c): at the first communicator it checks what the Go runtime needs and
 * starts the drainer. np_drain_admit returns 1 when communicators may be profiled (the drainer
 * runs or is starting), 0 when the plugin disabled itself (said once through the logger). */
int np_drain_admit(void);
/* Whether a drainer runs, or is starting, in this process (not in a parent we forked from). */
int np_drain_live(void);
/* The process whose drainer this is: 0 before one was started (or tried), else its pid. */
int np_drain_owner(void);
/* Asks NCCL for no more events (its mask set to 0): the plugin turned itself off. */
void np_mask_off(void);
#endif /* !NP_GO_SIDE */

/* Encoded handle fields (layout at the top of this file). Epochs are 28 bits, never 0. */
#define NP_EPOCH_MASK 0x0fffffffu
#define NP_GEN_MASK 0x3fffffffu
/* flags: the record's flags; its sample bits (NP_F_SAMPLE_BITS, bits 8-9) go into the handle. */
static inline uint64_t np_handle(uint32_t comm, uint32_t set, uint32_t win, uint32_t slot,
                                 uint32_t epoch, uint16_t flags) {
  return 1ull | ((uint64_t)(epoch & NP_EPOCH_MASK) << 2) | ((uint64_t)((flags >> 10) & 1u) << 30) |
         ((uint64_t)((flags >> 8) & 3u) << 31) |
         ((uint64_t)slot << 33) | ((uint64_t)set << 50) | ((uint64_t)win << 51) |
         ((uint64_t)comm << 54);
}
static inline uint64_t np_ahandle(uint32_t comm, uint32_t cell, uint32_t gen) {
  return 3ull | ((uint64_t)(gen & NP_GEN_MASK) << 2) | ((uint64_t)cell << 32) |
         ((uint64_t)comm << 54);
}
static inline int np_h_is_cell(uint64_t h) { return (int)((h >> 1) & 1); }
static inline uint32_t np_h_epoch(uint64_t h) { return (uint32_t)(h >> 2) & NP_EPOCH_MASK; }
/* The record's sample bits, as NP_F_SAMPLED / NP_F_TRIGGERED (window records only). */
static inline uint16_t np_h_sample(uint64_t h) { return (uint16_t)(((h >> 31) & 3u) << 8); }
/* Whether the handle names a window record marked NP_F_MARK. */
static inline int np_h_mark(uint64_t h) { return (h & 3u) == 1u && ((h >> 30) & 1u); }
static inline uint32_t np_h_slot(uint64_t h) { return (uint32_t)(h >> 33) & (NP_MAX_SLOTS - 1); }
static inline uint32_t np_h_set(uint64_t h) { return (uint32_t)(h >> 50) & 1u; }
static inline uint32_t np_h_win(uint64_t h) { return (uint32_t)(h >> 51) & 7u; }
static inline uint32_t np_h_comm(uint64_t h) { return (uint32_t)(h >> 54); }
static inline uint32_t np_h_gen(uint64_t h) { return (uint32_t)(h >> 2) & NP_GEN_MASK; }
static inline uint32_t np_h_cell(uint64_t h) { return (uint32_t)(h >> 32) & 0x3fffffu; }

#include "drainapi.h"

#endif /* NCCLPROF_CORE_H */
