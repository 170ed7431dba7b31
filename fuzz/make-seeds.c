/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * make-seeds.c - writes the starting corpora of the fuzz targets:
 *   make-seeds DIR   ->  DIR/config, DIR/lossless, DIR/sparse
 * Each seed is one input in the target's format (see the comment at the top
 * of fuzz_NAME.c): valid configurations and typical mistakes, real
 * lossless payloads of slots of several sizes, and slot sets for the sparse
 * decoder. tools/fuzz.sh --seeds builds and runs it; libFuzzer then grows
 * the corpora, and --merge keeps what adds coverage.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "codecs/codec.h"
#include "codecs/lossless.h"

static const char *outdir;

static void put(const char *target, const char *name, const void *data, size_t size) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", outdir, target);
  if (mkdir(path, 0755) != 0 && errno != EEXIST) {
    perror(path);
    exit(1);
  }
  snprintf(path, sizeof path, "%s/%s/%s", outdir, target, name);
  FILE *f = fopen(path, "wb");
  if (f == NULL || fwrite(data, 1, size, f) != size || fclose(f) != 0) {
    perror(path);
    exit(1);
  }
}

/* ------------------------------------------------------------ config */
static void config_seeds(void) {
  /* clang-format off */
  static const char *specs[] = {
      "", "SQUALL_COMPRESS=topk:0.01 SQUALL_EF=1", "compress=fp16", "compress=bf16;ef=0",
      "compress=topk:1", "compress=topk:1e-6 topk_values=fp16", "COMPRESS=NONE",
      " \t\n;compress=bf16;;  topk_values=fp16 \n min_bytes=4K\tzstd=0;",
      "min_bytes=1M ef_max_bytes=2G warmup=100 min_ranks=1 debug=TRACE",
      "min_bytes=0 min_bytes=1kb min_bytes=17 ef_max_bytes=3m", "stats=/tmp/s-%r.json debug=info",
      "zstd=19 zstd=0 warmup=0 min_ranks=1000000000", "compress=topk:0.333333333333",
      /* mistakes */
      "compress", "compress=fp17", "compress=topk:0", "compress=topk:1.5", "compress=topk:nan",
      "compress=topk:", "ef=2", "zstd=20", "min_bytes=12Q", "min_bytes=-1", "min_bytes=99999999999999999999",
      "min_bytes=18446744073709551615G", "warmup=-1", "min_ranks=0", "debug=LOUD", "=1", "bogus=1",
      "compress=fp16 ef=2", "SQUALL_=1", "squall_squall_ef=1", "topk_values=fp64",
  };
  /* clang-format on */
  char name[32];
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    snprintf(name, sizeof name, "spec-%02zu", i);
    put("config", name, specs[i], strlen(specs[i]));
  }
  /* SPEC NUL NAME NUL VALUE: squallConfigSet too. */
#define SEED(text) \
  { text, sizeof text - 1 }
  /* clang-format off */
  static const struct { const char *text; size_t len; } set[] = {
      SEED("ef=0\0SQUALL_COMPRESS\0topk:0.5"), SEED("\0ef\0" "1"), SEED("\0zstd\0" "7"),
      SEED("\0SQUALL_STATS\0/a b;c"), SEED("\0nonsense\0" "1"), SEED("\0warmup\0" "12x"),
      SEED("\0min_bytes\0" "64K"), SEED("\0debug\0trace"),
  };
  /* clang-format on */
#undef SEED
  for (size_t i = 0; i < sizeof set / sizeof set[0]; i++) {
    snprintf(name, sizeof name, "set-%02zu", i);
    put("config", name, set[i].text, set[i].len);
  }
  char longspec[800] = "stats=";
  memset(longspec + 6, 'x', 700);
  put("config", "too-long", longspec, 706);
  memset(longspec + 6, 'y', 505);
  put("config", "stats-511", longspec, 6 + 505);
}

/* ----------------------------------------------------------- lossless */
static unsigned rng_state = 12345;
static unsigned rnd(void) { return rng_state = rng_state * 1103515245u + 12345u, rng_state >> 8; }

/* A header: FLAGS K(u16) N(u32). */
static size_t header(unsigned char *h, unsigned flags, size_t k, size_t n) {
  h[0] = (unsigned char)flags;
  h[1] = (unsigned char)k;
  h[2] = (unsigned char)(k >> 8);
  for (int i = 0; i < 4; i++) h[3 + i] = (unsigned char)(n >> (8 * i));
  return 7;
}

static void lossless_seeds(void) {
  static const size_t ks[] = {0, 1, 2, 7, 40, 300, 1500};
  char name[64];
  int count = 0;
  for (size_t a = 0; a < sizeof ks / sizeof ks[0]; a++)
    for (int v = 0; v < 2; v++) {
      size_t k = ks[a];
      squallValueType_t vt = v ? squallValueFp16 : squallValueFp32;
      size_t n = k * (1 + a * 37) + 3;
      size_t sb = squall__topk_slot_bytes(k, vt);
      unsigned char *slot = calloc(1, sb + 1);
      size_t next = 0;
      for (size_t i = 0; i < k; i++) {
        size_t room = n - next - (k - i);
        next += room ? rnd() % (room / (k - i) + 1) : 0;
        uint32_t idx = (uint32_t)next++;
        memcpy(slot + 4 * i, &idx, 4);
      }
      for (size_t i = 0; i < (v ? 2 * k : 4 * k); i++) slot[4 * k + i] = (unsigned char)rnd();
      if (v) {
        float scale = 1024.0f;
        memcpy(slot + squall__slot_scale_offset(k), &scale, 4);
      }
      size_t cap = squall__lossless_bound(k, vt);
      unsigned char *buf = malloc(7 + cap);
      void *scratch = malloc(squall__lossless_scratch_bytes(k, vt) + 1);
      size_t h = header(buf, v, k, n);
      size_t z = squall__lossless_encode(slot, k, vt, 1 + (int)a % 3, buf + h, cap, scratch);
      if (z == 0) {
        fprintf(stderr, "make-seeds: encode failed\n");
        exit(1);
      }
      snprintf(name, sizeof name, "payload-k%zu-%s", k, v ? "fp16" : "fp32");
      put("lossless", name, buf, h + z);
      /* The same payload with n too small, cut short, and with a flipped byte. */
      if (k > 0) {
        header(buf, v, k, next - 1);
        snprintf(name, sizeof name, "payload-k%zu-%s-small-n", k, v ? "fp16" : "fp32");
        put("lossless", name, buf, h + z);
        header(buf, v, k, n);
      }
      snprintf(name, sizeof name, "payload-k%zu-%s-cut", k, v ? "fp16" : "fp32");
      put("lossless", name, buf, h + z / 2);
      buf[h + z / 2] ^= 0x5a;
      snprintf(name, sizeof name, "payload-k%zu-%s-flip", k, v ? "fp16" : "fp32");
      put("lossless", name, buf, h + z);
      free(buf);
      free(scratch);
      free(slot);
      count++;
    }
  /* Build mode (FLAGS bit 1): level, gaps (some long), value bytes. */
  for (int s = 0; s < 6; s++) {
    unsigned char buf[512];
    size_t k = 3 + (size_t)s * 11;
    size_t h = header(buf, 2 | (s & 1), k, s == 5 ? 40 : 1u << (8 + 3 * s));
    buf[h++] = (unsigned char)(s * 3);
    while (h < sizeof buf) buf[h++] = (unsigned char)(s == 4 ? rnd() | 0x80 : rnd() & 0x7f);
    snprintf(name, sizeof name, "build-%d", s);
    put("lossless", name, buf, sizeof buf);
  }
  /* Not zstd at all. */
  unsigned char junk[64];
  size_t h = header(junk, 0, 4, 100);
  for (size_t i = h; i < sizeof junk; i++) junk[i] = (unsigned char)rnd();
  put("lossless", "junk", junk, sizeof junk);
}

/* ------------------------------------------------------------- sparse */
static void sparse_seeds(void) {
  char name[64];
  /* clang-format off */
  struct { unsigned flags; int nranks; size_t k, n; } cases[] = {
      {2, 2, 4, 100},   {3, 2, 4, 100},  {2, 8, 16, 8191}, {3, 3, 256, 5000}, {2, 1, 1, 1},
      {0, 2, 3, 50},    {1, 4, 5, 300},  {2, 0, 10, 10},   {2, -1, 2, 20},    {2, 2, 0, 0},
      {2, 2, 20, 15},   {3, 5, 64, 64},  {0, 8, 256, 8191}, {1, 1, 7, 7},
  };
  /* clang-format on */
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    unsigned char buf[4096];
    size_t h = 0;
    buf[h++] = (unsigned char)cases[c].flags;
    buf[h++] = (unsigned char)(cases[c].nranks + 1);
    buf[h++] = (unsigned char)cases[c].k;
    buf[h++] = (unsigned char)(cases[c].k >> 8);
    buf[h++] = (unsigned char)cases[c].n;
    buf[h++] = (unsigned char)(cases[c].n >> 8);
    /* Gap mode: small gaps; raw mode: random bytes (mostly refused). */
    while (h < sizeof buf) buf[h++] = (unsigned char)((cases[c].flags & 2) ? rnd() % 7 : rnd());
    size_t len = 6 + (size_t)(cases[c].nranks > 0 ? cases[c].nranks : 0) * (cases[c].k * 4 + 12) + 16;
    if (len > sizeof buf) len = sizeof buf;
    snprintf(name, sizeof name, "slots-%02zu", c);
    put("sparse", name, buf, len);
  }
  /* Packed parts (FLAGS bit 2, N in units of 37 elements): each rank's
   * slot cut by the real packer, so that most are accepted and the
   * fuzzer starts from parts whose counts add up. */
  /* clang-format off */
  struct { unsigned flags; int nranks; size_t k, n37; } packed[] = {
      {4, 2, 200, 5000}, {5, 3, 100, 3600}, {4, 1, 256, 8191}, {5, 2, 40, 4000},
  };
  /* clang-format on */
  for (size_t c = 0; c < sizeof packed / sizeof packed[0]; c++) {
    static unsigned char buf[16384];
    const squallValueType_t vt = (packed[c].flags & 1) ? squallValueFp16 : squallValueFp32;
    const size_t k = packed[c].k, n = packed[c].n37 * 37, sb = squall__topk_slot_bytes(k, vt);
    const size_t pb = squall__topk_part_packed_bytes(k, n, vt);
    size_t h = 0;
    buf[h++] = (unsigned char)packed[c].flags;
    buf[h++] = (unsigned char)(packed[c].nranks + 1);
    buf[h++] = (unsigned char)k;
    buf[h++] = (unsigned char)(k >> 8);
    buf[h++] = (unsigned char)packed[c].n37;
    buf[h++] = (unsigned char)(packed[c].n37 >> 8);
    unsigned char *slot = calloc(1, sb);
    for (int rk = 0; rk < packed[c].nranks && pb > 0 && h + pb <= sizeof buf; rk++) {
      for (size_t j = 0; j < k; j++) {
        uint32_t idx = (uint32_t)(j * (n / k) + rnd() % (n / k)), val = rnd();
        memcpy(slot + 4 * j, &idx, 4);
        if (vt == squallValueFp16) memcpy(slot + 4 * k + 2 * j, &val, 2);
        else memcpy(slot + 4 * k + 4 * j, &val, 4);
      }
      if (vt == squallValueFp16) {
        float scale = 0.25f;
        memcpy(slot + squall__slot_scale_offset(k), &scale, 4);
      }
      squall__topk_slot_cut_packed(slot, k, 0, k, n, vt, buf + h);
      h += pb;
    }
    free(slot);
    snprintf(name, sizeof name, "packed-%02zu", c);
    put("sparse", name, buf, h);
  }
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: make-seeds DIR\n");
    return 2;
  }
  outdir = argv[1];
  if (mkdir(outdir, 0755) != 0 && errno != EEXIST) {
    perror(outdir);
    return 1;
  }
  config_seeds();
  lossless_seeds();
  sparse_seeds();
  return 0;
}
