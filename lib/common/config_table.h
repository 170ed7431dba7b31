/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * config_table.h - the rows of the configuration table (config.c) and the
 * typed operations on them (config_types.c): a row names an environment
 * variable, the squallConfig_t member it sets (by offsetof), its type with
 * the type's bounds or names, and whether the ranks must agree on it.
 */
#ifndef SQUALL_CONFIG_TABLE_H
#define SQUALL_CONFIG_TABLE_H

#include <stddef.h>

#include "squall.h"

typedef enum {
  OPT_UINT,   /* decimal digits in [lo, hi], a multiple of `multiple`; an int or size_t member */
  OPT_SIZE,   /* bytes with an optional K/M/G suffix (squall__parse_size); a size_t member */
  OPT_DOUBLE, /* a decimal number in [dlo, dhi], or 0 (also spelt `zero`) where zero is set */
  OPT_ENUM,   /* one of names[] in any case; the member (an enum or int) holds its index. The
                 name `param` takes ":<ratio>", 0 < ratio <= 1, into a double member
                 (SQUALL_COMPRESS=topk:<ratio>) */
  OPT_STRING, /* text shorter than the member's char array */
  OPT_SET     /* a comma list of names[] (any case), or `all`: an int member holding bit i
                 for names[i]; never empty (SQUALL_COLLECTIVES=allreduce,reducescatter) */
} squall_opt_type;

/* Every row says whether the ranks must hold the same value: a row that
 * says neither fails squall__config_table_check (tests/test_config.c). */
typedef enum {
  OPT_SCOPE_UNSET = 0,
  OPT_AGREE, /* changes what goes on the wire or which collectives run: in the description
                and the digest that the call header compares */
  OPT_LOCAL  /* this rank's own (logging, its files, its memory): ranks may differ */
} squall_opt_scope;

typedef struct {
  const char *name;     /* environment variable */
  const char *member;   /* the squallConfig_t member */
  const char *field;    /* the member(s) it sets, for squallOption_t (NULL: member) */
  const char *defval;   /* default, as text */
  const char *accepted; /* for error messages and docs */
  const char *doc;
  squall_opt_type type;
  size_t offset, width; /* offsetof and sizeof the member */
  squall_opt_scope scope;
  const char *key;          /* OPT_AGREE: its word in the description */
  int wire_number;          /* OPT_ENUM in the description: the number, not the name */
  long lo, hi, multiple;    /* OPT_UINT (multiple 0: any) */
  double dlo, dhi;          /* OPT_DOUBLE */
  const char *zero;         /* OPT_DOUBLE: the word for 0, which is then accepted */
  const char *const *names; /* OPT_ENUM, OPT_SET */
  int nnames;
  const char *type_name;    /* OPT_ENUM: the C type, for messages (NULL: none) */
  const char *param;        /* OPT_ENUM: the name that takes a ratio, or NULL */
  const char *param_member; /* the double member it sets */
  size_t param_offset;
  double param_default;
  const char *param_key; /* its word in the description, given there last */
} squall_option;

/* Sets the member(s) of row o from text v exactly as documented; 0, or -1
 * with *c unchanged. */
int squall__opt_parse(const squall_option *o, squallConfig_t *c, const char *v);
/* 0 when the member(s) of c that row o sets hold a value the row could
 * have parsed; else -1 with the member, its value and the range in why. */
int squall__opt_check(const squall_option *o, const squallConfig_t *c, char *why, size_t n);
/* The value as the variable would spell it; "invalid (...)" out of range
 * (a string: what is there). Never reads out of bounds. */
void squall__opt_print(const squall_option *o, const squallConfig_t *c, char *b, size_t n);
/* The value in the configuration description: numbers in full (%zu, %d,
 * %.17g), enums by name (the first one out of range) or by number. */
void squall__opt_wire(const squall_option *o, const squallConfig_t *c, char *b, size_t n);
/* An enum's name for its value (the first one out of range), with the
 * ratio where the name takes one: squallConfigCodecString's text. */
void squall__opt_enum_text(const squall_option *o, const squallConfig_t *c, char *b, size_t n);
/* The index of the enum name that takes a ratio; -1 for none. */
int squall__opt_param_index(const squall_option *o);

/* Members by offset (memcpy: no aliasing of enum and int). */
void squall__opt_put(squallConfig_t *c, size_t offset, const void *v, size_t width);
int squall__opt_get_int(const squallConfig_t *c, size_t offset);
double squall__opt_get_double(const squallConfig_t *c, size_t offset);

#endif
