/* SPDX-License-Identifier: BSD-3-Clause */
/* stats_path.c - the SQUALL_STATS file name rule and its writability check
 * (see stats_path.h). */
#define _POSIX_C_SOURCE 200809L /* access, stat under -std=c11 */
#include "common/stats_path.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int squall__stats_path(const char *pattern, int rank, char *out, size_t len) {
  if (len == 0) return -1;
  if (strstr(pattern, "%r") == NULL) {
    int w = snprintf(out, len, "%s.%d", pattern, rank);
    return w >= 0 && (size_t)w < len ? 0 : -1;
  }
  size_t used = 0;
  out[0] = '\0';
  for (const char *p = pattern; *p;) {
    const char *r = strstr(p, "%r");
    size_t lit = r ? (size_t)(r - p) : strlen(p);
    int w = snprintf(out + used, len - used, "%.*s", (int)lit, p);
    if (w < 0 || (size_t)w >= len - used) return -1;
    used += (size_t)w;
    if (!r) break;
    w = snprintf(out + used, len - used, "%d", rank);
    if (w < 0 || (size_t)w >= len - used) return -1;
    used += (size_t)w;
    p = r + 2;
  }
  return 0;
}

int squall__stats_path_check(const char *pattern, int rank, char *why, size_t len) {
  char path[SQ_STATS_PATH_MAX], dir[SQ_STATS_PATH_MAX];
  if (squall__stats_path(pattern, rank, path, sizeof path) != 0) {
    snprintf(why, len, "rank %d's file name is longer than %zu bytes", rank, sizeof path - 1);
    return -1;
  }
  const char *slash = strrchr(path, '/');
  if (slash == NULL) snprintf(dir, sizeof dir, ".");
  else if (slash == path) snprintf(dir, sizeof dir, "/");
  else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  struct stat st;
  if (stat(dir, &st) != 0) {
    snprintf(why, len, "rank %d cannot write '%s': its directory '%s' is not usable: %s", rank, path, dir,
             strerror(errno));
    return -1;
  }
  if (!S_ISDIR(st.st_mode)) {
    snprintf(why, len, "rank %d cannot write '%s': '%s' is not a directory", rank, path, dir);
    return -1;
  }
  if (slash && slash[1] == '\0') {
    snprintf(why, len, "rank %d cannot write '%s': the name is a directory's", rank, path);
    return -1;
  }
  int exists = stat(path, &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) {
    snprintf(why, len, "rank %d cannot write '%s': it is a directory", rank, path);
    return -1;
  }
  /* an existing file must be writable; a new one needs a writable directory */
  if (exists ? access(path, W_OK) != 0 : access(dir, W_OK | X_OK) != 0) {
    snprintf(why, len, "rank %d cannot write '%s': %s", rank, path, strerror(errno));
    return -1;
  }
  return 0;
}
