/*
 * abi.h — ncclprof's own declarations of the NCCL profiler plugin ABI, versions 1 to 6.
 *
 * Written from layout facts read in NCCL's sources (docs/nccl-profiler-api.md §1 sums them up),
 * not from NCCL's headers. Every field offset and size is pinned by a static assertion at the
 * end of this file, the table of record, so a mistake here fails the build instead of
 * corrupting a training job.
 *
 * Names are ours (npabi_*). NCCL finds the plugin through the data symbols ncclProfiler_v1 …
 * ncclProfiler_v6, which adapters.c defines with the function tables declared here.
 *
 * The C test host (testhost/) includes this file too: it plays NCCL's side of the same ABI.
 */
#ifndef NCCLPROF_ABI_H
#define NCCLPROF_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Result codes NCCL understands. Every callback of ours returns NPABI_SUCCESS. */
typedef enum {
  NPABI_SUCCESS = 0,
  NPABI_UNHANDLED_CUDA_ERROR = 1,
  NPABI_SYSTEM_ERROR = 2,
  NPABI_INTERNAL_ERROR = 3,
  NPABI_INVALID_ARGUMENT = 4,
  NPABI_INVALID_USAGE = 5,
  NPABI_REMOTE_ERROR = 6,
} npabi_result_t;

/* NCCL's logger (v4+ init argument). Levels and subsystems as NCCL numbers them. */
enum { NPABI_LOG_WARN = 2, NPABI_LOG_INFO = 3 };
enum { NPABI_LOGSYS_INIT = 1, NPABI_LOGSYS_PROFILE = 16384 };
typedef void (*npabi_logger_t)(int level, unsigned long flags, const char* file, int line,
                               const char* fmt, ...);

/* Event type bits: the descriptor's `type` and the activation mask. Comment: first version. */
enum {
  NPABI_GROUP = 1 << 0,          /* v1 */
  NPABI_COLL = 1 << 1,           /* v1 */
  NPABI_P2P = 1 << 2,            /* v1 */
  NPABI_PROXY_OP = 1 << 3,       /* v1 */
  NPABI_PROXY_STEP = 1 << 4,     /* v1 */
  NPABI_PROXY_CTRL = 1 << 5,     /* v1 */
  NPABI_KERNEL_CH = 1 << 6,      /* v3 */
  NPABI_NET_PLUGIN = 1 << 7,     /* v3 */
  NPABI_GROUP_API = 1 << 8,      /* v5 */
  NPABI_COLL_API = 1 << 9,       /* v5 */
  NPABI_P2P_API = 1 << 10,       /* v5 */
  NPABI_KERNEL_LAUNCH = 1 << 11, /* v5 */
  NPABI_CE_COLL = 1 << 12,       /* v6 */
  NPABI_CE_SYNC = 1 << 13,       /* v6 */
  NPABI_CE_BATCH = 1 << 14,      /* v6 */
};
#define NPABI_ALL_TYPES 0x7fff

/* Event states, shared by every version (values stable since 2.23). */
typedef enum {
  NPABI_PROXY_OP_SEND_POSTED = 0, /* 0–7: ProxyOp states of v1–v3, cumulative transSize */
  NPABI_PROXY_OP_SEND_REM_FIFO_WAIT = 1,
  NPABI_PROXY_OP_SEND_TRANSMITTED = 2,
  NPABI_PROXY_OP_SEND_DONE = 3,
  NPABI_PROXY_OP_RECV_POSTED = 4,
  NPABI_PROXY_OP_RECV_RECEIVED = 5,
  NPABI_PROXY_OP_RECV_TRANSMITTED = 6,
  NPABI_PROXY_OP_RECV_DONE = 7,
  NPABI_PROXY_STEP_SEND_GPU_WAIT = 8,
  NPABI_PROXY_STEP_SEND_WAIT = 9,
  NPABI_PROXY_STEP_RECV_WAIT = 10,
  NPABI_PROXY_STEP_RECV_FLUSH_WAIT = 11,
  NPABI_PROXY_STEP_RECV_GPU_WAIT = 12,
  NPABI_PROXY_CTRL_IDLE = 13,
  NPABI_PROXY_CTRL_ACTIVE = 14,
  NPABI_PROXY_CTRL_SLEEP = 15,
  NPABI_PROXY_CTRL_WAKEUP = 16,
  NPABI_PROXY_CTRL_APPEND = 17,
  NPABI_PROXY_CTRL_APPEND_END = 18,
  NPABI_PROXY_OP_IN_PROGRESS = 19,     /* v4 */
  NPABI_PROXY_STEP_SEND_PEER_WAIT = 20, /* v4; may repeat */
  NPABI_NET_PLUGIN_UPDATE = 21,        /* v4 */
  NPABI_KERNEL_CH_STOP = 22,           /* v4; args carry the GPU stop time */
  NPABI_GROUP_START_API_STOP = 23,     /* v5; args NULL */
  NPABI_GROUP_END_API_START = 24,      /* v5; args NULL */
  NPABI_CE_COLL_START = 25,            /* v6; defined, never emitted */
  NPABI_CE_COLL_COMPLETE = 26,
  NPABI_CE_SYNC_START = 27,
  NPABI_CE_SYNC_COMPLETE = 28,
  NPABI_CE_BATCH_START = 29,
  NPABI_CE_BATCH_COMPLETE = 30,
} npabi_state_t;
#define NPABI_STATE_MAX 30

/* ---------------------------------------------------------------- v1 (NCCL 2.23) */
typedef struct {
  uint8_t type;
  void* parentObj;
  int rank;
  union {
    struct {
      const char* name;
      uint64_t commHash;
      uint64_t seqNumber;
      uint8_t func; /* ncclFunc_t value */
      const void* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      uint8_t datatype; /* ncclDataType_t value */
      uint32_t op;
      size_t trafficBytes;
      uint8_t nMaxChannels;
      uint8_t nWarps;
      uint8_t algo;
      uint8_t proto;
      int isCollnet;
      int isNvls;
    } coll;
    struct {
      const char* name;
      uint64_t commHash;
      uint8_t func;
      void* buff;
      uint8_t datatype;
      size_t count;
      int peer;
    } p2p;
    struct {
      pid_t pid;
      uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
    struct {
      int step;
    } proxyStep;
  };
} npabi_descr_v1_t;

/* State arguments of v1–v3: ProxyOp states carry cumulative bytes and steps. */
typedef union {
  struct {
    size_t transSize;
    int steps;
  } proxyOp;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
} npabi_args_v1_t;

/* ---------------------------------------------------------------- v2 (NCCL 2.24) */
typedef struct {
  uint8_t type;
  void* parentObj;
  int rank;
  union {
    struct {
      const char* name;
      uint64_t commHash;
      uint64_t seqNumber;
      const char* func;
      const void* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      size_t trafficBytes;
      uint8_t nMaxChannels;
      uint8_t nWarps;
      const char* algo;
      const char* proto;
    } coll;
    struct {
      const char* name;
      uint64_t commHash;
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
    } p2p;
    struct {
      pid_t pid;
      uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
    struct {
      int step;
    } proxyStep;
  };
} npabi_descr_v2_t;

/* ---------------------------------------------------------------- v3 (NCCL 2.26) */
typedef struct {
  uint8_t type;
  void* parentObj;
  int rank;
  union {
    struct {
      const char* name;
      uint64_t commHash;
      uint64_t seqNumber;
      const char* func;
      const void* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      uint8_t nMaxChannels;
      uint8_t nWarps;
      const char* algo;
      const char* proto;
    } coll;
    struct {
      const char* name;
      uint64_t commHash;
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
    } p2p;
    struct {
      pid_t pid;
      uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
    struct {
      int step;
    } proxyStep;
    struct {
      uint8_t channelId;
    } kernelCh;
    struct {
      int64_t id;
      void* data;
    } netPlugin;
  };
} npabi_descr_v3_t;

/* ---------------------------------------------------------------- v4 (NCCL 2.27) */
/* Shared by v4 and later: the proxy/kernel/net members keep their layout from here on. */
#define NPABI_PROXY_MEMBERS                                                                      \
  struct {                                                                                      \
    pid_t pid;                                                                                  \
    uint8_t channelId;                                                                          \
    int peer;                                                                                   \
    int nSteps;                                                                                 \
    int chunkSize;                                                                              \
    int isSend;                                                                                 \
  } proxyOp;                                                                                    \
  struct {                                                                                      \
    int step;                                                                                   \
  } proxyStep;                                                                                  \
  struct {                                                                                      \
    uint8_t channelId;                                                                          \
    uint64_t pTimer; /* GPU %globaltimer ns at the channel's start */                           \
  } kernelCh;                                                                                   \
  struct {                                                                                      \
    int64_t id;                                                                                 \
    void* data;                                                                                 \
  } netPlugin;

typedef struct {
  uint8_t type;
  void* parentObj;
  int rank;
  union {
    struct {
      uint64_t seqNumber;
      const char* func;
      const void* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      uint8_t nChannels;
      uint8_t nWarps;
      const char* algo;
      const char* proto;
    } coll;
    struct {
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
      uint8_t nChannels;
    } p2p;
    NPABI_PROXY_MEMBERS
  };
} npabi_descr_v4_t;

/* State arguments of v4 and later (8 bytes). */
typedef union {
  struct {
    size_t transSize;
  } proxyStep;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
  struct {
    void* data;
  } netPlugin;
  struct {
    uint64_t pTimer;
  } kernelCh;
} npabi_args_v4_t;

/* ---------------------------------------------------------------- v5 (NCCL 2.28) and v6 */
#define NPABI_V5_MEMBERS                                                                         \
  struct {                                                                                      \
    bool graphCaptured;                                                                         \
    int groupDepth;                                                                             \
  } groupApi;                                                                                   \
  struct {                                                                                      \
    const char* func;                                                                           \
    size_t count;                                                                               \
    const char* datatype;                                                                       \
    int root;                                                                                   \
    void* stream;                                                                               \
    bool graphCaptured;                                                                         \
  } collApi;                                                                                    \
  struct {                                                                                      \
    const char* func;                                                                           \
    size_t count;                                                                               \
    const char* datatype;                                                                       \
    void* stream;                                                                               \
    bool graphCaptured;                                                                         \
  } p2pApi;                                                                                     \
  struct {                                                                                      \
    void* stream;                                                                               \
  } kernelLaunch;                                                                               \
  struct {                                                                                      \
    uint64_t seqNumber;                                                                         \
    const char* func;                                                                           \
    const void* sendBuff;                                                                       \
    void* recvBuff;                                                                             \
    size_t count;                                                                               \
    int root;                                                                                   \
    const char* datatype;                                                                       \
    uint8_t nChannels;                                                                          \
    uint8_t nWarps;                                                                             \
    const char* algo;                                                                           \
    const char* proto;                                                                          \
    void* parentGroup; /* the Group event: the v4 parent */                                     \
  } coll;                                                                                       \
  struct {                                                                                      \
    const char* func;                                                                           \
    void* buff;                                                                                 \
    const char* datatype;                                                                       \
    size_t count;                                                                               \
    int peer;                                                                                   \
    uint8_t nChannels;                                                                          \
    void* parentGroup;                                                                          \
  } p2p;                                                                                        \
  NPABI_PROXY_MEMBERS

typedef struct {
  uint64_t type; /* widened from uint8_t in v5 */
  void* parentObj;
  int rank;
  union {
    NPABI_V5_MEMBERS
  };
} npabi_descr_v5_t;

typedef struct {
  uint64_t type;
  void* parentObj;
  int rank;
  union {
    NPABI_V5_MEMBERS
    struct {
      uint64_t seqNumber;
      const char* func;
      const void* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      const char* syncStrategy; /* "MC" or "UC" */
      bool intraBatchSync;
      uint32_t batchSize;
      uint32_t numBatches;
      uint32_t ceSeqNum;
      void* stream;
    } ceColl;
    struct {
      bool isComplete;
      int nRanks;
    } ceCollSync;
    struct {
      int numOps;
      size_t totalBytes;
      bool useIntraSync;
    } ceCollBatch;
  };
} npabi_descr_v6_t;

/* Network-plugin payloads behind netPlugin.data; the id's high 16 bits name the transport. */
#define NPABI_NET_TYPE_IB (1 << 16)
#define NPABI_NET_TYPE_SOCK (2 << 16)
#define NPABI_NET_TYPE_MASK (~0U << 16)
typedef struct {
  uint8_t type;
  union {
    struct {
      int device;
      uint64_t wr_id;
      int opcode;
      int qpNum;
      size_t length;
    } qp;
  };
} npabi_net_ib_v1_t;
typedef struct {
  uint8_t type;
  union {
    struct {
      int fd;
      int op;
      size_t length;
    } sock;
  };
} npabi_net_sock_v1_t;

/* ---------------------------------------------------------------- function tables */
typedef npabi_result_t (*npabi_init_v1_fn)(void** context, int* eActivationMask);
typedef npabi_result_t (*npabi_init_v4_fn)(void** context, int* eActivationMask,
                                           const char* commName, uint64_t commHash, int nNodes,
                                           int nranks, int rank, npabi_logger_t logfn);
typedef npabi_result_t (*npabi_init_v5_fn)(void** context, uint64_t commId, int* eActivationMask,
                                           const char* commName, int nNodes, int nranks, int rank,
                                           npabi_logger_t logfn);
typedef npabi_result_t (*npabi_stop_fn)(void* eHandle);
typedef npabi_result_t (*npabi_finalize_fn)(void* context);

#define NPABI_TABLE(N, INIT_FN, ARGS_T)                                                          \
  typedef struct {                                                                              \
    const char* name;                                                                           \
    INIT_FN init;                                                                               \
    npabi_result_t (*startEvent)(void* context, void** eHandle, npabi_descr_v##N##_t* eDescr);   \
    npabi_stop_fn stopEvent;                                                                    \
    npabi_result_t (*recordEventState)(void* eHandle, npabi_state_t eState, ARGS_T* eStateArgs); \
    npabi_finalize_fn finalize;                                                                 \
  } npabi_profiler_v##N##_t;

NPABI_TABLE(1, npabi_init_v1_fn, npabi_args_v1_t)
NPABI_TABLE(2, npabi_init_v1_fn, npabi_args_v1_t)
NPABI_TABLE(3, npabi_init_v1_fn, npabi_args_v1_t)
NPABI_TABLE(4, npabi_init_v4_fn, npabi_args_v4_t)
NPABI_TABLE(5, npabi_init_v5_fn, npabi_args_v4_t)
NPABI_TABLE(6, npabi_init_v5_fn, npabi_args_v4_t)
#undef NPABI_TABLE

/* ---------------------------------------------------------------- activation rules */
/* Whether NCCL (2.28+) starts events of type t under activation mask m: its own bit or any
 * descendant's (doc §2.5: "all the events above the one requested are also captured"). */
static inline int npabi_mask_wants(int m, uint64_t t) {
  const int below_coll = NPABI_PROXY_OP | NPABI_PROXY_STEP | NPABI_KERNEL_CH | NPABI_NET_PLUGIN;
  const int ce = NPABI_CE_COLL | NPABI_CE_SYNC | NPABI_CE_BATCH;
  switch (t) {
  case NPABI_GROUP_API: return m & (NPABI_ALL_TYPES & ~NPABI_PROXY_CTRL);
  case NPABI_COLL_API: return m & (NPABI_COLL_API | NPABI_COLL | below_coll | ce);
  case NPABI_P2P_API: return m & (NPABI_P2P_API | NPABI_P2P | below_coll);
  case NPABI_KERNEL_LAUNCH: return m & NPABI_KERNEL_LAUNCH;
  case NPABI_GROUP: return m & (NPABI_GROUP | NPABI_COLL | NPABI_P2P | below_coll);
  case NPABI_COLL: return m & (NPABI_COLL | below_coll);
  case NPABI_P2P: return m & (NPABI_P2P | below_coll);
  case NPABI_PROXY_OP: return m & (NPABI_PROXY_OP | NPABI_PROXY_STEP | NPABI_NET_PLUGIN);
  case NPABI_PROXY_STEP: return m & (NPABI_PROXY_STEP | NPABI_NET_PLUGIN);
  case NPABI_CE_COLL: return m & ce;
  default: return m & (int)t;
  }
}

/* The event types ABI version v has (its descriptor union knows them). */
static inline uint32_t npabi_types_of(int v) {
  return v >= 6 ? NPABI_ALL_TYPES : v == 5 ? 0xfff : v >= 3 ? 0xff : 0x3f;
}

/* ---------------------------------------------------------------- pinned layout (LP64) */
#define NPABI_AT(T, F, OFF) _Static_assert(offsetof(T, F) == (OFF), #T "." #F " offset")
#define NPABI_SIZE(T, S) _Static_assert(sizeof(T) == (S), "sizeof " #T)

NPABI_SIZE(npabi_state_t, 4);

/* v1: doc §1.4. */
NPABI_SIZE(npabi_descr_v1_t, 120);
NPABI_AT(npabi_descr_v1_t, type, 0);
NPABI_AT(npabi_descr_v1_t, parentObj, 8);
NPABI_AT(npabi_descr_v1_t, rank, 16);
NPABI_AT(npabi_descr_v1_t, coll.name, 24);
NPABI_AT(npabi_descr_v1_t, coll.commHash, 32);
NPABI_AT(npabi_descr_v1_t, coll.seqNumber, 40);
NPABI_AT(npabi_descr_v1_t, coll.func, 48);
NPABI_AT(npabi_descr_v1_t, coll.sendBuff, 56);
NPABI_AT(npabi_descr_v1_t, coll.recvBuff, 64);
NPABI_AT(npabi_descr_v1_t, coll.count, 72);
NPABI_AT(npabi_descr_v1_t, coll.root, 80);
NPABI_AT(npabi_descr_v1_t, coll.datatype, 84);
NPABI_AT(npabi_descr_v1_t, coll.op, 88);
NPABI_AT(npabi_descr_v1_t, coll.trafficBytes, 96);
NPABI_AT(npabi_descr_v1_t, coll.nMaxChannels, 104);
NPABI_AT(npabi_descr_v1_t, coll.nWarps, 105);
NPABI_AT(npabi_descr_v1_t, coll.algo, 106);
NPABI_AT(npabi_descr_v1_t, coll.proto, 107);
NPABI_AT(npabi_descr_v1_t, coll.isCollnet, 108);
NPABI_AT(npabi_descr_v1_t, coll.isNvls, 112);
NPABI_AT(npabi_descr_v1_t, p2p.name, 24);
NPABI_AT(npabi_descr_v1_t, p2p.commHash, 32);
NPABI_AT(npabi_descr_v1_t, p2p.func, 40);
NPABI_AT(npabi_descr_v1_t, p2p.buff, 48);
NPABI_AT(npabi_descr_v1_t, p2p.datatype, 56);
NPABI_AT(npabi_descr_v1_t, p2p.count, 64);
NPABI_AT(npabi_descr_v1_t, p2p.peer, 72);
NPABI_AT(npabi_descr_v1_t, proxyOp.pid, 24);
NPABI_AT(npabi_descr_v1_t, proxyOp.channelId, 28);
NPABI_AT(npabi_descr_v1_t, proxyOp.peer, 32);
NPABI_AT(npabi_descr_v1_t, proxyOp.nSteps, 36);
NPABI_AT(npabi_descr_v1_t, proxyOp.chunkSize, 40);
NPABI_AT(npabi_descr_v1_t, proxyOp.isSend, 44);
NPABI_AT(npabi_descr_v1_t, proxyStep.step, 24);
/* State args of v1–v3 (one type here; v2 and v3 use it too: sizeof 16 in §1.4–§1.6). */
NPABI_SIZE(npabi_args_v1_t, 16);
NPABI_AT(npabi_args_v1_t, proxyOp.transSize, 0);
NPABI_AT(npabi_args_v1_t, proxyOp.steps, 8);
NPABI_AT(npabi_args_v1_t, proxyCtrl.appendedProxyOps, 0);

/* v2: doc §1.5 (proxyOp "same offsets as v1"). */
NPABI_SIZE(npabi_descr_v2_t, 128);
NPABI_AT(npabi_descr_v2_t, type, 0);
NPABI_AT(npabi_descr_v2_t, parentObj, 8);
NPABI_AT(npabi_descr_v2_t, rank, 16);
NPABI_AT(npabi_descr_v2_t, coll.name, 24);
NPABI_AT(npabi_descr_v2_t, coll.commHash, 32);
NPABI_AT(npabi_descr_v2_t, coll.seqNumber, 40);
NPABI_AT(npabi_descr_v2_t, coll.func, 48);
NPABI_AT(npabi_descr_v2_t, coll.sendBuff, 56);
NPABI_AT(npabi_descr_v2_t, coll.recvBuff, 64);
NPABI_AT(npabi_descr_v2_t, coll.count, 72);
NPABI_AT(npabi_descr_v2_t, coll.root, 80);
NPABI_AT(npabi_descr_v2_t, coll.datatype, 88);
NPABI_AT(npabi_descr_v2_t, coll.trafficBytes, 96);
NPABI_AT(npabi_descr_v2_t, coll.nMaxChannels, 104);
NPABI_AT(npabi_descr_v2_t, coll.nWarps, 105);
NPABI_AT(npabi_descr_v2_t, coll.algo, 112);
NPABI_AT(npabi_descr_v2_t, coll.proto, 120);
NPABI_AT(npabi_descr_v2_t, p2p.name, 24);
NPABI_AT(npabi_descr_v2_t, p2p.commHash, 32);
NPABI_AT(npabi_descr_v2_t, p2p.func, 40);
NPABI_AT(npabi_descr_v2_t, p2p.buff, 48);
NPABI_AT(npabi_descr_v2_t, p2p.datatype, 56);
NPABI_AT(npabi_descr_v2_t, p2p.count, 64);
NPABI_AT(npabi_descr_v2_t, p2p.peer, 72);
NPABI_AT(npabi_descr_v2_t, proxyOp.pid, 24);
NPABI_AT(npabi_descr_v2_t, proxyOp.channelId, 28);
NPABI_AT(npabi_descr_v2_t, proxyOp.peer, 32);
NPABI_AT(npabi_descr_v2_t, proxyOp.nSteps, 36);
NPABI_AT(npabi_descr_v2_t, proxyOp.chunkSize, 40);
NPABI_AT(npabi_descr_v2_t, proxyOp.isSend, 44);
NPABI_AT(npabi_descr_v2_t, proxyStep.step, 24);

/* v3: doc §1.6. */
NPABI_SIZE(npabi_descr_v3_t, 120);
NPABI_AT(npabi_descr_v3_t, type, 0);
NPABI_AT(npabi_descr_v3_t, parentObj, 8);
NPABI_AT(npabi_descr_v3_t, rank, 16);
NPABI_AT(npabi_descr_v3_t, coll.name, 24);
NPABI_AT(npabi_descr_v3_t, coll.commHash, 32);
NPABI_AT(npabi_descr_v3_t, coll.seqNumber, 40);
NPABI_AT(npabi_descr_v3_t, coll.func, 48);
NPABI_AT(npabi_descr_v3_t, coll.sendBuff, 56);
NPABI_AT(npabi_descr_v3_t, coll.recvBuff, 64);
NPABI_AT(npabi_descr_v3_t, coll.count, 72);
NPABI_AT(npabi_descr_v3_t, coll.root, 80);
NPABI_AT(npabi_descr_v3_t, coll.datatype, 88);
NPABI_AT(npabi_descr_v3_t, coll.nMaxChannels, 96);
NPABI_AT(npabi_descr_v3_t, coll.nWarps, 97);
NPABI_AT(npabi_descr_v3_t, coll.algo, 104);
NPABI_AT(npabi_descr_v3_t, coll.proto, 112);
NPABI_AT(npabi_descr_v3_t, p2p.name, 24);
NPABI_AT(npabi_descr_v3_t, p2p.commHash, 32);
NPABI_AT(npabi_descr_v3_t, p2p.func, 40);
NPABI_AT(npabi_descr_v3_t, p2p.buff, 48);
NPABI_AT(npabi_descr_v3_t, p2p.datatype, 56);
NPABI_AT(npabi_descr_v3_t, p2p.count, 64);
NPABI_AT(npabi_descr_v3_t, p2p.peer, 72);
NPABI_AT(npabi_descr_v3_t, proxyOp.pid, 24);
NPABI_AT(npabi_descr_v3_t, proxyOp.channelId, 28);
NPABI_AT(npabi_descr_v3_t, proxyOp.peer, 32);
NPABI_AT(npabi_descr_v3_t, proxyOp.nSteps, 36);
NPABI_AT(npabi_descr_v3_t, proxyOp.chunkSize, 40);
NPABI_AT(npabi_descr_v3_t, proxyOp.isSend, 44);
NPABI_AT(npabi_descr_v3_t, proxyStep.step, 24);
NPABI_AT(npabi_descr_v3_t, kernelCh.channelId, 24);
NPABI_AT(npabi_descr_v3_t, netPlugin.id, 24);
NPABI_AT(npabi_descr_v3_t, netPlugin.data, 32);

/* v4: doc §1.7. */
NPABI_SIZE(npabi_descr_v4_t, 104);
NPABI_AT(npabi_descr_v4_t, type, 0);
NPABI_AT(npabi_descr_v4_t, parentObj, 8);
NPABI_AT(npabi_descr_v4_t, rank, 16);
NPABI_AT(npabi_descr_v4_t, coll.seqNumber, 24);
NPABI_AT(npabi_descr_v4_t, coll.func, 32);
NPABI_AT(npabi_descr_v4_t, coll.sendBuff, 40);
NPABI_AT(npabi_descr_v4_t, coll.recvBuff, 48);
NPABI_AT(npabi_descr_v4_t, coll.count, 56);
NPABI_AT(npabi_descr_v4_t, coll.root, 64);
NPABI_AT(npabi_descr_v4_t, coll.datatype, 72);
NPABI_AT(npabi_descr_v4_t, coll.nChannels, 80);
NPABI_AT(npabi_descr_v4_t, coll.nWarps, 81);
NPABI_AT(npabi_descr_v4_t, coll.algo, 88);
NPABI_AT(npabi_descr_v4_t, coll.proto, 96);
NPABI_AT(npabi_descr_v4_t, p2p.func, 24);
NPABI_AT(npabi_descr_v4_t, p2p.buff, 32);
NPABI_AT(npabi_descr_v4_t, p2p.datatype, 40);
NPABI_AT(npabi_descr_v4_t, p2p.count, 48);
NPABI_AT(npabi_descr_v4_t, p2p.peer, 56);
NPABI_AT(npabi_descr_v4_t, p2p.nChannels, 60);
NPABI_AT(npabi_descr_v4_t, proxyOp.pid, 24);
NPABI_AT(npabi_descr_v4_t, proxyOp.channelId, 28);
NPABI_AT(npabi_descr_v4_t, proxyOp.peer, 32);
NPABI_AT(npabi_descr_v4_t, proxyOp.nSteps, 36);
NPABI_AT(npabi_descr_v4_t, proxyOp.chunkSize, 40);
NPABI_AT(npabi_descr_v4_t, proxyOp.isSend, 44);
NPABI_AT(npabi_descr_v4_t, proxyStep.step, 24);
NPABI_AT(npabi_descr_v4_t, kernelCh.channelId, 24);
NPABI_AT(npabi_descr_v4_t, kernelCh.pTimer, 32);
NPABI_AT(npabi_descr_v4_t, netPlugin.id, 24);
NPABI_AT(npabi_descr_v4_t, netPlugin.data, 32);
/* State args of v4 and later (v5 "same as v4", v6 a typedef of v5's: one type here). */
NPABI_SIZE(npabi_args_v4_t, 8);
NPABI_AT(npabi_args_v4_t, proxyStep.transSize, 0);
NPABI_AT(npabi_args_v4_t, proxyCtrl.appendedProxyOps, 0);
NPABI_AT(npabi_args_v4_t, netPlugin.data, 0);
NPABI_AT(npabi_args_v4_t, kernelCh.pTimer, 0);

/* v5: doc §1.8. */
NPABI_SIZE(npabi_descr_v5_t, 112);
NPABI_AT(npabi_descr_v5_t, type, 0);
NPABI_AT(npabi_descr_v5_t, parentObj, 8);
NPABI_AT(npabi_descr_v5_t, rank, 16);
NPABI_AT(npabi_descr_v5_t, groupApi.graphCaptured, 24);
NPABI_AT(npabi_descr_v5_t, groupApi.groupDepth, 28);
NPABI_AT(npabi_descr_v5_t, collApi.func, 24);
NPABI_AT(npabi_descr_v5_t, collApi.count, 32);
NPABI_AT(npabi_descr_v5_t, collApi.datatype, 40);
NPABI_AT(npabi_descr_v5_t, collApi.root, 48);
NPABI_AT(npabi_descr_v5_t, collApi.stream, 56);
NPABI_AT(npabi_descr_v5_t, collApi.graphCaptured, 64);
NPABI_AT(npabi_descr_v5_t, p2pApi.func, 24);
NPABI_AT(npabi_descr_v5_t, p2pApi.count, 32);
NPABI_AT(npabi_descr_v5_t, p2pApi.datatype, 40);
NPABI_AT(npabi_descr_v5_t, p2pApi.stream, 48);
NPABI_AT(npabi_descr_v5_t, p2pApi.graphCaptured, 56);
NPABI_AT(npabi_descr_v5_t, kernelLaunch.stream, 24);
NPABI_AT(npabi_descr_v5_t, coll.seqNumber, 24);
NPABI_AT(npabi_descr_v5_t, coll.func, 32);
NPABI_AT(npabi_descr_v5_t, coll.sendBuff, 40);
NPABI_AT(npabi_descr_v5_t, coll.recvBuff, 48);
NPABI_AT(npabi_descr_v5_t, coll.count, 56);
NPABI_AT(npabi_descr_v5_t, coll.root, 64);
NPABI_AT(npabi_descr_v5_t, coll.datatype, 72);
NPABI_AT(npabi_descr_v5_t, coll.nChannels, 80);
NPABI_AT(npabi_descr_v5_t, coll.nWarps, 81);
NPABI_AT(npabi_descr_v5_t, coll.algo, 88);
NPABI_AT(npabi_descr_v5_t, coll.proto, 96);
NPABI_AT(npabi_descr_v5_t, coll.parentGroup, 104);
NPABI_AT(npabi_descr_v5_t, p2p.func, 24);
NPABI_AT(npabi_descr_v5_t, p2p.buff, 32);
NPABI_AT(npabi_descr_v5_t, p2p.datatype, 40);
NPABI_AT(npabi_descr_v5_t, p2p.count, 48);
NPABI_AT(npabi_descr_v5_t, p2p.peer, 56);
NPABI_AT(npabi_descr_v5_t, p2p.nChannels, 60);
NPABI_AT(npabi_descr_v5_t, p2p.parentGroup, 64);
NPABI_AT(npabi_descr_v5_t, proxyOp.pid, 24);
NPABI_AT(npabi_descr_v5_t, proxyOp.channelId, 28);
NPABI_AT(npabi_descr_v5_t, proxyOp.peer, 32);
NPABI_AT(npabi_descr_v5_t, proxyOp.nSteps, 36);
NPABI_AT(npabi_descr_v5_t, proxyOp.chunkSize, 40);
NPABI_AT(npabi_descr_v5_t, proxyOp.isSend, 44);
NPABI_AT(npabi_descr_v5_t, proxyStep.step, 24);
NPABI_AT(npabi_descr_v5_t, kernelCh.channelId, 24);
NPABI_AT(npabi_descr_v5_t, kernelCh.pTimer, 32);
NPABI_AT(npabi_descr_v5_t, netPlugin.id, 24);
NPABI_AT(npabi_descr_v5_t, netPlugin.data, 32);

/* v6: doc §1.9; the members shared with v5 sit at v5's offsets. */
NPABI_SIZE(npabi_descr_v6_t, 112);
NPABI_AT(npabi_descr_v6_t, type, 0);
NPABI_AT(npabi_descr_v6_t, parentObj, 8);
NPABI_AT(npabi_descr_v6_t, rank, 16);
NPABI_AT(npabi_descr_v6_t, groupApi.graphCaptured, 24);
NPABI_AT(npabi_descr_v6_t, groupApi.groupDepth, 28);
NPABI_AT(npabi_descr_v6_t, collApi.func, 24);
NPABI_AT(npabi_descr_v6_t, collApi.count, 32);
NPABI_AT(npabi_descr_v6_t, collApi.datatype, 40);
NPABI_AT(npabi_descr_v6_t, collApi.root, 48);
NPABI_AT(npabi_descr_v6_t, collApi.stream, 56);
NPABI_AT(npabi_descr_v6_t, collApi.graphCaptured, 64);
NPABI_AT(npabi_descr_v6_t, p2pApi.func, 24);
NPABI_AT(npabi_descr_v6_t, p2pApi.count, 32);
NPABI_AT(npabi_descr_v6_t, p2pApi.datatype, 40);
NPABI_AT(npabi_descr_v6_t, p2pApi.stream, 48);
NPABI_AT(npabi_descr_v6_t, p2pApi.graphCaptured, 56);
NPABI_AT(npabi_descr_v6_t, kernelLaunch.stream, 24);
NPABI_AT(npabi_descr_v6_t, coll.seqNumber, 24);
NPABI_AT(npabi_descr_v6_t, coll.func, 32);
NPABI_AT(npabi_descr_v6_t, coll.sendBuff, 40);
NPABI_AT(npabi_descr_v6_t, coll.recvBuff, 48);
NPABI_AT(npabi_descr_v6_t, coll.count, 56);
NPABI_AT(npabi_descr_v6_t, coll.root, 64);
NPABI_AT(npabi_descr_v6_t, coll.datatype, 72);
NPABI_AT(npabi_descr_v6_t, coll.nChannels, 80);
NPABI_AT(npabi_descr_v6_t, coll.nWarps, 81);
NPABI_AT(npabi_descr_v6_t, coll.algo, 88);
NPABI_AT(npabi_descr_v6_t, coll.proto, 96);
NPABI_AT(npabi_descr_v6_t, coll.parentGroup, 104);
NPABI_AT(npabi_descr_v6_t, p2p.func, 24);
NPABI_AT(npabi_descr_v6_t, p2p.buff, 32);
NPABI_AT(npabi_descr_v6_t, p2p.datatype, 40);
NPABI_AT(npabi_descr_v6_t, p2p.count, 48);
NPABI_AT(npabi_descr_v6_t, p2p.peer, 56);
NPABI_AT(npabi_descr_v6_t, p2p.nChannels, 60);
NPABI_AT(npabi_descr_v6_t, p2p.parentGroup, 64);
NPABI_AT(npabi_descr_v6_t, proxyOp.pid, 24);
NPABI_AT(npabi_descr_v6_t, proxyOp.channelId, 28);
NPABI_AT(npabi_descr_v6_t, proxyOp.peer, 32);
NPABI_AT(npabi_descr_v6_t, proxyOp.nSteps, 36);
NPABI_AT(npabi_descr_v6_t, proxyOp.chunkSize, 40);
NPABI_AT(npabi_descr_v6_t, proxyOp.isSend, 44);
NPABI_AT(npabi_descr_v6_t, proxyStep.step, 24);
NPABI_AT(npabi_descr_v6_t, kernelCh.channelId, 24);
NPABI_AT(npabi_descr_v6_t, kernelCh.pTimer, 32);
NPABI_AT(npabi_descr_v6_t, netPlugin.id, 24);
NPABI_AT(npabi_descr_v6_t, netPlugin.data, 32);
NPABI_AT(npabi_descr_v6_t, ceColl.seqNumber, 24);
NPABI_AT(npabi_descr_v6_t, ceColl.func, 32);
NPABI_AT(npabi_descr_v6_t, ceColl.sendBuff, 40);
NPABI_AT(npabi_descr_v6_t, ceColl.recvBuff, 48);
NPABI_AT(npabi_descr_v6_t, ceColl.count, 56);
NPABI_AT(npabi_descr_v6_t, ceColl.root, 64);
NPABI_AT(npabi_descr_v6_t, ceColl.datatype, 72);
NPABI_AT(npabi_descr_v6_t, ceColl.syncStrategy, 80);
NPABI_AT(npabi_descr_v6_t, ceColl.intraBatchSync, 88);
NPABI_AT(npabi_descr_v6_t, ceColl.batchSize, 92);
NPABI_AT(npabi_descr_v6_t, ceColl.numBatches, 96);
NPABI_AT(npabi_descr_v6_t, ceColl.ceSeqNum, 100);
NPABI_AT(npabi_descr_v6_t, ceColl.stream, 104);
NPABI_AT(npabi_descr_v6_t, ceCollSync.isComplete, 24);
NPABI_AT(npabi_descr_v6_t, ceCollSync.nRanks, 28);
NPABI_AT(npabi_descr_v6_t, ceCollBatch.numOps, 24);
NPABI_AT(npabi_descr_v6_t, ceCollBatch.totalBytes, 32);
NPABI_AT(npabi_descr_v6_t, ceCollBatch.useIntraSync, 40);

/* Network-plugin payloads: doc §1.12. */
NPABI_SIZE(npabi_net_ib_v1_t, 40);
NPABI_AT(npabi_net_ib_v1_t, type, 0);
NPABI_AT(npabi_net_ib_v1_t, qp.device, 8);
NPABI_AT(npabi_net_ib_v1_t, qp.wr_id, 16);
NPABI_AT(npabi_net_ib_v1_t, qp.opcode, 24);
NPABI_AT(npabi_net_ib_v1_t, qp.qpNum, 28);
NPABI_AT(npabi_net_ib_v1_t, qp.length, 32);
NPABI_SIZE(npabi_net_sock_v1_t, 24);
NPABI_AT(npabi_net_sock_v1_t, type, 0);
NPABI_AT(npabi_net_sock_v1_t, sock.fd, 8);
NPABI_AT(npabi_net_sock_v1_t, sock.op, 12);
NPABI_AT(npabi_net_sock_v1_t, sock.length, 16);

/* Function tables: six pointers each (doc §1.4, §9 item 1). */
NPABI_SIZE(npabi_profiler_v1_t, 48);
NPABI_AT(npabi_profiler_v1_t, name, 0);
NPABI_AT(npabi_profiler_v1_t, init, 8);
NPABI_AT(npabi_profiler_v1_t, startEvent, 16);
NPABI_AT(npabi_profiler_v1_t, stopEvent, 24);
NPABI_AT(npabi_profiler_v1_t, recordEventState, 32);
NPABI_AT(npabi_profiler_v1_t, finalize, 40);
NPABI_SIZE(npabi_profiler_v2_t, 48);
NPABI_SIZE(npabi_profiler_v3_t, 48);
NPABI_SIZE(npabi_profiler_v4_t, 48);
NPABI_SIZE(npabi_profiler_v5_t, 48);
NPABI_SIZE(npabi_profiler_v6_t, 48);

#undef NPABI_AT
#undef NPABI_SIZE
#endif /* NCCLPROF_ABI_H */
