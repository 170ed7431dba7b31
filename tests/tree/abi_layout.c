/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * abi_layout - prints the layout of the public structs (size, and the
 * offset of every member) that a program compiled against include/squall.h
 * bakes in. tests/tree/abi.sh compares it with tests/tree/abi-layout.txt: a member
 * added, moved or resized changes what squallConfigDefault and
 * squallStatsGet write into the caller's struct, so an old binary would
 * have memory past its struct overwritten. The enumerators' values too.
 * Such a change needs a new soname (SQUALL_SO_VERSION in configure.ac) and
 * a new record.
 */
#include <stddef.h>
#include <stdio.h>

#include "squall.h"

#define MEMBER(type, m) printf("%s.%s %zu %zu\n", #type, #m, offsetof(type, m), sizeof(((type *)0)->m))
/* Enumerators are ABI too: they index passthrough[] and flat[], and the
 * codec values are what squallConfig_t holds. */
#define ENUMERATOR(name) printf("%s %d\n", #name, (int)(name))
#define REASON(name, key, doc) ENUMERATOR(name); /* the result, reason tables' rows */

int main(void) {
  SQUALL_RESULT_TABLE(REASON)
  ENUMERATOR(squallNumResults);
  ENUMERATOR(squallCodecNone);
  ENUMERATOR(squallCodecFp16);
  ENUMERATOR(squallCodecBf16);
  ENUMERATOR(squallCodecTopk);
  ENUMERATOR(squallCodecInt8);
  ENUMERATOR(squallCodecInt4);
  ENUMERATOR(squallCodecFp8);
  ENUMERATOR(squallHalfAccumFp32);
  ENUMERATOR(squallHalfAccumHalf);
  ENUMERATOR(squallValueFp32);
  ENUMERATOR(squallValueFp16);
  ENUMERATOR(squallHierarchyAuto);
  ENUMERATOR(squallHierarchyFlat);
  ENUMERATOR(squallLogWarn);
  ENUMERATOR(squallLogInfo);
  ENUMERATOR(squallLogTrace);
  SQUALL_PASS_REASON_TABLE(REASON)
  ENUMERATOR(squallPassNumReasons);
  SQUALL_FLAT_REASON_TABLE(REASON)
  ENUMERATOR(squallFlatNumReasons);
  printf("squallConfig_t %zu\n", sizeof(squallConfig_t));
  MEMBER(squallConfig_t, codec);
  MEMBER(squallConfig_t, topkRatio);
  MEMBER(squallConfig_t, topkValues);
  MEMBER(squallConfig_t, errorFeedback);
  MEMBER(squallConfig_t, minBytes);
  MEMBER(squallConfig_t, zstdLevel);
  MEMBER(squallConfig_t, efMaxBytes);
  MEMBER(squallConfig_t, warmup);
  MEMBER(squallConfig_t, minRanks);
  MEMBER(squallConfig_t, debug);
  MEMBER(squallConfig_t, statsPath);
  MEMBER(squallConfig_t, bucket);
  MEMBER(squallConfig_t, halfAccum);
  MEMBER(squallConfig_t, hierarchy);
  MEMBER(squallConfig_t, ranksPerNode);
  MEMBER(squallConfig_t, chunkBytes);
  MEMBER(squallConfig_t, costModel);
  MEMBER(squallConfig_t, linkGbps);
  printf("squallOption_t %zu\n", sizeof(squallOption_t));
  MEMBER(squallOption_t, name);
  MEMBER(squallOption_t, field);
  MEMBER(squallOption_t, defaultValue);
  MEMBER(squallOption_t, accepted);
  MEMBER(squallOption_t, doc);
  MEMBER(squallOption_t, value);
  printf("squallStats_t %zu\n", sizeof(squallStats_t));
  MEMBER(squallStats_t, calls);
  MEMBER(squallStats_t, compressedCalls);
  MEMBER(squallStats_t, passthroughCalls);
  MEMBER(squallStats_t, passthrough);
  MEMBER(squallStats_t, bytesIn);
  MEMBER(squallStats_t, bytesWire);
  MEMBER(squallStats_t, codecSeconds);
  MEMBER(squallStats_t, flatCalls);
  MEMBER(squallStats_t, twoLevelCalls);
  MEMBER(squallStats_t, flat);
  MEMBER(squallStats_t, bytesInterNode);
  MEMBER(squallStats_t, bytesIntraNode);
  MEMBER(squallStats_t, pipelinedCalls);
  MEMBER(squallStats_t, pipelineChunks);
  MEMBER(squallStats_t, headers);
  return 0;
}
