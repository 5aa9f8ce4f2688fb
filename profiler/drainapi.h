/*
 * drainapi.h — the C functions the Go drainer may call, and how it calls them.
 *
 * The plugin is two libraries (docs/how-it-works.md, "Two libraries"):
 *   - libnccl-profiler-ncclprof.so, the one NCCL loads: pure C (the core's files, adapters.c, control.c,
 *     loader.c). Hot path, ABI tables, control API. No Go runtime.
 *   - libncclprof-drain.so, the Go part (drainer/): drainer, aggregation, metrics, trace.
 *     The C library loads it (loader.c) at the first communicator, once it has checked that the
 *     process has what a Go runtime needs.
 * The Go library is linked on its own and must not reference a symbol of the C library (both
 * are loaded RTLD_LOCAL): it reaches the C core only through the table below, which the C
 * library hands to it when it starts it (np_drain_start, drainer/start.go). With NP_GO_SIDE
 * defined (the cgo preamble of every Go file, through core.h) each entry becomes a static
 * inline function of the same name, so the Go code keeps calling C.np_poll(...) as before.
 *
 * Giving the Go side a new C function: declare it in core.h as usual, then add one line to
 * NP_DRAIN_API below, NP_FN(return type, name, (parameters), (arguments)), or NP_PROC(name,
 * (parameters), (arguments)) when it returns nothing. The C compiler checks the line against
 * the declaration when loader.c fills the table. Append at the end and bump
 * NP_DRAIN_API_VERSION: a Go library from another build then refuses to start (one message)
 * instead of calling the wrong function.
 *
 * Calls the other way (C into Go: ncclprof_metrics_flush) go through pointers the Go side
 * registers when it starts (np_set_go_hooks); C never calls a Go symbol by name.
 */
#ifndef NCCLPROF_DRAINAPI_H
#define NCCLPROF_DRAINAPI_H

#include <stdint.h>

#define NP_DRAIN_API_VERSION 4

#define NP_DRAIN_API(NP_FN, NP_PROC)                                                         \
  NP_PROC(np_wait, (int timeout_ms), (timeout_ms))                                           \
  NP_PROC(np_kick, (void), ())                                                               \
  NP_FN(int, np_poll, (np_ready * out, int max, int flush, int set_mask),                    \
        (out, max, flush, set_mask))                                                         \
  NP_FN(int, np_export, (const np_ready* w, np_record* out, int max), (w, out, max))         \
  NP_PROC(np_release, (const np_ready* w), (w))                                              \
  NP_FN(int, np_xfer_read, (uint32_t i, np_xfer * out, int max), (i, out, max))              \
  NP_PROC(np_xfer_unkeyed, (uint32_t i, uint64_t n[4], uint64_t bytes[4]), (i, n, bytes))    \
  NP_FN(int, np_lost_read, (uint32_t i, np_lost_op * out, int max), (i, out, max))           \
  NP_FN(int, np_arena_scan, (uint32_t i, np_open_cell * out, int max), (i, out, max))        \
  NP_PROC(np_set_detail, (int on), (on))                                                     \
  NP_FN(int, np_detail, (void), ())                                                          \
  NP_PROC(np_dropped_read, (uint64_t * untracked, uint64_t * trace), (untracked, trace))     \
  NP_FN(int, np_comm_get, (uint32_t i, np_comm_info * out), (i, out))                        \
  NP_PROC(np_comm_drained, (uint32_t i), (i))                                                \
  NP_PROC(np_counters_read, (uint64_t * out), (out))                                         \
  NP_FN(uint64_t, np_now, (void), ())                                                        \
  NP_FN(uint64_t, np_first_init, (void), ())                                                 \
  NP_PROC(np_clock_sample, (uint64_t * b, uint64_t * mono, uint64_t * real, uint64_t * a),   \
          (b, mono, real, a))                                                                \
  NP_FN(int, np_clock_kind, (void), ())                                                      \
  NP_FN(uint64_t, np_clock_nominal_hz, (void), ())                                           \
  NP_FN(int, np_uses_membarrier, (void), ())                                                 \
  NP_FN(int, np_set_mask, (uint32_t mask), (mask))                                           \
  NP_FN(uint32_t, np_get_mask, (void), ())                                                   \
  NP_FN(uint64_t, np_trace_count, (void), ())                                                \
  NP_FN(int, np_trace_get, (uint64_t seq, int* on, uint64_t* tick, char* dir, int cap),      \
        (seq, on, tick, dir, cap))                                                           \
  NP_FN(uint64_t, np_step_count, (void), ())                                                 \
  NP_FN(int, np_step_get, (uint64_t seq, uint64_t* tick, char* label, int cap),             \
        (seq, tick, label, cap))                                                             \
  NP_PROC(np_stat_set, (int i, uint64_t v), (i, v))                                          \
  NP_FN(uint64_t, np_flush_pending, (void), ())                                              \
  NP_PROC(np_flush_done, (uint64_t req), (req))                                              \
  NP_PROC(np_set_tick_rate, (double ticks_per_ns), (ticks_per_ns))                           \
  NP_PROC(np_log, (int level, const char* msg), (level, msg))                                \
  NP_FN(const char*, ncclprof_version, (void), ())                                           \
  NP_FN(int, ncclprof_stats, (uint64_t * out, int n), (out, n))                              \
  NP_FN(const np_config*, np_config_get, (void), ())                                         \
  NP_FN(int64_t, np_as_headroom, (void), ())                                                 \
  NP_PROC(np_set_go_hooks, (np_go_flush_fn metrics_flush), (metrics_flush))                 \
  NP_FN(uint64_t, np_dump_pending, (void), ())                                               \
  NP_PROC(np_dump_done, (uint64_t req, int failed), (req, failed))                           \
  NP_PROC(np_chain_report, (void), ())                                                       \
  NP_FN(const char*, ncclprof_counter_name, (int i), (i))                                    \
  NP_FN(const char*, ncclprof_stat_name, (int i), (i))                                       \
  NP_FN(uint32_t, np_sample_every, (void), ())                                               \
  NP_PROC(np_trigger, (uint32_t i, uint64_t incarnation, uint32_t k), (i, incarnation, k))   \
  NP_PROC(np_dump_failed, (uint64_t req, const char* why), (req, why))

/* The table: a version, its size, the process-wide counters, then one pointer per entry. */
#define NP_API_FIELD_FN(ret, name, params, args) ret(*name) params;
#define NP_API_FIELD_PROC(name, params, args) void(*name) params;
typedef struct np_drain_api {
  uint32_t version, size;
  uint64_t* counters; /* np_counters[NP_C_COUNT] */
  NP_DRAIN_API(NP_API_FIELD_FN, NP_API_FIELD_PROC)
} np_drain_api;
#undef NP_API_FIELD_FN
#undef NP_API_FIELD_PROC

#ifdef NP_GO_SIDE
/* Set by np_drain_start before anything else runs in Go; defined once, in drainer/main.go. */
extern const np_drain_api* np_api;
#define NP_API_WRAP_FN(ret, name, params, args) \
  static inline ret name params { return np_api->name args; }
#define NP_API_WRAP_PROC(name, params, args) \
  static inline void name params { np_api->name args; }
NP_DRAIN_API(NP_API_WRAP_FN, NP_API_WRAP_PROC)
#undef NP_API_WRAP_FN
#undef NP_API_WRAP_PROC
#define np_counters (np_api->counters)
#endif

#endif /* NCCLPROF_DRAINAPI_H */
