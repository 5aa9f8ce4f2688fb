"""A stand-in for NCCL inside a Python process, for tests without a GPU.

It does to the plugin what NCCL 2.29+ does: dlopen(NCCL_PROFILER_PLUGIN, RTLD_NOW|RTLD_LOCAL),
take the ncclProfiler_v6 struct, call init for a communicator, and drive startEvent /
recordEventState / stopEvent in NCCL's order for a grouped self send/recv (the one-GPU case:
GroupApi, P2pApi x2, KernelLaunch, Group, P2p x2) and for an AllReduce on a multi-rank
communicator (GroupApi, CollApi, KernelLaunch, Group, Coll). Descriptor layouts are those pinned
in profiler/abi.h (docs/nccl-profiler-api.md). Like NCCL it reads the activation mask the plugin
wrote, per operation, and starts an event when its type or a descendant's is in it.

This runs the plugin in the test's own process, so the package's control calls, trace windows
and the merge meet a live plugin with the same pid, exactly as in a real job.
"""

import ctypes
import os
import struct

RTLD_NOW = 2

GROUP, COLL, P2P = 1 << 0, 1 << 1, 1 << 2
PROXY_OP, PROXY_STEP, KERNEL_CH, NET_PLUGIN = 1 << 3, 1 << 4, 1 << 6, 1 << 7
GROUP_API, COLL_API, P2P_API, KERNEL_LAUNCH = 1 << 8, 1 << 9, 1 << 10, 1 << 11
CE = (1 << 12) | (1 << 13) | (1 << 14)

# NCCL starts an event when its own bit or a descendant's is in the mask (src/plugin/profiler.cc).
_BELOW = PROXY_OP | PROXY_STEP | KERNEL_CH | NET_PLUGIN
_STARTS_IF = {
    COLL: COLL | _BELOW,
    P2P: P2P | _BELOW,
    GROUP: GROUP | COLL | P2P | _BELOW,
    COLL_API: COLL_API | COLL | _BELOW | CE,
    P2P_API: P2P_API | P2P | _BELOW,
    KERNEL_LAUNCH: KERNEL_LAUNCH,
}
_STARTS_IF[GROUP_API] = GROUP_API | _STARTS_IF[COLL_API] | _STARTS_IF[P2P_API] | KERNEL_LAUNCH
STATE_GROUP_START_API_STOP, STATE_GROUP_END_API_START = 23, 24

DESCR_BYTES = 112  # ncclProfilerEventDescr_v6_t

_InitFn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint64,
                           ctypes.POINTER(ctypes.c_int), ctypes.c_char_p, ctypes.c_int,
                           ctypes.c_int, ctypes.c_int, ctypes.c_void_p)
_StartFn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                            ctypes.c_void_p)
_StopFn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
_RecordFn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p)
_FinalizeFn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


class ProfilerV6(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("init", _InitFn), ("startEvent", _StartFn),
                ("stopEvent", _StopFn), ("recordEventState", _RecordFn),
                ("finalize", _FinalizeFn)]


# NCCL passes static string literals and the plugin keeps the pointers: keep ours alive.
_strings = {}


def _cstr(s: str) -> int:
    buf = _strings.get(s)
    if buf is None:
        buf = _strings[s] = ctypes.create_string_buffer(s.encode())
    return ctypes.addressof(buf)


class NCCL:
    """Loads the profiler plugin the way NCCL does."""

    def __init__(self, path=None):
        self.path = path or os.environ["NCCL_PROFILER_PLUGIN"]
        self.lib = ctypes.CDLL(self.path, mode=RTLD_NOW | os.RTLD_LOCAL)
        self.prof = ProfilerV6.in_dll(self.lib, "ncclProfiler_v6")
        # One process-wide activation mask, as in NCCL (src/plugin/profiler.cc).
        self.mask = ctypes.c_int(0)

    def comm(self, comm_id=0x5EED0001, name="standin", nranks=1, rank=0):
        return Comm(self, comm_id, name, nranks, rank)


class Comm:
    def __init__(self, nccl, comm_id, name, nranks, rank):
        self.nccl, self.rank, self.nranks = nccl, rank, nranks
        self.p = nccl.prof
        self.ctx = ctypes.c_void_p()
        self._name = ctypes.create_string_buffer(name.encode())
        rc = self.p.init(ctypes.byref(self.ctx), comm_id, ctypes.byref(nccl.mask), self._name,
                         1, nranks, rank, None)
        assert rc == 0, f"plugin init returned {rc}"
        self.seq = 0
        self.events = 0  # events this stand-in started
        self._stream = 0x7F00_0000_1000 + rank

    def _on(self, etype):
        return bool(self.nccl.mask.value & _STARTS_IF[etype])

    def start(self, etype, parent=0, rank=0, fill=None):
        if not self._on(etype):
            return None
        d = (ctypes.c_ubyte * DESCR_BYTES)()
        struct.pack_into("<QQi", d, 0, etype, parent or 0, rank)
        if fill:
            fill(d)
        h = ctypes.c_void_p(0x5A5A5A5A)  # poisoned, as NCCL's memory may be
        self.p.startEvent(self.ctx, ctypes.byref(h), ctypes.addressof(d))
        assert h.value != 0x5A5A5A5A, "plugin left *eHandle unwritten"
        self.events += 1
        return h.value

    def stop(self, h):
        if h is not None:
            self.p.stopEvent(h)

    def record(self, h, state):
        if h is not None:
            self.p.recordEventState(h, state, None)

    def _group_api(self):
        gapi = self.start(GROUP_API, fill=lambda d: struct.pack_into("<?xxxi", d, 24, False, 1))
        self.record(gapi, STATE_GROUP_START_API_STOP)
        return gapi

    def _launch(self, gapi, launch):
        kl = self.start(KERNEL_LAUNCH, gapi,
                        fill=lambda d: struct.pack_into("<Q", d, 24, self._stream))
        if launch:
            launch()
        self.stop(kl)

    def sendrecv_self(self, count=1024, dtype="ncclFloat32", launch=None):
        """A grouped send to and receive from this rank (ncclGroupStart; ncclSend; ncclRecv;
        ncclGroupEnd). `launch` runs where NCCL calls cuLaunchKernelEx."""
        gapi = self._group_api()
        apis = []
        for func in ("Send", "Recv"):
            h = self.start(P2P_API, gapi, fill=lambda d, f=func: struct.pack_into(
                "<QQQQ?", d, 24, _cstr(f), count, _cstr(dtype), self._stream, False))
            self.stop(h)
            apis.append((func, h))
        self.record(gapi, STATE_GROUP_END_API_START)
        self._launch(gapi, launch)
        grp = self.start(GROUP)
        for func, api in apis:
            h = self.start(P2P, api, rank=self.rank, fill=lambda d, f=func: struct.pack_into(
                "<QQQQiBxxxQ", d, 24, _cstr(f), 0x1000, _cstr(dtype), count, self.rank, 1,
                grp or 0))
            self.stop(h)
        self.stop(grp)
        self.stop(gapi)

    def allreduce(self, count=1 << 20, dtype="ncclFloat32", launch=None):
        """A blocking ncclAllReduce as NCCL 2.29+ reports it (enqueue side only)."""
        gapi = self._group_api()
        api = self.start(COLL_API, gapi, fill=lambda d: struct.pack_into(
            "<QQQixxxxQ?", d, 24, _cstr("AllReduce"), count, _cstr(dtype), 0, self._stream, False))
        self.stop(api)
        self.record(gapi, STATE_GROUP_END_API_START)
        self._launch(gapi, launch)
        grp = self.start(GROUP)
        h = self.start(COLL, api, rank=self.rank, fill=lambda d: struct.pack_into(
            "<QQQQQixxxxQBBxxxxxxQQQ", d, 24, self.seq, _cstr("AllReduce"), 0x1000, 0x2000,
            count, 0, _cstr(dtype), 2, 8, _cstr("RING"), _cstr("SIMPLE"), grp or 0))
        self.seq += 1
        self.stop(h)
        self.stop(grp)
        self.stop(gapi)

    def finalize(self):
        self.p.finalize(self.ctx)


EVENTS_PER_SENDRECV = 7   # GroupApi, P2pApi x2, KernelLaunch, Group, P2p x2
EVENTS_PER_ALLREDUCE = 5  # GroupApi, CollApi, KernelLaunch, Group, Coll
