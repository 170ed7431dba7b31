/* squall-info - prints the version, the build's features and the effective
 * configuration; exits 1 with the reason when the environment is invalid. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "squall.h"

static void usage(FILE *out) {
  fputs("usage: squall-info [-c] [-v] [--man-environment] [-h]\n"
        "  -c, --config        print the effective configuration (every SQUALL_* variable)\n"
        "  -v, --version       print the version only\n"
        "  --man-environment   print squall(7)'s ENVIRONMENT section (man markup)\n"
        "  -h, --help          this help\n"
        "Exit status: 0, or 1 when the configuration in the environment is invalid.\n",
        out);
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {{"config", no_argument, 0, 'c'},
                                           {"version", no_argument, 0, 'v'},
                                           {"man-environment", no_argument, 0, 'm'},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  int show_config = 0, opt;
  while ((opt = getopt_long(argc, argv, "cvh", longopts, NULL)) != -1) {
    switch (opt) {
    case 'c': show_config = 1; break;
    case 'v': printf("%s\n", squallVersionString()); return 0;
    case 'm': squallConfigPrintMan(stdout); return 0;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "squall-info: unexpected argument '%s'\n", argv[optind]);
    usage(stderr);
    return 2;
  }
  printf("squall %s\n", squallVersionString());
  squallConfig_t cfg;
  squallResult_t r = squallConfigFromEnv(&cfg);
  if (r != squallSuccess) {
    fprintf(stderr, "squall-info: invalid configuration: %s\n", squallGetLastError());
    return 1;
  }
  if (show_config) squallConfigPrint(stdout, &cfg);
  return 0;
}
