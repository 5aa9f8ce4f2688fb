/*
 * threads.c — the one-time setup and the per-thread state a callback thread takes. One section of
 * the C library's core; state.h declares what the sections share.
 */
#define _GNU_SOURCE
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hot.h"
#include "state.h"
#include "ticks.h"

static void np_thread_exit(void* arg) {
  np_thread* t = (np_thread*)arg;
  np_tls = NULL;
  for (int i = 0; i < NP_TCACHE; i++) t->cache[i].epoch = 0;
  /* The blocks of arena cells it owned go back (the next thread in this slot would take them
   * over; until one comes, other threads would skip them). */
  for (int i = 0; i < NP_ACACHE; i++) np_block_release(t, &t->acache[i]);
  __atomic_store_n(&t->used, 0, __ATOMIC_RELEASE);
}

static pthread_key_t np_thread_key;

static void np_setup_once(void) {
  np_pid = getpid();
  pthread_key_create(&np_thread_key, np_thread_exit);
  sem_init(&np_sem, 0, 0);
  np_read_config();
  np_pick_clock();
  np_setup_tick = np_ticks();
  np_ticks_per_ns = np_clock == NP_CLOCK_MONO ? 1.0 : np_ticks_per_ns;
#if !defined(NP_TSAN)
  long q = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  if (q > 0 && (q & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
      syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0)
    np_fence_mode = 0;
#endif
  __atomic_store_n(&np_setup_done, 1, __ATOMIC_RELEASE);
}

static pthread_once_t np_once = PTHREAD_ONCE_INIT;

void np_setup(void) { pthread_once(&np_once, np_setup_once); }

/* First callback of a thread: take a free per-thread state, the lowest free one, so that what
 * is kept per slot stays as small as the number of threads alive at once: the drainer's pass
 * looks at every slot below the highest ever taken (np_quiesce), and the transfer sums are
 * kept per writing slot (a thread that takes an ended thread's slot goes on with its sums).
 * Runs once per thread. */
np_thread* np_thread_attach(void) {
  np_setup();
  uint32_t tid = (uint32_t)syscall(SYS_gettid);
  for (uint32_t k = 0; k < NP_MAX_THREADS; k++) {
    uint32_t expect = 0;
    if (__atomic_load_n(&np_threads[k].used, __ATOMIC_RELAXED) == 0 &&
        __atomic_compare_exchange_n(&np_threads[k].used, &expect, 1, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED)) {
      np_thread* t = &np_threads[k];
      t->tid = tid;
      for (int j = 0; j < NP_TCACHE; j++) t->cache[j].epoch = 0;
      uint32_t hwm = __atomic_load_n(&np_threads_hwm, __ATOMIC_RELAXED);
      while (k + 1 > hwm &&
             !__atomic_compare_exchange_n(&np_threads_hwm, &hwm, k + 1, 0, __ATOMIC_RELEASE,
                                          __ATOMIC_RELAXED)) {
      }
      pthread_setspecific(np_thread_key, t);
      np_tls = t;
      return t;
    }
  }
  return NULL; /* more than NP_MAX_THREADS threads at once: their events are dropped */
}
