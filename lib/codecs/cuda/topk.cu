/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * topk.cu - device twin of the top-k encoder (lib/codecs/codec_topk.c).
 *
 * Exact selection without a sort and without a host synchronisation:
 *  1. keys[i] = sq_topk_key(a[i]), a = g + res, kept in the workspace so
 *     that every later step sees the same keys;
 *  2. radix select on the composite key ck = (key << 32) | ~i. Composite
 *     keys are all distinct and order by key first, then lower index first:
 *     the tie rule. Six passes of a digit histogram (11,10,10,11,11,10 bits
 *     from the top) each narrow the prefix of the k-th largest ck; a pass
 *     whose chosen bin holds exactly the entries still needed ends the
 *     search early (later passes return at once). The threshold C = that
 *     prefix, and the sent set is {i : ck(i) >= C}, exactly k entries;
 *  3. a stable compaction (per-block counts, one-block scan, per-block
 *     write) lists those indices in ascending order into the slot;
 *  4. a gather writes the values (fp32, or fp16 of a * scale, with the
 *     scale);
 *  5. after the exchange (squall__cuda_topk_commit), a pass over all n
 *     updates the residual from the threshold the selection left in the
 *     workspace, unless the exchange brought a corrupt payload.
 * Every count lives in device memory; the host only enqueues.
 */
#include <climits>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include "codecs/codec.h"
#include "codecs/cuda/codec_cuda.h"
#include "codecs/cuda/cuda_check.h"

namespace {

constexpr unsigned kThreads = 256;     /* histogram, compaction, gather blocks */
constexpr unsigned kHistBlocks = 1024; /* grid-stride histogram grid, at most */
constexpr unsigned kMaxBins = 2048;    /* widest digit: 11 bits */
constexpr unsigned kChunk = 2048;      /* entries per compaction block */
constexpr unsigned kRounds = kChunk / kThreads;
constexpr unsigned kScanThreads = 1024; /* the one-block scan of block counts */
constexpr unsigned kElementwiseBlocks = 8192;
constexpr size_t kAlign = 256; /* workspace regions start aligned */

/* Digits of the 63-bit composite key, most significant first. */
struct Digit {
  int shift, bits;
};
constexpr int kPasses = 6;
constexpr Digit kDigits[kPasses] = {{52, 11}, {42, 10}, {32, 10}, {21, 11}, {10, 11}, {0, 10}};

/* The selection's progress, in device memory. */
struct SelectState {
  unsigned long long prefix; /* digits decided so far; the threshold C once done */
  uint32_t remaining;        /* entries still needed among those matching prefix */
  uint32_t done;             /* 1: {ck >= prefix} is exactly the sent set */
};

__device__ __forceinline__ unsigned long long composite(uint32_t key, uint32_t i) {
  return ((unsigned long long)key << 32) | (uint32_t)~i;
}

__global__ void init_state(SelectState *st, uint32_t *hist, unsigned hist_words, uint32_t n,
                           uint32_t k) {
  for (unsigned w = threadIdx.x; w < hist_words; w += blockDim.x) hist[w] = 0;
  if (threadIdx.x == 0) {
    if (k == 0) { /* above every ck (< 2^63): nothing is sent */
      st->prefix = ~0ull;
      st->done = 1;
    } else if (k == n) { /* at or below every ck: everything is sent */
      st->prefix = 0;
      st->done = 1;
    } else {
      st->prefix = 0;
      st->done = 0;
    }
    st->remaining = k;
  }
}

/* Pass 0: computes and stores the keys, and counts the top digit
 * (key >> 20 == ck >> 52) in a block-private histogram. */
__global__ void __launch_bounds__(kThreads)
keys_hist0(const float *g, const float *res, uint32_t n, uint32_t *keys, const SelectState *st,
           uint32_t *hist) {
  __shared__ uint32_t sh[kMaxBins];
  const bool count = !st->done; /* the same for every thread */
  for (unsigned b = threadIdx.x; b < kMaxBins; b += kThreads) sh[b] = 0;
  __syncthreads();
  for (size_t i = (size_t)blockIdx.x * kThreads + threadIdx.x; i < n;
       i += (size_t)gridDim.x * kThreads) {
    uint32_t key = sq_topk_key(res ? g[i] + res[i] : g[i]);
    keys[i] = key;
    if (count) atomicAdd(&sh[key >> 20], 1u);
  }
  __syncthreads();
  if (count)
    for (unsigned b = threadIdx.x; b < kMaxBins; b += kThreads)
      if (sh[b]) atomicAdd(&hist[b], sh[b]);
}

/* Passes 1..5: histogram of digit (shift, bits) over the entries whose
 * higher digits equal the prefix chosen so far. */
__global__ void __launch_bounds__(kThreads)
hist_pass(const uint32_t *keys, uint32_t n, int shift, int bits, const SelectState *st,
          uint32_t *hist) {
  __shared__ uint32_t sh[kMaxBins];
  if (st->done) return; /* uniform: the whole block leaves */
  const unsigned long long prefix = st->prefix;
  const int hi = shift + bits;
  const unsigned nbins = 1u << bits;
  for (unsigned b = threadIdx.x; b < nbins; b += kThreads) sh[b] = 0;
  __syncthreads();
  for (size_t i = (size_t)blockIdx.x * kThreads + threadIdx.x; i < n;
       i += (size_t)gridDim.x * kThreads) {
    unsigned long long ck = composite(keys[i], (uint32_t)i);
    if ((ck >> hi) == (prefix >> hi)) atomicAdd(&sh[(uint32_t)(ck >> shift) & (nbins - 1)], 1u);
  }
  __syncthreads();
  for (unsigned b = threadIdx.x; b < nbins; b += kThreads)
    if (sh[b]) atomicAdd(&hist[b], sh[b]);
}

/* One block: the bin b holding the remaining-th largest entry, counting
 * from the top bin. Thread t owns the `per` bins just below those of
 * thread t-1; an exclusive scan of the owners' totals gives the count
 * above each thread's bins, and exactly one thread's interval
 * (above, above + sum] holds `remaining`. */
__global__ void __launch_bounds__(kThreads)
find_bin(const uint32_t *hist, int shift, int bits, SelectState *st) {
  typedef cub::BlockScan<uint32_t, kThreads> Scan;
  __shared__ typename Scan::TempStorage scan_tmp;
  if (st->done) return; /* uniform */
  const uint32_t remaining = st->remaining;
  const unsigned per = (1u << bits) / kThreads;
  const unsigned top = (1u << bits) - 1 - threadIdx.x * per; /* bins top, top-1, ..., top-per+1 */
  uint32_t sum = 0;
  for (unsigned q = 0; q < per; q++) sum += hist[top - q];
  uint32_t above;
  Scan(scan_tmp).ExclusiveSum(sum, above);
  __syncthreads(); /* every thread has read st before the owner writes it */
  if (above < remaining && remaining <= above + sum) {
    unsigned b = top;
    uint32_t c = hist[b];
    while (above + c < remaining) { /* ends within this thread's bins */
      above += c;
      c = hist[--b];
    }
    const uint32_t left = remaining - above; /* 1..c entries of bin b */
    st->prefix |= (unsigned long long)b << shift;
    st->remaining = left;
    st->done = left == c;
  }
}

/* counts[block] = how many of the block's kChunk entries are sent. */
__global__ void __launch_bounds__(kThreads)
count_sent(const uint32_t *keys, uint32_t n, const SelectState *st, uint32_t *counts) {
  typedef cub::BlockReduce<uint32_t, kThreads> Reduce;
  __shared__ typename Reduce::TempStorage tmp;
  const unsigned long long threshold = st->prefix;
  const uint32_t base = blockIdx.x * kChunk;
  uint32_t c = 0;
  for (unsigned r = 0; r < kRounds; r++) {
    uint32_t i = base + r * kThreads + threadIdx.x;
    if (i < n && composite(keys[i], i) >= threshold) c++;
  }
  c = Reduce(tmp).Sum(c);
  if (threadIdx.x == 0) counts[blockIdx.x] = c;
}

/* One block: counts[] becomes its exclusive prefix sum, in place. */
__global__ void __launch_bounds__(kScanThreads)
scan_counts(uint32_t *counts, uint32_t nblocks) {
  typedef cub::BlockScan<uint32_t, kScanThreads> Scan;
  __shared__ typename Scan::TempStorage tmp;
  uint32_t carry = 0;
  for (uint32_t base = 0; base < nblocks; base += kScanThreads) {
    uint32_t i = base + threadIdx.x;
    uint32_t v = i < nblocks ? counts[i] : 0, excl, total;
    Scan(tmp).ExclusiveSum(v, excl, total);
    if (i < nblocks) counts[i] = carry + excl;
    carry += total;
    __syncthreads(); /* tmp is reused by the next tile */
  }
}

/* Writes the sent indices of this block's chunk, ascending, from offset
 * offsets[block]: rounds of kThreads consecutive entries, ranked inside a
 * round by a block scan, so the output keeps index order. */
__global__ void __launch_bounds__(kThreads)
write_sent(const uint32_t *keys, uint32_t n, const SelectState *st, const uint32_t *offsets,
           uint32_t *out) {
  typedef cub::BlockScan<uint32_t, kThreads> Scan;
  __shared__ typename Scan::TempStorage tmp;
  const unsigned long long threshold = st->prefix;
  const uint32_t base = blockIdx.x * kChunk;
  uint32_t pos = offsets[blockIdx.x];
  for (unsigned r = 0; r < kRounds; r++) {
    uint32_t i = base + r * kThreads + threadIdx.x;
    uint32_t flag = (i < n && composite(keys[i], i) >= threshold) ? 1u : 0u, rank, total;
    Scan(tmp).ExclusiveSum(flag, rank, total);
    if (flag) out[pos + rank] = i;
    pos += total;
    __syncthreads(); /* tmp is reused by the next round */
  }
}

/* Values of the k sent entries, in slot order; thread 0 also writes the
 * scale (fp16) and zeroes the padding, so every slot byte is defined.
 * Runs before update_residual, which overwrites res. */
__global__ void __launch_bounds__(kThreads)
gather_values(const float *g, const float *res, uint32_t k, int fp16, const float *d_scale,
              unsigned char *slot, size_t scale_offset, size_t slot_bytes) {
  const uint32_t *idx = reinterpret_cast<const uint32_t *>(slot);
  unsigned char *vals = slot + 4 * (size_t)k;
  const float scale = fp16 ? *d_scale : 1.0f;
  const size_t j = (size_t)blockIdx.x * kThreads + threadIdx.x;
  if (j < k) {
    const uint32_t i = idx[j];
    const float a = res ? g[i] + res[i] : g[i];
    if (fp16)
      reinterpret_cast<uint16_t *>(vals)[j] = sq_half_encode_elem(SQ_HALF_FP16, a, nullptr, scale);
    else
      reinterpret_cast<float *>(vals)[j] = a;
  }
  if (j == 0) {
    size_t b = 4 * (size_t)k + (fp16 ? 2 : 4) * (size_t)k; /* end of the values */
    if (fp16) {
      for (; b < scale_offset; b++) slot[b] = 0;
      *reinterpret_cast<float *>(slot + scale_offset) = scale;
      b = scale_offset + sizeof(float);
    }
    for (; b < slot_bytes; b++) slot[b] = 0;
  }
}

/* res' = a - decode(value) where sent (the same value the gather wrote),
 * a where not, non-finite values never kept: sq_residual_after/keep.
 * Nothing when *skip is set (a corrupt payload: the call fails). */
__global__ void __launch_bounds__(kThreads)
update_residual(const float *g, float *res, uint32_t n, int fp16, const float *d_scale,
                const SelectState *st, const int *skip) {
  if (skip && *skip) return;
  const unsigned long long threshold = st->prefix;
  const float scale = fp16 ? *d_scale : 1.0f;
  for (size_t i = (size_t)blockIdx.x * kThreads + threadIdx.x; i < n;
       i += (size_t)gridDim.x * kThreads) {
    const float a = g[i] + res[i];
    if (composite(sq_topk_key(a), (uint32_t)i) < threshold) {
      res[i] = sq_residual_keep(a);
    } else if (fp16) {
      float r = res[i];
      sq_half_encode_elem(SQ_HALF_FP16, g[i], &r, scale);
      res[i] = r;
    } else {
      res[i] = sq_residual_after(a, a);
    }
  }
}

size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

/* Workspace layout: keys | state | histograms (one per pass) | block counts. */
struct Layout {
  size_t keys, state, hist, counts, total;
};

Layout layout(size_t n) {
  Layout l;
  const size_t nblocks = (n + kChunk - 1) / kChunk;
  l.keys = 0;
  l.state = align_up(n * sizeof(uint32_t));
  l.hist = l.state + align_up(sizeof(SelectState));
  l.counts = l.hist + align_up((size_t)kPasses * kMaxBins * sizeof(uint32_t));
  l.total = l.counts + align_up(nblocks * sizeof(uint32_t));
  return l;
}

} /* namespace */

extern "C" size_t squall__cuda_topk_workspace_bytes(size_t n, size_t k) {
  (void)k;
  return layout(n).total;
}

extern "C" cudaError_t squall__cuda_topk_select(const float *g, const float *res, size_t n, size_t k,
                                                squallValueType_t values, const float *d_scale,
                                                void *slot, void *ws, size_t ws_bytes,
                                                cudaStream_t stream) {
  SQ_CUDA_REQUIRE(values == squallValueFp32 || values == squallValueFp16);
  SQ_CUDA_REQUIRE(k <= n && n <= (size_t)INT_MAX);
  SQ_CUDA_REQUIRE(n == 0 || g);
  const size_t slot_size = squall__topk_slot_bytes(k, values); /* 0 for k == 0 with fp32 */
  SQ_CUDA_REQUIRE((slot || slot_size == 0) && (uintptr_t)slot % 4 == 0);
  SQ_CUDA_REQUIRE(ws && (uintptr_t)ws % 16 == 0);
  const Layout l = layout(n);
  SQ_CUDA_REQUIRE(ws_bytes >= l.total);
  const int fp16 = values == squallValueFp16;
  SQ_CUDA_REQUIRE(!fp16 || d_scale);

  unsigned char *base = static_cast<unsigned char *>(ws);
  uint32_t *keys = reinterpret_cast<uint32_t *>(base + l.keys);
  SelectState *st = reinterpret_cast<SelectState *>(base + l.state);
  uint32_t *hist = reinterpret_cast<uint32_t *>(base + l.hist);
  uint32_t *counts = reinterpret_cast<uint32_t *>(base + l.counts);
  unsigned char *slot_p = static_cast<unsigned char *>(slot);
  const uint32_t n32 = (uint32_t)n, k32 = (uint32_t)k;

  if (n > 0) {
    init_state<<<1, kScanThreads, 0, stream>>>(st, hist, kPasses * kMaxBins, n32, k32);
    SQ_CUDA_CHECK_LAUNCH();
  }
  if (k > 0) { /* k <= n, so the state is set; with k == 0 it alone says: nothing is sent */
    const unsigned hist_grid = sq_cuda_grid(n, kThreads, kHistBlocks);
    keys_hist0<<<hist_grid, kThreads, 0, stream>>>(g, res, n32, keys, st, hist);
    SQ_CUDA_CHECK_LAUNCH();
    for (int p = 0; k < n && p < kPasses; p++) { /* k == n: all sent, no search */
      uint32_t *h = hist + (size_t)p * kMaxBins;
      if (p > 0) {
        hist_pass<<<hist_grid, kThreads, 0, stream>>>(keys, n32, kDigits[p].shift,
                                                      kDigits[p].bits, st, h);
        SQ_CUDA_CHECK_LAUNCH();
      }
      find_bin<<<1, kThreads, 0, stream>>>(h, kDigits[p].shift, kDigits[p].bits, st);
      SQ_CUDA_CHECK_LAUNCH();
    }
    const uint32_t nblocks = (uint32_t)((n + kChunk - 1) / kChunk);
    count_sent<<<nblocks, kThreads, 0, stream>>>(keys, n32, st, counts);
    SQ_CUDA_CHECK_LAUNCH();
    scan_counts<<<1, kScanThreads, 0, stream>>>(counts, nblocks);
    SQ_CUDA_CHECK_LAUNCH();
    write_sent<<<nblocks, kThreads, 0, stream>>>(keys, n32, st, counts,
                                                 reinterpret_cast<uint32_t *>(slot));
    SQ_CUDA_CHECK_LAUNCH();
  }
  if (slot_size > 0) {
    const unsigned gather_grid = (unsigned)((k + kThreads - 1) / kThreads) + (k == 0);
    gather_values<<<gather_grid, kThreads, 0, stream>>>(g, res, k32, fp16, d_scale, slot_p,
                                                        squall__slot_scale_offset(k), slot_size);
    SQ_CUDA_CHECK_LAUNCH();
  }
  return cudaSuccess;
}

extern "C" cudaError_t squall__cuda_topk_commit(const float *g, float *res, size_t n, size_t k,
                                                squallValueType_t values, const float *d_scale,
                                                const void *ws, size_t ws_bytes, const int *d_skip,
                                                cudaStream_t stream) {
  SQ_CUDA_REQUIRE(values == squallValueFp32 || values == squallValueFp16);
  SQ_CUDA_REQUIRE(k <= n && n <= (size_t)INT_MAX);
  if (!res || n == 0) return cudaSuccess;
  SQ_CUDA_REQUIRE(g && ws && (uintptr_t)ws % 16 == 0);
  const Layout l = layout(n);
  SQ_CUDA_REQUIRE(ws_bytes >= l.total);
  const int fp16 = values == squallValueFp16;
  SQ_CUDA_REQUIRE(!fp16 || d_scale);
  const SelectState *st = reinterpret_cast<const SelectState *>(static_cast<const unsigned char *>(ws) + l.state);
  update_residual<<<sq_cuda_grid(n, kThreads, kElementwiseBlocks), kThreads, 0, stream>>>(
      g, res, (uint32_t)n, fp16, d_scale, st, d_skip);
  SQ_CUDA_CHECK_LAUNCH();
  return cudaSuccess;
}

extern "C" cudaError_t squall__cuda_topk_encode(const float *g, float *res, size_t n, size_t k,
                                                squallValueType_t values, const float *d_scale,
                                                void *slot, void *ws, size_t ws_bytes,
                                                cudaStream_t stream) {
  cudaError_t err = squall__cuda_topk_select(g, res, n, k, values, d_scale, slot, ws, ws_bytes, stream);
  if (err != cudaSuccess) return err;
  return squall__cuda_topk_commit(g, res, n, k, values, d_scale, ws, ws_bytes, NULL, stream);
}
