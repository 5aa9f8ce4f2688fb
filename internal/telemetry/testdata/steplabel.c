/*
 * steplabel.c — drives the plugin through the test host's NCCL emulation (testhost/world.c,
 * emit.c, scenarios.c) and sets step labels with the plugin's control API ncclprof_set_step,
 * as the Python side does. Used by TestE2EStepLabelFromC:
 *   5 AllReduces unlabelled, 7 labelled "warmup", 11 labelled "train", 3 after clearing.
 * Labels are stamped when set, so they apply exactly from the next operation, with no pause
 * for the drainer to notice them. Prints "pid N".
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "scenarios.h"
#include "world.h"

static void label(int (*set_label)(const char*), const char* l) {
  if (set_label(l) != 0) exit(1);
}

static void allreduces(hcomm* c, int n) {
  for (int i = 0; i < n; i++) {
    op_spec o = {.func = "AllReduce", .count = 1 << 16, .dtype = "ncclFloat32", .algo = "RING",
                 .proto = "SIMPLE", .nchannels = 2, .chunk = 128 * 1024};
    launch_group(c, &o, 1, 1);
  }
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: steplabel PLUGIN.so\n");
    return 2;
  }
  world_init(argv[1], 6, 0, 4, 1, 7);
  int (*set_label)(const char*) = (int (*)(const char*))dlsym(W.plugin.lib, "ncclprof_set_step");
  if (!set_label) {
    fprintf(stderr, "ncclprof_set_step is not exported by %s\n", argv[1]);
    return 1;
  }
  hcomm* c = world_comm("steps", 0x57E95000000000ull, 4, 0, 1);
  proxy_start();
  allreduces(c, 5);
  label(set_label, "warmup");
  allreduces(c, 7);
  label(set_label, "train");
  allreduces(c, 11);
  label(set_label, NULL);
  allreduces(c, 3);
  proxy_stop();
  world_finalize_all();
  printf("pid %d\n", (int)getpid());
  return 0;
}
