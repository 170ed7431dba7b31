/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * config_env.h - the one check of the environment for SQUALL_ variables
 * that are no option (typos), which every entry point runs; what each does
 * with one is the typo policy of squall(7): the library, loaded into
 * someone else's job, warns and goes on (config.c); squall's own tools
 * refuse to run (tools/typo_refuse.c).
 */
#ifndef SQUALL_CONFIG_ENV_H
#define SQUALL_CONFIG_ENV_H

#include <stddef.h>

/* One unknown variable: its name (len bytes, not terminated) and the
 * option it may have meant, or NULL. */
typedef void (*squall_typo_fn)(const char *name, size_t len, const char *meant, void *ctx);

/* Calls report for every SQUALL_ variable in the environment that is
 * neither one of the n option names nor one that squall's tools and
 * scripts read; returns how many there were. */
int squall__env_typos(const char *const *options, size_t n, squall_typo_fn report, void *ctx);

#endif
