/* SPDX-License-Identifier: BSD-3-Clause */
/* typo_refuse.h - squall's own tools refuse a SQUALL_ variable that is no
 * option (the typo policy of squall(7)); see typo_refuse.c. */
#ifndef SQUALL_TYPO_REFUSE_H
#define SQUALL_TYPO_REFUSE_H

/* Names on stderr, after "prog: ", every SQUALL_ variable in the
 * environment that is neither an option nor a tool's, with the option it
 * may have meant (prog NULL: silently); returns how many (0: the tool may
 * run). */
int squall_tool_refuse_typos(const char *prog);

#endif
