/* SPDX-License-Identifier: BSD-3-Clause */
/* squall-info - prints the version, the build's features and the effective
 * configuration; exits 1 with the reason when the environment is invalid.
 * Everything it says about an option comes from squallConfigOption(). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/stats_path.h"
#include "squall.h"
#include "typo_refuse.h"

static void usage(FILE *out) {
  fputs("usage: squall-info [-c] [-v] [--man-environment] [-h]\n"
        "  -c, --config        print the effective configuration (every SQUALL_* variable,\n"
        "                      and whether the ranks must agree on it)\n"
        "  -v, --version       print the version string only (the version, and the\n"
        "                      build's kernels and transports in parentheses)\n"
        "  --man-environment   print squall(7)'s ENVIRONMENT section (man markup)\n"
        "  -h, --help          this help\n"
        "Exit status: 0, or 1 when the configuration in the environment is invalid\n"
        "(a bad value, a SQUALL_ variable that is no option, or a SQUALL_STATS file\n"
        "that cannot be written); 2 for bad usage\n"
        "(including -v or --man-environment with -c or with each other; -h wins).\n",
        out);
}

/* Whether the ranks must agree on an option (the table's flag). */
static const char *scope(const squallOption_t *o) {
  return o->agree ? "the same on every rank: ranks that differ pass their calls through (config_mismatch)"
                  : "each rank's own: ranks may differ";
}

/* -c: variable, effective value, default, what it means, what it accepts,
 * whether the ranks must agree on it. */
static void print_config(const squallConfig_t *cfg) {
  squallOption_t o = SQUALL_OPTION_INITIALIZER;
  for (int i = 0; squallConfigOption(cfg, i, &o) == squallSuccess; i++) {
    const char *q = o.defaultValue[0] ? "" : "\"";
    printf("%-20s = %-12s (default %s%s%s)\n", o.name, o.value, q, o.defaultValue, q);
    printf("    %s\n    Accepted: %s.\n    Scope: %s.\n", o.doc, o.accepted, scope(&o));
  }
}

/* man(7) text: backslashes and dashes escaped, lines broken at blanks
 * (mandoc's lint wants them short), no line starting with a dot. */
static void man_text(const char *s) {
  int col = 0;
  if (*s == '.' || *s == '\'') fputs("\\&", stdout);
  for (; *s; s++) {
    if (*s == ' ' && col > 60) {
      putchar('\n');
      col = 0;
      if (s[1] == '.' || s[1] == '\'') fputs("\\&", stdout);
      continue;
    }
    if (*s == '\\') fputs("\\e", stdout);
    else if (*s == '-') fputs("\\-", stdout);
    else putchar(*s);
    col++;
  }
}

static void print_man_environment(void) {
  squallOption_t o = SQUALL_OPTION_INITIALIZER;
  puts(".SH ENVIRONMENT");
  for (int i = 0; squallConfigOption(NULL, i, &o) == squallSuccess; i++) {
    printf(".TP\n.B %s\n", o.name);
    man_text(o.doc);
    fputs("\nAccepted: ", stdout);
    man_text(o.accepted);
    fputs(".\nDefault: ", stdout);
    man_text(o.defaultValue[0] ? o.defaultValue : "unset");
    fputs(".\nScope: ", stdout);
    man_text(scope(&o));
    fputs(".\n", stdout);
  }
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {{"config", no_argument, 0, 'c'},
                                           {"version", no_argument, 0, 'v'},
                                           {"man-environment", no_argument, 0, 'm'},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  int show_config = 0, only = 0, opt; /* only: -v or --man-environment, which print one thing */
  while ((opt = getopt_long(argc, argv, "cvh", longopts, NULL)) != -1) {
    switch (opt) {
    case 'c': show_config = 1; break;
    case 'v':
    case 'm':
      if (only && only != opt) show_config = 1; /* two of them: refused below */
      only = opt;
      break;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "squall-info: unexpected argument '%s'\n", argv[optind]);
    usage(stderr);
    return 2;
  }
  if (only && show_config) { /* -cv would silently drop -c */
    fprintf(stderr, "squall-info: %s prints only itself: give it alone\n", only == 'v' ? "-v" : "--man-environment");
    return 2;
  }
  if (only == 'v') {
    printf("%s\n", squallVersionString());
    return 0;
  }
  if (only == 'm') {
    print_man_environment();
    return 0;
  }
  printf("squall %s\n", squallVersionString());
  /* squall's own tools refuse a misspelt SQUALL_ variable (squall(7)) */
  if (squall_tool_refuse_typos("squall-info") > 0) return 1;
  squallConfig_t cfg = SQUALL_CONFIG_INITIALIZER;
  squallResult_t r = squallConfigFromEnv(&cfg);
  if (r != squallSuccess) {
    fprintf(stderr, "squall-info: invalid configuration: %s\n", squallGetLastError());
    return 1;
  }
  char why[2600];
  /* The library writes SQUALL_STATS at exit, when nobody can act on a
   * failure any more: check now that rank 0's file can be created (the
   * same directory for every rank unless %r is in it). */
  if (cfg.statsPath[0] && squall__stats_path_check(cfg.statsPath, 0, why, sizeof why) != 0) {
    fprintf(stderr, "squall-info: invalid configuration: SQUALL_STATS='%s' cannot be written: %s\n",
            cfg.statsPath, why);
    return 1;
  }
  if (show_config) print_config(&cfg);
  return 0;
}
