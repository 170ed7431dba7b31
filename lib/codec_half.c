/*
 * codec_half.c - the host 16-bit codec (fp16 and bf16) and the absolute
 * maximum that picks its scale. Every element goes through codec_math.h, so
 * the CUDA twin (cuda/half.cu) produces the same bits.
 *
 * Only codec.h and libc here: the standalone GPU self-test build compiles
 * this file without config.h or the logger.
 */
#include "codec.h"

float squall__absmax(const float *g, const float *res, size_t n) {
  float m = 0.0f;
  for (size_t i = 0; i < n; i++) {
    float a = res ? g[i] + res[i] : g[i];
    if (!sq_isfinite(a)) continue; /* Inf and NaN are delivered as they are, never scaled for */
    float x = sq_bits_float(sq_float_bits(a) & 0x7fffffffu); /* |a| without libm */
    if (x > m) m = x;
  }
  return m;
}

void squall__half_encode(sq_half_kind kind, const float *g, float *res, uint16_t *out, size_t n,
                         float scale) {
  if (res) {
    for (size_t i = 0; i < n; i++) out[i] = sq_half_encode_elem(kind, g[i], &res[i], scale);
  } else {
    for (size_t i = 0; i < n; i++) out[i] = sq_half_encode_elem(kind, g[i], NULL, scale);
  }
}

void squall__half_decode(sq_half_kind kind, const uint16_t *in, float *out, size_t n, float scale,
                         int accumulate) {
  if (accumulate) {
    for (size_t i = 0; i < n; i++) out[i] += sq_half_decode_elem(kind, in[i], scale);
  } else {
    for (size_t i = 0; i < n; i++) out[i] = sq_half_decode_elem(kind, in[i], scale);
  }
}
