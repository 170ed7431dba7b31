/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * config_types.c - the typed operations of the configuration table: one
 * parser, range check, printer and description printer per type of row
 * (common/config_table.h), so that an option is a row, not code.
 */
#include "common/internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/config_table.h"
#include "common/size.h"

/* ------------------------------------------------------------ parsers
 * Exactly the documented spellings: no leading blanks, signs, hex or
 * trailing text, which strtol and strtod would let through. */

/* Decimal digits only, within [lo, hi] (hi well below LLONG_MAX / 10, so
 * that stopping once past hi also rules out overflow). */
static int parse_uint(const char *v, long lo, long hi, long *out) {
  long long x = 0;
  if (*v < '0' || *v > '9') return -1;
  for (; *v >= '0' && *v <= '9'; v++) {
    x = x * 10 + (*v - '0');
    if (x > hi) return -1;
  }
  if (*v || x < lo) return -1;
  *out = (long)x;
  return 0;
}

/* A decimal fraction: digits with an optional point and an optional
 * exponent ("0.01", ".25", "1e-3"); no sign, blank, hex, inf or nan. The
 * text is checked here and converted by strtod, which must consume all of
 * it (it does not under a locale whose decimal point is not '.'). */
static int parse_ratio(const char *v, double *out) {
  const char *p = v;
  int digits = 0;
  while (*p >= '0' && *p <= '9') p++, digits++;
  if (*p == '.') {
    p++;
    while (*p >= '0' && *p <= '9') p++, digits++;
  }
  if (!digits) return -1;
  if (*p == 'e' || *p == 'E') {
    p++;
    if (*p == '+' || *p == '-') p++;
    if (*p < '0' || *p > '9') return -1;
    while (*p >= '0' && *p <= '9') p++;
  }
  if (*p) return -1;
  char *end;
  errno = 0;
  fenv_t env;
  squall__round_nearest_begin(&env);
  double r = strtod(v, &end);
  squall__round_nearest_end(&env);
  /* a subnormal result sets ERANGE too, but is the value written (a
   * ratio of 1e-320 is still above 0); one that underflows to 0 is not */
  if ((errno && !(errno == ERANGE && r != 0.0 && isfinite(r))) || end != p) return -1;
  *out = r;
  return 0;
}

/* The shortest %g spelling of v that reads back as v: what a user would
 * write for 0.01, and every digit for 0.0123456789, so that what
 * squall-info and squallConfigCodecString print, set again, is the same
 * configuration (%g's 6 digits made another ratio). */
static void print_double(char *b, size_t n, double v) {
  fenv_t env;
  squall__round_nearest_begin(&env);
  for (int prec = 6; prec <= 17; prec++) {
    snprintf(b, n, "%.*g", prec, v);
    if (strtod(b, NULL) == v) break;
  }
  squall__round_nearest_end(&env);
}

/* The shortest spelling that reads back as the same size. */
static void print_size(size_t v, char *b, size_t n) {
  if (v && v % (1u << 30) == 0) snprintf(b, n, "%zuG", v >> 30);
  else if (v && v % (1u << 20) == 0) snprintf(b, n, "%zuM", v >> 20);
  else if (v && v % (1u << 10) == 0) snprintf(b, n, "%zuK", v >> 10);
  else snprintf(b, n, "%zu", v);
}

/* ------------------------------------------------- members by offset */
static long multiple_of(const squall_option *o) { return o->multiple ? o->multiple : 1; }

/* The index of the enum name that takes a ratio; -1 for none. */
int squall__opt_param_index(const squall_option *o) {
  if (o->type != OPT_ENUM || o->param == NULL) return -1;
  for (int i = 0; i < o->nnames; i++)
    if (!strcmp(o->names[i], o->param)) return i;
  return -1;
}

static void get(const squallConfig_t *c, size_t offset, void *v, size_t width) {
  memcpy(v, (const char *)c + offset, width);
}
void squall__opt_put(squallConfig_t *c, size_t offset, const void *v, size_t width) {
  memcpy((char *)c + offset, v, width);
}
int squall__opt_get_int(const squallConfig_t *c, size_t offset) {
  int v;
  get(c, offset, &v, sizeof v);
  return v;
}
double squall__opt_get_double(const squallConfig_t *c, size_t offset) {
  double v;
  get(c, offset, &v, sizeof v);
  return v;
}
static size_t get_size(const squallConfig_t *c, size_t offset) {
  size_t v;
  get(c, offset, &v, sizeof v);
  return v;
}

/* An OPT_UINT member (int or size_t) as "%d" or "%zu"; 1 when in range. */
static int uint_value(const squall_option *o, const squallConfig_t *c, char *text, size_t n) {
  if (o->width == sizeof(int)) {
    int v = squall__opt_get_int(c, o->offset);
    snprintf(text, n, "%d", v);
    return v >= o->lo && v <= o->hi && v % multiple_of(o) == 0;
  }
  size_t v = get_size(c, o->offset);
  snprintf(text, n, "%zu", v);
  return v >= (size_t)o->lo && v <= (size_t)o->hi && v % (size_t)multiple_of(o) == 0;
}

static int double_ok(const squall_option *o, double x) { return (o->zero && x == 0) || (x >= o->dlo && x <= o->dhi); }
static int ratio_ok(double r) { return r > 0.0 && r <= 1.0; }

/* --------------------------------------------------- the typed parser */
static int parse_enum(const squall_option *o, squallConfig_t *c, const char *v) {
  int param = squall__opt_param_index(o);
  for (int i = 0; i < o->nnames; i++) {
    size_t len = strlen(o->names[i]);
    if (i == param) { /* "topk:<ratio>"; the name alone is not a value */
      double r;
      if (strncasecmp(v, o->names[i], len) || v[len] != ':') continue;
      if (parse_ratio(v + len + 1, &r) || !ratio_ok(r)) return -1;
      squall__opt_put(c, o->offset, &i, sizeof i);
      squall__opt_put(c, o->param_offset, &r, sizeof r);
      return 0;
    }
    if (!strcasecmp(v, o->names[i])) {
      squall__opt_put(c, o->offset, &i, sizeof i);
      return 0;
    }
  }
  return -1;
}

/* An OPT_SET's bits: every name's. */
static int set_all(const squall_option *o) { return (int)((1u << o->nnames) - 1); }

/* "allreduce,reducescatter" or "all": every item a name (any case), none
 * empty (a stray comma is a typo, not an empty item to skip). */
static int parse_set(const squall_option *o, squallConfig_t *c, const char *v) {
  int bits = 0;
  for (const char *p = v;; p++) {
    size_t len = strcspn(p, ",");
    int bit = -1;
    if (len == 3 && !strncasecmp(p, "all", 3)) bit = set_all(o);
    for (int i = 0; i < o->nnames && bit < 0; i++)
      if (strlen(o->names[i]) == len && !strncasecmp(p, o->names[i], len)) bit = 1 << i;
    if (bit < 0) return -1;
    bits |= bit;
    p += len;
    if (*p == 0) break;
  }
  squall__opt_put(c, o->offset, &bits, sizeof bits);
  return 0;
}

/* The set's names, comma-separated, in the table's order. */
static void print_set(const squall_option *o, const squallConfig_t *c, char *b, size_t n) {
  int bits = squall__opt_get_int(c, o->offset);
  if (n) b[0] = 0;
  for (int i = 0; i < o->nnames; i++)
    if (bits & 1 << i) snprintf(b + strlen(b), n - strlen(b), "%s%s", b[0] ? "," : "", o->names[i]);
}

/* Sets the member(s) of row o from text v; 0, or -1 with *c unchanged. */
int squall__opt_parse(const squall_option *o, squallConfig_t *c, const char *v) {
  switch (o->type) {
  case OPT_UINT: {
    long x;
    if (parse_uint(v, o->lo, o->hi, &x) || x % multiple_of(o)) return -1;
    if (o->width == sizeof(int)) {
      int i = (int)x;
      squall__opt_put(c, o->offset, &i, sizeof i);
    } else {
      size_t s = (size_t)x;
      squall__opt_put(c, o->offset, &s, sizeof s);
    }
    return 0;
  }
  case OPT_SIZE: {
    size_t s;
    if (squall__parse_size(v, &s)) return -1;
    squall__opt_put(c, o->offset, &s, sizeof s);
    return 0;
  }
  case OPT_DOUBLE: {
    double x;
    if (o->zero && !strcasecmp(v, o->zero)) x = 0;
    else if (parse_ratio(v, &x) || !double_ok(o, x)) return -1;
    squall__opt_put(c, o->offset, &x, sizeof x);
    return 0;
  }
  case OPT_ENUM: return parse_enum(o, c, v);
  case OPT_SET: return parse_set(o, c, v);
  case OPT_STRING:
    if (strlen(v) >= o->width) return -1;
    squall__opt_put(c, o->offset, v, strlen(v) + 1);
    return 0;
  }
  return -1;
}

/* ------------------------------------------------ the typed range check
 * 0 when the member(s) of c that row o sets hold a value the row could
 * have parsed; else -1 with the member, its value and the range in why
 * (squallSetConfig gets a whole structure rather than text). */
int squall__opt_check(const squall_option *o, const squallConfig_t *c, char *why, size_t n) {
  switch (o->type) {
  case OPT_UINT: {
    char v[32];
    if (uint_value(o, c, v, sizeof v)) return 0;
    if (multiple_of(o) > 1)
      snprintf(why, n, "%s=%s is not a multiple of %ld in [%ld, %ld]", o->member, v, o->multiple, o->lo, o->hi);
    else
      snprintf(why, n, "%s=%s is outside [%ld, %ld]", o->member, v, o->lo, o->hi);
    return -1;
  }
  case OPT_SIZE: return 0;
  case OPT_DOUBLE: {
    double x = squall__opt_get_double(c, o->offset);
    if (double_ok(o, x)) return 0;
    if (o->zero) snprintf(why, n, "%s=%g is neither 0 nor in [%g, %g]", o->member, x, o->dlo, o->dhi);
    else snprintf(why, n, "%s=%g is outside [%g, %g]", o->member, x, o->dlo, o->dhi);
    return -1;
  }
  case OPT_ENUM: {
    int v = squall__opt_get_int(c, o->offset);
    if (v < 0 || v >= o->nnames) {
      const char *sep = o->nnames == 2 ? "or" : "to";
      if (o->type_name) snprintf(why, n, "%s=%d is not a %s (0 %s %d)", o->member, v, o->type_name, sep, o->nnames - 1);
      else snprintf(why, n, "%s=%d is not 0 %s %d", o->member, v, sep, o->nnames - 1);
      return -1;
    }
    /* Checked whatever the value: a later SQUALL_COMPRESS=topk keeps the ratio. */
    if (o->param && !ratio_ok(squall__opt_get_double(c, o->param_offset))) {
      snprintf(why, n, "%s=%g is outside (0, 1]", o->param_member, squall__opt_get_double(c, o->param_offset));
      return -1;
    }
    return 0;
  }
  case OPT_SET: {
    int v = squall__opt_get_int(c, o->offset);
    if (v > 0 && (v & ~set_all(o)) == 0) return 0;
    snprintf(why, n, "%s=%d is not a non-empty set of its %d bits (1 to %d)", o->member, v, o->nnames, set_all(o));
    return -1;
  }
  case OPT_STRING:
    if (memchr((const char *)c + o->offset, 0, o->width) != NULL) return 0;
    snprintf(why, n, "%s is not terminated within its %zu bytes", o->member, o->width);
    return -1;
  }
  return -1;
}

/* ------------------------------------------------------------ printers
 * The enum's spelling of its value: out of range, the first name (the
 * description's rule, never read out of bounds); with its ratio. */
void squall__opt_enum_text(const squall_option *o, const squallConfig_t *c, char *b, size_t n) {
  int v = squall__opt_get_int(c, o->offset), param = squall__opt_param_index(o);
  const char *name = o->names[v >= 0 && v < o->nnames ? v : 0];
  if (param >= 0 && v == param) {
    char r[32];
    print_double(r, sizeof r, squall__opt_get_double(c, o->param_offset));
    snprintf(b, n, "%s:%s", name, r);
  } else {
    snprintf(b, n, "%s", name);
  }
}

/* The value as the variable would spell it; "invalid (...)" out of range.
 * Never reads out of bounds. */
void squall__opt_print(const squall_option *o, const squallConfig_t *c, char *b, size_t n) {
  char why[160];
  if (o->type == OPT_STRING) { /* what is there, even unterminated */
    snprintf(b, n, "%.*s", (int)strnlen((const char *)c + o->offset, o->width), (const char *)c + o->offset);
    return;
  }
  if (squall__opt_check(o, c, why, sizeof why)) {
    snprintf(b, n, "invalid (%s)", why);
    return;
  }
  switch (o->type) {
  case OPT_UINT: uint_value(o, c, b, n); break;
  case OPT_SIZE: print_size(get_size(c, o->offset), b, n); break;
  case OPT_DOUBLE: {
    double x = squall__opt_get_double(c, o->offset);
    if (o->zero && x == 0) snprintf(b, n, "%s", o->zero);
    else print_double(b, n, x);
    break;
  }
  case OPT_ENUM: squall__opt_enum_text(o, c, b, n); break;
  case OPT_SET: print_set(o, c, b, n); break;
  case OPT_STRING: break;
  }
}

/* The value in the configuration description: numbers in full (%zu, %d,
 * %.17g), enums by name or number. */
void squall__opt_wire(const squall_option *o, const squallConfig_t *c, char *b, size_t n) {
  switch (o->type) {
  case OPT_UINT: uint_value(o, c, b, n); break;
  case OPT_SIZE: snprintf(b, n, "%zu", get_size(c, o->offset)); break;
  case OPT_DOUBLE: snprintf(b, n, "%.17g", squall__opt_get_double(c, o->offset)); break;
  case OPT_ENUM:
    if (o->wire_number) snprintf(b, n, "%d", squall__opt_get_int(c, o->offset));
    else squall__opt_enum_text(o, c, b, n);
    break;
  case OPT_SET: snprintf(b, n, "%d", squall__opt_get_int(c, o->offset)); break;
  case OPT_STRING:
    snprintf(b, n, "%.*s", (int)strnlen((const char *)c + o->offset, o->width), (const char *)c + o->offset);
    break;
  }
}
