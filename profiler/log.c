/*
 * log.c — messages through NCCL's logger (stderr before there is one). One section of the C
 * library's core; state.h declares what the sections share.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>

#include "state.h"

void np_log(int level, const char* msg) {
  npabi_logger_t log = __atomic_load_n(&np_logger, __ATOMIC_ACQUIRE);
  if (log) log(level, NPABI_LOGSYS_INIT | NPABI_LOGSYS_PROFILE, "ncclprof", 0, "%s", msg);
  else if (level <= NPABI_LOG_WARN) fprintf(stderr, "ncclprof: %s\n", msg);
}

void np_logf(int level, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  np_log(level, buf);
}
