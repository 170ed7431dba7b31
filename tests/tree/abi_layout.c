/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * abi_layout - prints the layout of the public structs that a program
 * compiled against include/squall.h bakes in, and the enumerators' values.
 * tests/tree/abi.sh compares it with tests/tree/abi-layout.txt. One line each:
 *   enum NAME VALUE          an enumerator: never changes
 *   count NAME VALUE         a count of enumerators (squallPassNumReasons):
 *                            may grow, within its array's capacity
 *   struct TYPE SIZE         sizeof: may grow (members are appended)
 *   member TYPE.NAME OFFSET SIZE
 *                            never moves or changes size; a new one comes
 *                            after every recorded member of its struct
 * The structs begin with size, magic and version, and the library reads
 * and writes only as much of a caller's struct as the caller's size says
 * (squall.h): an appended member is compatible with programs built against
 * the record; a member that moved or changed size, or an enumerator that
 * changed, is not, and needs a new soname (SQUALL_SO_VERSION in
 * configure.ac) and a new record.
 */
#include <stddef.h>
#include <stdio.h>

#include "squall.h"

#define STRUCT(type) printf("struct %s %zu\n", #type, sizeof(type))
#define MEMBER(type, m) printf("member %s.%s %zu %zu\n", #type, #m, offsetof(type, m), sizeof(((type *)0)->m))
/* Enumerators are ABI too: they index passthrough[] and flat[], and the
 * codec values are what squallConfig_t holds. */
#define ENUMERATOR(name) printf("enum %s %d\n", #name, (int)(name))
#define COUNT(name) printf("count %s %d\n", #name, (int)(name))
#define ROW(name, key, doc) ENUMERATOR(name); /* the result, reason tables' rows */

int main(void) {
  SQUALL_RESULT_TABLE(ROW)
  COUNT(squallNumResults);
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
  ENUMERATOR(squallCollectiveAllReduce);
  ENUMERATOR(squallCollectiveReduceScatter);
  SQUALL_PASS_REASON_TABLE(ROW)
  COUNT(squallPassNumReasons);
  SQUALL_FLAT_REASON_TABLE(ROW)
  COUNT(squallFlatNumReasons);
  ENUMERATOR(SQUALL_CONFIG_MAGIC);
  ENUMERATOR(SQUALL_STATS_MAGIC);
  ENUMERATOR(SQUALL_OPTION_MAGIC);
  STRUCT(squallConfig_t);
  MEMBER(squallConfig_t, size);
  MEMBER(squallConfig_t, magic);
  MEMBER(squallConfig_t, version);
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
  MEMBER(squallConfig_t, statsInterval);
  MEMBER(squallConfig_t, summaryInterval);
  MEMBER(squallConfig_t, collectives);
  STRUCT(squallOption_t);
  MEMBER(squallOption_t, size);
  MEMBER(squallOption_t, magic);
  MEMBER(squallOption_t, version);
  MEMBER(squallOption_t, name);
  MEMBER(squallOption_t, field);
  MEMBER(squallOption_t, defaultValue);
  MEMBER(squallOption_t, accepted);
  MEMBER(squallOption_t, doc);
  MEMBER(squallOption_t, value);
  MEMBER(squallOption_t, agree);
  STRUCT(squallStats_t);
  MEMBER(squallStats_t, size);
  MEMBER(squallStats_t, magic);
  MEMBER(squallStats_t, version);
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
