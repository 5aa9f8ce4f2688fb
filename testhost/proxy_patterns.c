/*
 * proxy_patterns.c — three call patterns of NCCL's proxy thread that the plugin must survive at
 * any rate, replayed as NCCL's own code calls (docs/nccl-patterns.md has the sources):
 *
 *   nostop   ProxyOps that proxy.cc starts (ncclProxyOpToArgs → ncclProfilerStartProxyOpEvent,
 *            for every proxied operation) but that nothing stops: only net.cc's progress
 *            functions stop ProxyOps, so CollNet's (and the P2P/SHM copy-engine ones) stay
 *            open for ever, with no state and no step. Operations alternate a CollNet AllReduce
 *            and a ring AllGather over the network, whose ProxyOps net.cc runs and stops.
 *   restart  net.cc's recvProxyProgress starts a receive step (ncclProfilerStartRecvProxyStep-
 *            Event) before the checks that may postpone its irecv to a later pass; each later
 *            pass starts it again into the same handle slot, and only the last handle is given
 *            states and stopped. Ring AllReduces whose every receive step is started 20 times.
 *   proxychurn  a proxy thread for every two operations, each ending when they are done. NCCL
 *            runs the progress thread that makes the ProxyOp and step callbacks per proxy
 *            state (proxy.cc ncclProxyProgressCreate, a std::thread of ncclProxyProgress) and
 *            joins it when the proxy service ends (ncclProxyService → ncclProxyProgressDestroy;
 *            v2.30.7-1): a thread that ends must give back the arena cells it owned.
 *   queued   proxy.cc's ProxyAppend queues an op behind the one its connection runs (`nextPeer`)
 *            and starts its ProxyOp at once; it is progressed only when its predecessors are
 *            done. Ring AllReduces on 4 channels whose receive ProxyOps wait 300 operations
 *            behind on their channel (1,200 at once, more than the plugin's retirement ring)
 *            while every send runs and stops: as real NCCL 2.30.7 did under a burst
 *            (testdata/nccl/2.30.7-net-burst).
 *   queuedp2p  P2P receives over the network share one queue per channel whatever their peer
 *            (net.cc recvConnect: `recv.proxyAppend + channelId` for shared buffers): plans of
 *            a Send and a Recv at a distance that turns (1, 2, ... nranks-1, as an all-to-all
 *            done peer by peer), one in four an all-to-all whose receives are subs of one
 *            args, queued nranks-2 receives deep on each of 2 channels, so a receive waits
 *            behind other peers' while later sends stop: as real NCCL 2.28.9 did on rank 2
 *            (testdata/nccl/2.28.9-net-shared).
 *
 * --iters operations at --rate operations per second (0: as fast as the threads can), each
 * with --channels channels; 4 steps per channel and direction. With --nccl R each is played as
 * release R does it (era.c): before 2.27 net.cc started ProxyOps at their first pass, so
 * nostop's CollNet operations have none, and a queued receive has no record until it is its
 * queue's head.
 */
#define _GNU_SOURCE
#include <string.h>

#include "scenarios.h"
#include "world.h"

#define PATTERN_RESTARTS 19 /* extra starts per receive step: 20 starts in all */

/* Waits until operation i is due at `rate` per second after t0 (sleeping when far off, so the
 * paced runs leave the machine's other work its CPUs). */
static void pace(double t0, int i, double rate) {
  if (rate > 0) wait_until(t0 + (double)i * 1e9 / rate);
}

/* 256 KiB in all on 4 ranks (AllGather: 64 KiB per rank): a ring moves 192 KiB per channel
 * and direction at 2 channels, 4 steps of 48 KiB. */
static op_spec pattern_op(const char* func, const char* algo, int nch) {
  op_spec o = {.func = func, .count = 64 * 1024, .dtype = "ncclInt8", .algo = algo,
               .proto = "SIMPLE", .nchannels = nch, .chunk = 48 * 1024};
  if (!strcmp(func, "AllReduce")) { /* 64 Ki floats */
    o.count = 64 * 1024;
    o.dtype = "ncclFloat32";
  } else {
    o.api_func = func;
    o.api_count = o.count;
    o.api_dtype = o.dtype;
  }
  return o;
}

/* --iters operations on a new communicator at --rate per second; `collnet`: every other one is
 * a CollNet AllReduce (else a ring AllGather), else ring AllReduces with restarted steps. */
static void pattern_run(const opts* op, const char* name, uint64_t hash, int collnet) {
  hcomm* c = world_comm(name, hash + (uint64_t)op->seed, op->nranks, op->rank, 2);
  proxy_start();
  double t0 = now_ns();
  for (int i = 0; i < op->iters; i++) {
    pace(t0, i, op->rate);
    op_spec o = !collnet         ? pattern_op("AllReduce", "RING", op->channels)
                : i % 2 == 0     ? pattern_op("AllReduce", "COLLNET_DIRECT", op->channels)
                                 : pattern_op("AllGather", "RING", op->channels);
    o.collnet = collnet && i % 2 == 0;
    o.restarts = collnet ? 0 : PATTERN_RESTARTS;
    o.kernel = op->kernel;
    launch_group(c, &o, 1, 1);
  }
  proxy_stop();
}

void scenario_nostop(const opts* op) { pattern_run(op, "nostop", 0xC0111E7000000001ull, 1); }

void scenario_restart(const opts* op) { pattern_run(op, "restart", 0x2E57A27000000001ull, 0); }

#define PATTERN_QUEUE_DEPTH 300

void scenario_queued(const opts* op) {
  hcomm* c = world_comm("queued", 0x0E0E0ED000000001ull + (uint64_t)op->seed, op->nranks, op->rank, 2);
  W.queue_depth = PATTERN_QUEUE_DEPTH;
  proxy_start();
  double t0 = now_ns();
  for (int i = 0; i < op->iters; i++) {
    pace(t0, i, op->rate);
    op_spec o = pattern_op("AllReduce", "RING", 4);
    launch_group(c, &o, 1, 1);
  }
  proxy_stop();
  W.queue_depth = 0;
}

/* One plan of P2P on 2 channels: a Send to rank + d and a Recv from rank - d, or with d = 0 an
 * all-to-all (every other rank, both ways), 4 KiB per peer. */
static void p2p_plan(hcomm* c, int d) {
  op_spec ops[2 * MAX_PEERS];
  int n = 0;
  for (int k = 1; k < c->nranks; k++) {
    if (d != 0 && k != d) continue;
    for (int send = 1; send >= 0; send--) {
      int peer = send ? (c->rank + k) % c->nranks : (c->rank + c->nranks - k) % c->nranks;
      op_spec o = {.func = send ? "Send" : "Recv", .count = 1024, .dtype = "ncclFloat32",
                   .nchannels = 2, .is_p2p = 1, .peer = peer, .chunk = 32 * 1024};
      ops[n++] = o;
    }
  }
  launch_group(c, ops, n, 2); /* the user's own ncclGroupStart/End */
}

void scenario_queuedp2p(const opts* op) {
  hcomm* c = world_comm("queuedp2p", 0x0E0E0ED000000002ull + (uint64_t)op->seed, op->nranks, op->rank, 2);
  W.queue_depth = c->nranks > 2 ? c->nranks - 2 : 1;
  proxy_start();
  double t0 = now_ns();
  for (int i = 0; i < op->iters; i++) {
    pace(t0, i, op->rate);
    p2p_plan(c, i % 4 == 3 ? 0 : 1 + i % (c->nranks - 1));
  }
  proxy_stop();
  W.queue_depth = 0;
}

/* A new proxy thread for every two ring AllReduces, ended (joined) once they are done. */
void scenario_proxychurn(const opts* op) {
  hcomm* c = world_comm("proxychurn", 0xC4C4C4C000000001ull + (uint64_t)op->seed, op->nranks,
                        op->rank, 2);
  double t0 = now_ns();
  for (int i = 0; i < op->iters; i++) {
    if (i % 2 == 0) proxy_start();
    pace(t0, i, op->rate);
    op_spec o = pattern_op("AllReduce", "RING", op->channels);
    launch_group(c, &o, 1, 1);
    if (i % 2 == 1 || i == op->iters - 1) proxy_stop();
  }
}
