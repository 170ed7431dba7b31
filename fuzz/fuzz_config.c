/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * fuzz_config.c - the configuration parser (squallConfigParse,
 * squallConfigSet) on arbitrary text.
 *
 * Input: SPEC [NUL NAME [NUL VALUE]]. SPEC goes to squallConfigParse on
 * top of the defaults; NAME and VALUE, when present, to squallConfigSet.
 * Invariants:
 *   - a failure leaves the configuration unchanged and says why;
 *   - a success gives values inside the documented ranges;
 *   - the option table (squallConfigOption), read back as NAME=VALUE items, parses to
 *     the same configuration (the top-k ratio to the 6 digits %g prints),
 *     and printing that gives the same table again;
 *   - squallConfigSet(NAME, VALUE) does what squallConfigParse("NAME=VALUE")
 *     does whenever that spelling means the same.
 */
#define _GNU_SOURCE /* open_memstream */
#include <math.h>

#include "squall.h"
#include "fuzz/fuzz.h"

static int same_config(const squallConfig_t *a, const squallConfig_t *b, int exact_ratio) {
  if (a->codec != b->codec || a->topkValues != b->topkValues || a->errorFeedback != b->errorFeedback ||
      a->minBytes != b->minBytes || a->zstdLevel != b->zstdLevel || a->efMaxBytes != b->efMaxBytes ||
      a->warmup != b->warmup || a->minRanks != b->minRanks || a->debug != b->debug ||
      strcmp(a->statsPath, b->statsPath) != 0)
    return 0;
  if (exact_ratio) return a->topkRatio == b->topkRatio;
  /* Printed, the ratio only means something for top-k, and has %g's digits. */
  if (a->codec != squallCodecTopk) return 1;
  return fabs(a->topkRatio - b->topkRatio) <= 1e-5 * a->topkRatio;
}

static void check_ranges(const squallConfig_t *c) {
  FUZZ_CHECK(c->codec >= squallCodecNone && c->codec <= squallCodecFp8, "codec %d", (int)c->codec);
  if (c->codec == squallCodecTopk)
    FUZZ_CHECK(c->topkRatio > 0 && c->topkRatio <= 1, "ratio %g", c->topkRatio);
  FUZZ_CHECK(c->topkValues == squallValueFp32 || c->topkValues == squallValueFp16, "values %d",
             (int)c->topkValues);
  FUZZ_CHECK(c->errorFeedback == 0 || c->errorFeedback == 1, "ef %d", c->errorFeedback);
  FUZZ_CHECK(c->zstdLevel >= 0 && c->zstdLevel <= 19, "zstd %d", c->zstdLevel);
  FUZZ_CHECK(c->warmup >= 0, "warmup %d", c->warmup);
  FUZZ_CHECK(c->minRanks >= 1, "min ranks %d", c->minRanks);
  FUZZ_CHECK(c->debug >= squallLogWarn && c->debug <= squallLogTrace, "debug %d", (int)c->debug);
  FUZZ_CHECK(memchr(c->statsPath, 0, sizeof c->statsPath) != NULL, "stats path not terminated");
}

/* The options as "NAME = VALUE (default ...)" lines, from the same
 * iterator squall-info prints with (caller frees). */
static char *table_of(const squallConfig_t *c) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  FUZZ_CHECK(f != NULL, "open_memstream");
  squallOption_t o;
  for (int i = 0; squallConfigOption(c, i, &o) == squallSuccess; i++)
    fprintf(f, "%s = %s (default %s)\n", o.name, o.value, o.defaultValue);
  fclose(f);
  return buf;
}

/* The table's "NAME = VALUE (default ...)" lines as "NAME=VALUE;" items.
 * A value never holds a blank (blanks separate items), so it ends at the
 * first one; an empty value is printed as padding. */
static char *spec_of_table(const char *table) {
  char *spec = fuzz_alloc(strlen(table) + 1), *out = spec;
  for (const char *line = table; *line;) {
    const char *eol = strchr(line, '\n');
    if (eol == NULL) eol = line + strlen(line);
    if (strncmp(line, "SQUALL_", 7) == 0) {
      const char *p = line;
      while (p < eol && *p != ' ') *out++ = *p++;
      while (p < eol && *p == ' ') p++;
      FUZZ_CHECK(p < eol && *p == '=', "no '=' in table line '%.*s'", (int)(eol - line), line);
      p++;
      if (p < eol && *p == ' ') p++;
      *out++ = '=';
      while (p < eol && *p != ' ') *out++ = *p++;
      *out++ = ';';
    }
    line = *eol ? eol + 1 : eol;
  }
  *out = 0;
  return spec;
}

static void check_round_trip(const squallConfig_t *c) {
  char *table = table_of(c);
  char *spec = spec_of_table(table);
  squallConfig_t back;
  FUZZ_CHECK(squallConfigDefault(&back) == squallSuccess, "defaults");
  FUZZ_CHECK(squallConfigParse(&back, spec) == squallSuccess, "printed '%s' does not parse: %s", spec,
             squallGetLastError());
  FUZZ_CHECK(same_config(c, &back, 0), "printed '%s' parses to another configuration", spec);
  char *again = table_of(&back);
  FUZZ_CHECK(strcmp(table, again) == 0, "printing is not a fixed point:\n%s\nthen\n%s", table, again);
  free(again);
  free(spec);
  free(table);
}

static int has_separator(const char *s) { return strpbrk(s, " \t\n;") != NULL; }

static void check_set(const char *name, const char *value) {
  squallConfig_t c, before;
  squallConfigDefault(&c);
  before = c;
  squallResult_t r = squallConfigSet(&c, name, value);
  if (r != squallSuccess) {
    FUZZ_CHECK(r == squallInvalidArgument, "result %d", (int)r);
    FUZZ_CHECK(same_config(&c, &before, 1), "a failed set changed the configuration");
    FUZZ_CHECK(squallGetLastError()[0] != 0, "a failed set without a message");
  } else {
    check_ranges(&c);
  }
  /* The same option through the parser, when "NAME=VALUE" is one item that
   * splits at the same '='. */
  if (*name && !has_separator(name) && !has_separator(value) && strchr(name, '=') == NULL) {
    size_t len = strlen(name) + strlen(value) + 2;
    char *item = fuzz_alloc(len);
    snprintf(item, len, "%s=%s", name, value);
    squallConfig_t p;
    squallConfigDefault(&p);
    squallResult_t rp = squallConfigParse(&p, item);
    /* An item too long for the parser is the one allowed difference. */
    if (!(rp != squallSuccess && strstr(squallGetLastError(), "too long") != NULL)) {
      FUZZ_CHECK(rp == r, "set gives %d, parse of '%s' gives %d", (int)r, item, (int)rp);
      FUZZ_CHECK(same_config(&c, &p, 1), "set and parse of '%s' disagree", item);
    }
    free(item);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* A terminated heap copy: every part is a C string. */
  char *text = fuzz_alloc(size + 1);
  memcpy(text, data, size);
  text[size] = 0;

  squallConfig_t c, before;
  FUZZ_CHECK(squallConfigDefault(&c) == squallSuccess, "defaults");
  before = c;
  squallResult_t r = squallConfigParse(&c, text);
  if (r == squallSuccess) {
    check_ranges(&c);
    check_round_trip(&c);
  } else {
    FUZZ_CHECK(r == squallInvalidArgument, "result %d", (int)r);
    FUZZ_CHECK(same_config(&c, &before, 1), "a failed parse changed the configuration");
    const char *msg = squallGetLastError();
    FUZZ_CHECK(msg[0] != 0 && strlen(msg) < 512, "message '%s'", msg);
  }

  size_t spec_len = strlen(text);
  if (spec_len < size) {
    const char *name = text + spec_len + 1;
    const char *end = text + size;
    const char *value = name + strlen(name) < end ? name + strlen(name) + 1 : "";
    check_set(name, value);
  }
  free(text);
  return 0;
}
