/*
 * state.c — the definitions of the globals the C files share (state.h declares them): the
 * communicator table, the per-thread states, the configuration, the counters and the switches
 * the hot path reads.
 */
#define _GNU_SOURCE

#include "state.h"

np_comm np_comms[NP_MAX_COMMS] __attribute__((aligned(64)));
np_thread np_threads[NP_MAX_THREADS] __attribute__((aligned(64)));
__thread np_thread* np_tls __attribute__((tls_model("initial-exec")));
int np_clock = NP_CLOCK_MONO;
int np_fence_mode = 1;
uint32_t np_record_mask;
uint32_t np_detail_on;
np_coarse_clock np_coarse;
uint32_t np_sample_n;
uint64_t np_dropped_type[NP_T_COUNT];
uint64_t np_trace_dropped_type[NP_T_COUNT];
int np_mask_from_api; /* ncclprof_set_event_mask was called: its mask stays in force */
pid_t np_pid;
np_config np_cfg;
uint64_t np_counters[NP_C_COUNT];

uint32_t np_threads_hwm; /* threads ever attached (scan bound) */
uint32_t np_comms_hwm;   /* comm indexes ever used (scan bound) */
sem_t np_sem;
int np_setup_done;
npabi_logger_t np_logger; /* the first logger NCCL gave us */
int* np_mask_ptr;         /* NCCL's process-wide activation mask */
double np_ticks_per_ns = 3.0; /* refined by the drainer (np_set_tick_rate) */
uint64_t np_setup_tick;        /* when the first communicator was created */
