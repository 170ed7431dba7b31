/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * replay.c - runs a fuzz target over its committed corpus without
 * libFuzzer, so that `make check` replays every seed with the normal
 * compiler (and under the sanitizers in their build).
 *
 *   replay_NAME [FILE|DIR]...   each file is one input; a directory's
 *                               regular files are read in name order
 * Without arguments it reads $SQUALL_SRCDIR/fuzz/corpus/NAME. An empty or
 * missing corpus is a failure: a replay that ran nothing proves nothing.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>

#include "fuzz/fuzz.h"

#ifndef FUZZ_NAME
#error "FUZZ_NAME names the corpus directory"
#endif

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    fprintf(stderr, "replay: cannot open %s: %s\n", path, strerror(errno));
    return -1;
  }
  size_t cap = 4096, len = 0;
  uint8_t *buf = malloc(cap);
  for (;;) {
    if (buf == NULL) abort();
    len += fread(buf + len, 1, cap - len, f);
    if (len < cap) break;
    cap *= 2;
    buf = realloc(buf, cap);
  }
  int err = ferror(f);
  fclose(f);
  if (err) {
    fprintf(stderr, "replay: cannot read %s\n", path);
    free(buf);
    return -1;
  }
  /* An exact-size copy, as libFuzzer passes it. */
  uint8_t *exact = fuzz_dup(buf, len);
  free(buf);
  LLVMFuzzerTestOneInput(exact, len);
  free(exact);
  return 0;
}

static int only_files(const struct dirent *d) { return d->d_name[0] != '.'; }

/* Returns the number of inputs run, or -1. */
static long run_path(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) {
    fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
    return -1;
  }
  if (!S_ISDIR(st.st_mode)) return run_file(path) == 0 ? 1 : -1;
  struct dirent **names;
  int n = scandir(path, &names, only_files, alphasort);
  if (n < 0) {
    fprintf(stderr, "replay: cannot list %s: %s\n", path, strerror(errno));
    return -1;
  }
  long count = 0;
  for (int i = 0; i < n; i++) {
    char file[4096];
    snprintf(file, sizeof file, "%s/%s", path, names[i]->d_name);
    if (count >= 0 && stat(file, &st) == 0 && S_ISREG(st.st_mode)) count = run_file(file) == 0 ? count + 1 : -1;
    free(names[i]);
  }
  free(names);
  return count;
}

int main(int argc, char **argv) {
  long total = 0;
  if (argc < 2) {
    const char *src = getenv("SQUALL_SRCDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/fuzz/corpus/%s", src ? src : ".", FUZZ_NAME);
    total = run_path(dir);
  } else {
    for (int i = 1; i < argc && total >= 0; i++) {
      long n = run_path(argv[i]);
      total = n < 0 ? -1 : total + n;
    }
  }
  if (total <= 0) {
    fprintf(stderr, "replay %s: %s\n", FUZZ_NAME, total < 0 ? "failed" : "no inputs found");
    return 1;
  }
  printf("replay %s: %ld inputs, every invariant held\n", FUZZ_NAME, total);
  return 0;
}
