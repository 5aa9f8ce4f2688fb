//go:build ncclprof_front

/*
 * loader.c — starts the Go part of the plugin (libncclprof-drain.so: drainer, aggregation,
 * metrics, trace) from the C library NCCL loads, once the process can afford it.
 *
 * A Go c-shared library starts its runtime in a constructor when it is loaded, and a runtime
 * that cannot get what it needs (two descriptors for its poller, hundreds of MiB of address
 * space) kills the process: nothing can be checked from inside it. So the library NCCL loads
 * is pure C, and at the first communicator it checks free file descriptors (RLIMIT_NOFILE)
 * and address space (RLIMIT_AS) against what the runtime and the drainer were measured to
 * need, then loads the Go library on a short-lived thread of its own (init never waits for
 * it). When a check or the load fails the plugin turns itself off: one message through NCCL's
 * logger saying what was short and what to do, init still succeeds, NCCL is asked for no
 * events, and the job goes on.
 *
 * A process that loads the library but never creates a communicator (a DataLoader worker, a
 * Python control call) never starts a Go runtime; a forked child never starts one when its
 * parent had started (or begun starting) one (a copied runtime without its threads must not be
 * entered, and a second one is not what anybody wants).
 *
 * The Go library is checked before it is mapped (np_drain_file_ok): dlopen of a file cut short
 * (a half-copied install) dies of SIGBUS when it touches a page past the end, and dlopen of a
 * FIFO (or a file on a stalled mount) blocks while holding glibc's loader lock, which hangs
 * every later dlopen and exit() of the process. So it must be a regular file, opened without
 * blocking, whose ELF header, program headers, loaded segments and section headers all lie
 * inside it. A file swapped between the check and dlopen, or a mount that stalls in between,
 * is not covered.
 *
 * The measured needs and the margins are in docs/loading.md.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <link.h>

#include "core.h"

#define NP_DRAIN_LIB "libncclprof-drain.so"

/* What the Go part needs, measured (docs/loading.md, "What the Go part needs": the test host
 * under ulimit with the checks built out, -DNP_NEED_FDS=0 -DNP_NEED_AS_MIB=0):
 *   - descriptors: the runtime's poller takes 2 as it starts (with fewer it aborts the
 *     process); with a summary, the metrics file, a trace and the Prometheus listener the
 *     drainer held 5 at once without an error. 16 leaves the job its own.
 *   - address space: the runtime reserves about 1.1 GiB of it as it starts (page summaries,
 *     scavenger index, arena index; under 800 MiB it aborts), and with its threads' stacks,
 *     its heap and the C library's per-thread malloc arenas the Go part peaked at 1.76 GiB.
 *     With 1.35–1.55 GiB left at load, runs still aborted; from 1.7 GiB none did. */
#ifndef NP_NEED_FDS
#define NP_NEED_FDS 16
#endif
#ifndef NP_NEED_AS_MIB
#define NP_NEED_AS_MIB 2048
#endif

enum { NP_DRAIN_NONE = 0, NP_DRAIN_LOADING = 1, NP_DRAIN_RUNNING = 2, NP_DRAIN_OFF = 3 };
static int np_drain_state;  /* NP_DRAIN_* */
static pid_t np_drain_pid;  /* the process that left NP_DRAIN_NONE */
static int64_t np_budget;   /* address space left when the drainer was started (bytes) */
static char np_drain_path[PATH_MAX + sizeof NP_DRAIN_LIB];

/* The drainer built into the sanitizer builds (testhost/cdrain.c); absent otherwise. */
int np_builtin_drain_start(const np_drain_api* api, int64_t budget) __attribute__((weak));
typedef int (*np_drain_start_fn)(const np_drain_api* api, int64_t budget);

/* ------------------------------------------------------------------- the table */

#define NP_API_INIT_FN(ret, name, params, args) .name = name,
#define NP_API_INIT_PROC(name, params, args) .name = name,
static const np_drain_api np_api_table = {
    .version = NP_DRAIN_API_VERSION,
    .size = sizeof(np_drain_api),
    .counters = np_counters,
    NP_DRAIN_API(NP_API_INIT_FN, NP_API_INIT_PROC)};

/* ------------------------------------------------------------------- where the Go part is */

/* The Go library lies beside this one. Found when this library is loaded, while a relative
 * path NCCL or Python gave dlopen still means what it meant. */
__attribute__((constructor)) static void np_find_drain_lib(void) {
  Dl_info info;
  char dir[PATH_MAX];
  if (!dladdr((void*)np_find_drain_lib, &info) || info.dli_fname == NULL ||
      realpath(info.dli_fname, dir) == NULL)
    return; /* np_drain_path stays empty: the load fails with a message */
  char* slash = strrchr(dir, '/');
  if (slash == NULL) return;
  *slash = 0;
  snprintf(np_drain_path, sizeof np_drain_path, "%s/%s", dir, NP_DRAIN_LIB);
}

/* ------------------------------------------------------------------- resources */

/* Descriptors open in this process, without opening one when the kernel can say (Linux 6.2+
 * reports the count as the size of /proc/self/fd); else counted through one descriptor.
 * Returns -1 when it cannot tell, INT_MAX when not even one is free. */
static int np_open_fds(void) {
  struct stat st;
  if (stat("/proc/self/fd", &st) == 0 && st.st_size > 0) return (int)st.st_size;
  int fd = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno == EMFILE || errno == ENFILE ? INT_MAX : -1;
  char buf[4096];
  int n = 0;
  long got;
  while ((got = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0) {
    for (long off = 0; off < got;) {
      struct dirent64* d = (struct dirent64*)(buf + off);
      if (d->d_name[0] != '.') n++;
      off += d->d_reclen;
    }
  }
  close(fd);
  return n - 1; /* not the one counting */
}

int64_t np_as_headroom(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) != 0) return -1;
  if (rl.rlim_cur == RLIM_INFINITY) return INT64_MAX;
  int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[128];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  int64_t used = (int64_t)strtoull(buf, NULL, 10) * sysconf(_SC_PAGESIZE);
  return (int64_t)rl.rlim_cur - used;
}

/* Says once that the plugin is off and why; NCCL gets mask 0 from here on. */
static void np_turn_off(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void np_turn_off(const char* fmt, ...) {
  char why[640], msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  __atomic_store_n(&np_drain_state, NP_DRAIN_OFF, __ATOMIC_RELEASE);
  np_mask_off();
  snprintf(msg, sizeof msg, "profiling is off in this process: %s. NCCL runs on without the "
           "profiler (counted in init_disabled).", why);
  np_log(NPABI_LOG_WARN, msg);
}

/* Whether the process has what the Go part needs; if not, turns the plugin off (one message). */
static int np_resources_ok(void) {
  struct rlimit rl;
  int open_fds = np_open_fds();
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && open_fds >= 0) {
    long long free_fds = (long long)rl.rlim_cur - (open_fds == INT_MAX ? (long long)rl.rlim_cur : open_fds);
    if (free_fds < NP_NEED_FDS) {
      np_turn_off("%lld file descriptors are free (RLIMIT_NOFILE %llu, %d open) and its drainer "
                  "needs %d; raise the limit (ulimit -n) to profile", free_fds,
                  (unsigned long long)rl.rlim_cur, open_fds == INT_MAX ? (int)rl.rlim_cur : open_fds,
                  NP_NEED_FDS);
      return 0;
    }
  }
  int64_t room = np_as_headroom();
  if (room >= 0 && room < (int64_t)NP_NEED_AS_MIB << 20) {
    getrlimit(RLIMIT_AS, &rl);
    np_turn_off("%lld MiB of address space are left under RLIMIT_AS (ulimit -v %llu) and its "
                "drainer, a Go runtime, needs %d MiB; raise or remove the limit to profile",
                (long long)(room >> 20), (unsigned long long)(rl.rlim_cur >> 10), NP_NEED_AS_MIB);
    return 0;
  }
  np_budget = room;
  return 1;
}

/* ------------------------------------------------------------------- the drainer's file */

/* Whether [off, off + len) lies inside a file of size bytes. */
static int np_inside(uint64_t off, uint64_t len, uint64_t size) {
  return off <= size && len <= size - off;
}

/* The bytes path's headers say it needs: the end of its furthest header or loaded segment;
 * 0 when it is not an ELF object of this machine's class. */
static uint64_t np_elf_needs(int fd, uint64_t size) {
  ElfW(Ehdr) eh;
  if (pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh) return sizeof eh;
  int class = sizeof(void*) == 8 ? ELFCLASS64 : ELFCLASS32;
  if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != class ||
      eh.e_phentsize != sizeof(ElfW(Phdr)) || eh.e_phnum == 0 || eh.e_phnum > 256)
    return 0;
  uint64_t need = eh.e_phoff + (uint64_t)eh.e_phnum * sizeof(ElfW(Phdr));
  uint64_t sh_end = eh.e_shoff + (uint64_t)eh.e_shnum * eh.e_shentsize; /* at the file's end */
  if (eh.e_shnum && sh_end > need) need = sh_end;
  if (!np_inside(eh.e_phoff, (uint64_t)eh.e_phnum * sizeof(ElfW(Phdr)), size)) return need;
  ElfW(Phdr) ph[256];
  ssize_t want = (ssize_t)(eh.e_phnum * sizeof ph[0]);
  if (pread(fd, ph, (size_t)want, (off_t)eh.e_phoff) != want) return need > size ? need : size + 1;
  for (int i = 0; i < eh.e_phnum; i++) {
    uint64_t end = ph[i].p_offset + ph[i].p_filesz;
    if (ph[i].p_type == PT_LOAD && end > need) need = end;
  }
  return need;
}

/* Whether the drainer library at path can be given to dlopen without killing or hanging the
 * process (see the top of this file); if not, why (for the one message). A file that does not
 * exist is left to dlopen, whose own message says so. */
static int np_drain_file_ok(const char* path, char* why, size_t cap) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return 1;
  struct stat st;
  int ok = 0;
  if (fstat(fd, &st) != 0) {
    snprintf(why, cap, "cannot read %s (%s)", path, strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    snprintf(why, cap, "%s is not a regular file (a FIFO, device or directory in its place)", path);
  } else {
    uint64_t need = np_elf_needs(fd, (uint64_t)st.st_size);
    if (need == 0)
      snprintf(why, cap, "%s is not an ELF shared library of this machine", path);
    else if (need > (uint64_t)st.st_size)
      snprintf(why, cap, "%s is cut short (%lld bytes; its headers need %llu): a partial copy",
               path, (long long)st.st_size, (unsigned long long)need);
    else
      ok = 1;
  }
  close(fd);
  return ok;
}

/* ------------------------------------------------------------------- the loader thread */

static void* np_loader_main(void* arg) {
  (void)arg;
  np_drain_start_fn start = np_builtin_drain_start;
  if (start == NULL) {
    if (np_drain_path[0] == 0) {
      np_turn_off("cannot tell where this library lies, so cannot find %s beside it", NP_DRAIN_LIB);
      return NULL;
    }
    char why[PATH_MAX + 128];
    if (!np_drain_file_ok(np_drain_path, why, sizeof why)) {
      np_turn_off("cannot load its drainer: %s. Install libnccl-profiler-ncclprof.so and "
                  NP_DRAIN_LIB " of one build side by side", why);
      return NULL;
    }
    void* h = dlopen(np_drain_path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
      np_turn_off("cannot load its drainer: %s. Install libnccl-profiler-ncclprof.so and "
                  NP_DRAIN_LIB " side by side (both come with every ncclprof build)", dlerror());
      return NULL;
    }
    start = (np_drain_start_fn)dlsym(h, "np_drain_start");
    if (start == NULL) {
      np_turn_off("%s is not an ncclprof drainer (no np_drain_start)", np_drain_path);
      return NULL;
    }
  }
  int rc = start(&np_api_table, np_budget);
  if (rc != 0) {
    np_turn_off("%s is from another ncclprof build (drain API %d expected); install the two "
                "libraries of one build side by side", np_drain_path, NP_DRAIN_API_VERSION);
    return NULL;
  }
  int expect = NP_DRAIN_LOADING;
  __atomic_compare_exchange_n(&np_drain_state, &expect, NP_DRAIN_RUNNING, 0, __ATOMIC_ACQ_REL,
                              __ATOMIC_RELAXED);
  return NULL;
}

/* Starts the loader thread: small (the Go runtime runs on threads of its own) and detached. */
static void np_start_loader(void) {
  pthread_attr_t a;
  pthread_t t;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&a, 512 << 10);
  int err = pthread_create(&t, &a, np_loader_main, NULL);
  pthread_attr_destroy(&a);
  if (err != 0) np_turn_off("cannot start a thread to load its drainer (%s)", strerror(err));
}

int np_drain_admit(void) {
  pid_t me = getpid();
  int st = __atomic_load_n(&np_drain_state, __ATOMIC_ACQUIRE);
  if (st != NP_DRAIN_NONE && __atomic_load_n(&np_drain_pid, __ATOMIC_RELAXED) != me) {
    /* A forked child: its parent's drainer (or its attempt) is not here and must not be. */
    __atomic_store_n(&np_drain_pid, me, __ATOMIC_RELAXED);
    np_turn_off("this process was forked from one where the plugin had started its drainer, "
                "and a forked child must not start another");
    return 0;
  }
  if (st == NP_DRAIN_NONE) {
    int expect = NP_DRAIN_NONE;
    __atomic_store_n(&np_drain_pid, me, __ATOMIC_RELAXED);
    if (__atomic_compare_exchange_n(&np_drain_state, &expect, NP_DRAIN_LOADING, 0,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
      if (!np_resources_ok()) return 0;
      np_start_loader();
    }
    st = __atomic_load_n(&np_drain_state, __ATOMIC_ACQUIRE);
  }
  return st == NP_DRAIN_LOADING || st == NP_DRAIN_RUNNING;
}

int np_drain_live(void) {
  int st = __atomic_load_n(&np_drain_state, __ATOMIC_ACQUIRE);
  return (st == NP_DRAIN_LOADING || st == NP_DRAIN_RUNNING) &&
         __atomic_load_n(&np_drain_pid, __ATOMIC_RELAXED) == getpid();
}

int np_drain_owner(void) { return (int)__atomic_load_n(&np_drain_pid, __ATOMIC_RELAXED); }
