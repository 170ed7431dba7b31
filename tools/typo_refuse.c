/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * typo_refuse.c - the tools' half of the typo policy: squall-info and
 * squall-bench (and squall-run, through squall-info) refuse to run with a
 * misspelt SQUALL_ variable, which the library alone only warns about. The
 * check itself is the library's (lib/common/config_env.c); the option
 * names come from squallConfigOption, the table every entry point reads.
 */
#include "typo_refuse.h"

#include <stdio.h>

#include "common/config_env.h"
#include "squall.h"

#define MAX_OPTIONS 256

static void refuse(const char *name, size_t len, const char *meant, void *ctx) {
  const char *prog = ctx;
  if (prog == NULL) return;
  if (meant)
    fprintf(stderr, "%s: unknown variable %.*s (did you mean %s?): squall's tools refuse a SQUALL_ variable "
                    "that is no option; unset or rename it\n",
            prog, (int)len, name, meant);
  else
    fprintf(stderr, "%s: unknown variable %.*s (squall-info -c lists the options): squall's tools refuse a "
                    "SQUALL_ variable that is no option; unset or rename it\n",
            prog, (int)len, name);
}

int squall_tool_refuse_typos(const char *prog) {
  const char *names[MAX_OPTIONS]; /* they point into the library's table */
  size_t n = 0;
  squallOption_t o = SQUALL_OPTION_INITIALIZER;
  for (; n < MAX_OPTIONS && squallConfigOption(NULL, (int)n, &o) == squallSuccess; n++) names[n] = o.name;
  return squall__env_typos(names, n, refuse, (void *)prog);
}
