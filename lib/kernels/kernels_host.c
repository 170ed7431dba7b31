/* SPDX-License-Identifier: BSD-3-Clause */
/* kernels_host.c - the engine's kernel set on host memory: thin wrappers
 * over the host codecs, plus the widening and narrowing of 16-bit data. */
#include "common/internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "codecs/codec.h"
#include "kernels/kernels.h"

/* Blocks from this size on (residuals, their spares, the scratch of large
 * calls) start on a 2 MiB boundary and ask for transparent huge pages,
 * which most systems leave to the program (THP "madvise"). The codecs
 * stream through several such buffers at once; with 4 KiB pages every
 * stream crosses a page each 4 KiB, where the hardware prefetcher stops
 * and, in a virtual machine, a TLB miss walks two page tables. Top-k's
 * selection pass on 4 ranks over 2 cores of a KVM guest took 35 ms
 * instead of 47 with its residuals on huge pages. */
#define HOST_HUGE_BYTES ((size_t)2 << 20)

/* A block's header, just below it: where it came from, to free it. */
typedef struct {
  void *base;    /* calloc's pointer, or the mapping's start */
  size_t mapped; /* the mapping's length; 0: from calloc */
} host_block;

/* Zeroed and 64-byte aligned (large blocks: 2 MiB, above): buffers carved
 * at the same offsets from two of them (a residual and its backup,
 * twophase.c's shards) then share their alignment, which the streamed
 * stores need. Untouched zero pages until used. Large blocks are mappings
 * of their own, not calloc's: glibc serves blocks below its mmap
 * threshold (up to 32 MiB once it has risen) from the heap, where calloc
 * would write the whole block and the huge-page hint would outlive it. */
static void *host_alloc(void *stream, size_t bytes) {
  const size_t head = sizeof(host_block);
#if defined(MADV_HUGEPAGE) && defined(MAP_ANONYMOUS)
  if (bytes >= HOST_HUGE_BYTES) {
    if (bytes > SIZE_MAX - 2 * HOST_HUGE_BYTES) return NULL;
    size_t len = bytes + HOST_HUGE_BYTES + 4096; /* room for the header and the alignment */
    void *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return NULL;
    uintptr_t p = ((uintptr_t)base + head + HOST_HUGE_BYTES - 1) & ~(uintptr_t)(HOST_HUGE_BYTES - 1);
    ((host_block *)p)[-1] = (host_block){base, len};
    /* a hint: where the system refuses it, the pages stay small */
    (void)madvise((void *)p, bytes & ~(HOST_HUGE_BYTES - 1), MADV_HUGEPAGE);
    return (void *)p;
  }
#endif
  const size_t extra = 64 + head;
  if (bytes > SIZE_MAX - extra) return NULL;
  unsigned char *raw = calloc(1, bytes + extra);
  if (raw == NULL) return NULL;
  uintptr_t p = ((uintptr_t)raw + head + 63) & ~(uintptr_t)63;
  ((host_block *)p)[-1] = (host_block){raw, 0};
  return (void *)p;
}
static void host_free(void *stream, void *p) {
  if (p == NULL) return;
  host_block b = ((host_block *)p)[-1];
#if defined(MADV_HUGEPAGE) && defined(MAP_ANONYMOUS)
  if (b.mapped) {
    munmap(b.base, b.mapped);
    return;
  }
#endif
  free(b.base);
}

static squallResult_t host_zero(void *stream, void *p, size_t bytes) {
  memset(p, 0, bytes);
  return squallSuccess;
}

static squallResult_t host_to_host(void *stream, void *dst, const void *src, size_t bytes) {
  memcpy(dst, src, bytes);
  return squallSuccess;
}

static squallResult_t host_flush_body(void *stream, const float *g, float *res, float *a, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float r = res ? res[i] : 0.0f;
    a[i] = res ? g[i] + r : g[i];
    if (res) res[i] = 0.0f;
  }
  return squallSuccess;
}

/* Each in the default floating-point environment (common/fpenv.h): every
 * rank forms the same average, and its own flushed and pre-multiplied
 * input as the definition does. */
#define IN_DEFAULT_FP_ENV(call)                           \
  do {                                                    \
    const unsigned saved_fp = squall__fp_default_begin(); \
    const squallResult_t result = (call);                 \
    squall__fp_default_end(saved_fp);                     \
    return result;                                        \
  } while (0)

static squallResult_t host_flush(void *stream, const float *g, float *res, float *a, size_t n) {
  IN_DEFAULT_FP_ENV(host_flush_body(stream, g, res, a, n));
}

static squallResult_t host_widen_body(void *stream, squall_dtype t, const void *src, float *dst, size_t n,
                                      float scalar) {
  if (t == SQ_DT_F32) {
    const float *s = src;
    if (scalar == 1.0f) {
      if (dst != s) memmove(dst, s, n * sizeof *dst);
    } else {
      for (size_t i = 0; i < n; i++) dst[i] = scalar * s[i];
    }
    return squallSuccess;
  }
  const uint16_t *s = src;
  sq_half_kind kind = squall__dtype_half_kind(t);
  for (size_t i = 0; i < n; i++) dst[i] = scalar * sq_half_to_f32(kind, s[i]);
  return squallSuccess;
}

static squallResult_t host_widen(void *stream, squall_dtype t, const void *src, float *dst, size_t n,
                                 float scalar) {
  IN_DEFAULT_FP_ENV(host_widen_body(stream, t, src, dst, n, scalar));
}

static squallResult_t host_narrow_body(void *stream, squall_dtype t, const float *src, void *dst, size_t n,
                                       float divisor) {
  if (t == SQ_DT_F32) {
    float *d = dst;
    if (divisor == 1.0f) {
      if (d != src) memmove(d, src, n * sizeof *d);
    } else {
      for (size_t i = 0; i < n; i++) d[i] = src[i] / divisor;
    }
    return squallSuccess;
  }
  uint16_t *d = dst;
  sq_half_kind kind = squall__dtype_half_kind(t);
  for (size_t i = 0; i < n; i++) d[i] = sq_half_from_f32(kind, src[i] / divisor);
  return squallSuccess;
}

static squallResult_t host_narrow(void *stream, squall_dtype t, const float *src, void *dst, size_t n,
                                  float divisor) {
  IN_DEFAULT_FP_ENV(host_narrow_body(stream, t, src, dst, n, divisor));
}

static size_t host_absmax_ws(size_t n) { return 0; }

static squallResult_t host_absmax(void *stream, const float *g, const float *res, size_t n, float *out,
                                  void *ws) {
  *out = squall__absmax(g, res, n);
  return squallSuccess;
}

static squallResult_t host_pow2_scale(void *stream, const float *absmax, float limit, float max_scale,
                                      float *scale) {
  float s = sq_pow2_scale(*absmax, limit);
  *scale = s > max_scale ? max_scale : s;
  return squallSuccess;
}

static squallResult_t host_half_encode(void *stream, sq_half_kind kind, const float *g, float *res,
                                       uint16_t *out, size_t n, const float *scale) {
  squall__half_encode(kind, g, res, out, n, *scale);
  return squallSuccess;
}

static squallResult_t host_half_decode(void *stream, sq_half_kind kind, const uint16_t *in, float *out,
                                       size_t n, const float *scale, int cold) {
  if (cold)
    squall__half_decode_cold(kind, in, out, n, *scale);
  else
    squall__half_decode(kind, in, out, n, *scale, 0);
  return squallSuccess;
}

static squallResult_t host_half_encode_guess(void *stream, sq_half_kind kind, const float *g, float *res,
                                             uint16_t *out, size_t n, float guess, float *absmax, int cold,
                                             float *backup) {
  float m = squall__half_encode_guess(kind, g, res, out, n, guess, cold, backup);
  if (m > *absmax) *absmax = m;
  return squallSuccess;
}

static squallResult_t host_half_rescale(void *stream, sq_half_kind kind, float *res, uint16_t *codes, size_t n,
                                        float guess, const float *absmax, const float *scale) {
  if (squall__half_guess_missed(kind, guess, *absmax, *scale)) squall__half_rescale(kind, res, codes, n, guess, *scale);
  return squallSuccess;
}

static size_t host_topk_ws(size_t n, size_t k) { return squall__topk_workspace_bytes(n); }

static squallResult_t host_topk_encode_backup(void *stream, const float *g, float *res, size_t n, size_t k,
                                              squallValueType_t values, const float *scale, void *slot, void *ws,
                                              float *backup) {
  SQ_RETURN_ERROR_IF(squall__topk_encode_backup(g, res, n, k, values, *scale, slot, ws, backup) != 0,
                     squallInternalError, "top-k encode failed (k=%zu, n=%zu)", k, n);
  return squallSuccess;
}

static squallResult_t host_topk_encode(void *stream, const float *g, float *res, size_t n, size_t k,
                                       squallValueType_t values, const float *scale, void *slot,
                                       void *ws) {
  return host_topk_encode_backup(stream, g, res, n, k, values, scale, slot, ws, NULL);
}

static squallResult_t host_topk_encode_to(void *stream, const float *g, const float *res, float *out_res, size_t n,
                                          size_t k, squallValueType_t values, const float *scale, void *slot,
                                          void *ws) {
  SQ_RETURN_ERROR_IF(squall__topk_encode_to(g, res, out_res, n, k, values, *scale, slot, ws) != 0,
                     squallInternalError, "top-k encode failed (k=%zu, n=%zu)", k, n);
  return squallSuccess;
}

static squallResult_t host_topk_select(void *stream, const float *g, const float *res, size_t n, size_t k,
                                       squallValueType_t values, const float *scale, void *slot,
                                       void *ws) {
  SQ_RETURN_ERROR_IF(squall__topk_select(g, res, n, k, values, *scale, slot, ws) != 0,
                     squallInternalError, "top-k selection failed (k=%zu, n=%zu)", k, n);
  return squallSuccess;
}

static squallResult_t host_topk_finish(void *stream, const float *g, float *res, size_t n, size_t k,
                                       squallValueType_t values, void *ws, const void *slots, int nranks,
                                       int own, float *dense, int *flag) {
  SQ_RETURN_ERROR_IF(squall__topk_finish(g, res, n, slots, nranks, own, k, values, dense) != 0,
                     squallRemoteError,
                     "a peer's top-k payload is corrupt (index out of range or not ascending)");
  return squallSuccess;
}

const squall_kernels squall__kernels_host = {
    .name = "host",
    .on_host = 1,
    .topk_in_rounds = 1,
    .twophase_alone = 1,
    .topk_max_elems = UINT32_MAX, /* the slots' indices are u32 */
    .alloc = host_alloc,
    .free = host_free,
    .zero = host_zero,
    .to_host = host_to_host,
    .flush = host_flush,
    .widen = host_widen,
    .narrow = host_narrow,
    .absmax_workspace_bytes = host_absmax_ws,
    .absmax = host_absmax,
    .pow2_scale = host_pow2_scale,
    .half_encode = host_half_encode,
    .half_decode = host_half_decode,
    .topk_workspace_bytes = host_topk_ws,
    .topk_encode = host_topk_encode,
    .topk_select = host_topk_select,
    .topk_finish = host_topk_finish,
    /* quantised codecs (kernels_host_quant.c) */
    .quant_encode = squall__host_quant_encode,
    .quant_decode = squall__host_quant_decode,
    .quant_reduce = squall__host_quant_reduce,
    .half_reduce = squall__host_half_reduce,
    .half_encode_guess = host_half_encode_guess,
    .half_rescale = host_half_rescale,
    .half_reduce_encode = squall__host_half_reduce_encode,
    .quant_encode_backup = squall__host_quant_encode_backup,
    .topk_encode_backup = host_topk_encode_backup,
    .topk_encode_to = host_topk_encode_to,
    .timer_record = squall__host_timer_record, /* timer_host.c */
    .timer_elapsed = squall__host_timer_elapsed,
    .timer_free = squall__host_timer_free,
};
