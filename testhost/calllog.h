/*
 * calllog.h — one text line per profiler callback, written the same way by the test host (what
 * NCCL sent) and by the recording plugin (what a chained plugin received), so a test can compare
 * the two logs field by field. Every field of the version's descriptor for the event's type is
 * written as key=value; pointers NCCL only passes through (buffers, streams, payloads) as hex;
 * contexts, handles and parents through the writer's `ref` (the host: hex; the recorder: its own
 * objects by number).
 */
#ifndef NCCLPROF_TESTHOST_CALLLOG_H
#define NCCLPROF_TESTHOST_CALLLOG_H

#include <stddef.h>

typedef void (*calllog_ref)(const void* p, char* out, size_t cap);

/* The fields of a startEvent descriptor of ABI version abi (1–6). */
void calllog_descr(char* out, size_t cap, int abi, const void* descr, calllog_ref ref);
/* The state arguments of recordEventState: layout 1 (v1–v3) or 4 (v4+). */
void calllog_args(char* out, size_t cap, int layout, int state, const void* args);

#endif
