/*
 * config.c — the NCCLPROF_* variables, read once at the first communicator. One section of the C
 * library's core; state.h declares what the sections share.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "state.h"

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
uint64_t np_fixed_bytes(void) {
  return (uint64_t)np_cfg.ncells * sizeof(np_cell) + NP_XFER_BUCKETS * sizeof(np_xbucket) +
         NP_LOST_KEYS * sizeof(np_lost) + NP_RETIRE_RING * sizeof(uint64_t) +
         NP_CONNS * sizeof(np_conn) + np_cfg.ncells / NP_CELL_BLOCK * sizeof(uint32_t);
}

void np_read_config(void) {
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
