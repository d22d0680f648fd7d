// Per-edge steps of a GNN layer on one CSR pattern (indptr, indices: int64; values float32, row-major), with H
// heads per edge (GAT's multi-head attention on the graph itself, not on H copies of it): an edge quantity is
// [nnz, H] (edge k, head h at k * H + h), a node quantity [n, H], and a feature row [n, H * C] holds head h's C
// channels at h * C .. (h + 1) * C (torch's [n, H, C], what a Linear of H * C outputs gives). H = 1 is the plain
// single-head case. kernels/edge.py launches them on torch's stream for gnn.gpu. Every sum is a lane's strided
// loop followed by a fixed xor-shuffle tree, or one thread's loop in edge (or channel) order, each output written
// by one thread: no atomics, the same bits on every call. Empty rows write zeros (or nothing where they have no
// output).
//
// attention_fwd (a warp per (row, head)): alpha = softmax over row i's edges of e_k = leaky_relu(d[i] + s[col_k])
//   in three passes (max, sum of exp, write): torch's exp(e - max) / sum(exp(e - max)) with the sum in a fixed
//   order instead of index_add's atomics; expf, not the fast-math __expf, so the weights match torch's within the
//   sum's rounding.
// attention_bwd_rows (a warp per (row, head)): with g = dL/dalpha, de_k = alpha_k (g_k - sum_row alpha g), the
//   logit's gradient dl_k = de_k where d[i] + s[col_k] > 0, else slope de_k (torch's leaky_relu backward), written
//   per edge, and dd[i] = sum_row dl.
// attention_bwd_cols (a warp per (column, head)): ds[j] = sum of dl over column j's edges, walked in A.T's CSR
//   order (indptr_t and order_t: A.T's nonzeros as positions in A's order).
// sddmm_edges(_v4) (a thread per edge, its heads in order): out[k, h] = U[row_k, head h] . V[col_k, head h],
//   C products summed in channel order, one fmaf each (float4 loads where C % 4 == 0 and both operands are 16-byte
//   aligned: the _v4 kernel, the same bits; 16-bit U and V widened exactly, the same bits as float32 on their
//   values).
// spmm_values (a warp per row item): out = A_v @ X, head h's columns weighted by values[., h].
// The SDDMM and the SpMM also read 16-bit U, V and X as they are (the _f16 / _bf16 entries: exact widening, float32
// products and sums, float32 out).

#include "tc_ops.cuh"  // u16, F16 / BF16 and their exact widening to float (to_f32)

#define FULL_MASK 0xffffffffu

// A 16-bit feature of precision KIND (float16 or bfloat16 bits), widened exactly to float where it is read: the
// 16-bit kernels below read torch's half tensors as they are (under autocast) and compute in float32.
template <int KIND>
struct Half {
    u16 bits;
};
__device__ __forceinline__ float widen(float x) { return x; }
template <int KIND>
__device__ __forceinline__ float widen(Half<KIND> x) { return to_f32<KIND>(x.bits); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

__device__ __forceinline__ float leaky(float x, float slope) { return x > 0.f ? x : x * slope; }

// the warp's index (warp-uniform, so a warp past the end leaves as a whole)
__device__ __forceinline__ long long warp_index() {
    return ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
}

extern "C" __global__ void attention_fwd(const long long* __restrict__ indptr, const long long* __restrict__ indices,
                                         const float* __restrict__ d, const float* __restrict__ s, float slope,
                                         long long n_rows, long long H, float* __restrict__ alpha) {
    const long long w = warp_index();
    if (w >= n_rows * H) return;
    const long long row = w / H, h = w - row * H;
    const int lane = threadIdx.x & 31;
    const long long begin = indptr[row], end = indptr[row + 1];
    const float di = d[w];
    float m = __int_as_float(0xff800000);  // -inf (NVRTC has no INFINITY macro)
    for (long long k = begin + lane; k < end; k += 32) m = fmaxf(m, leaky(di + s[indices[k] * H + h], slope));
    m = warp_max(m);
    float sum = 0.f;
    for (long long k = begin + lane; k < end; k += 32) sum += expf(leaky(di + s[indices[k] * H + h], slope) - m);
    sum = warp_sum(sum);
    for (long long k = begin + lane; k < end; k += 32)
        alpha[k * H + h] = expf(leaky(di + s[indices[k] * H + h], slope) - m) / sum;
}

extern "C" __global__ void attention_bwd_rows(const long long* __restrict__ indptr,
                                              const long long* __restrict__ indices, const float* __restrict__ d,
                                              const float* __restrict__ s, float slope, long long n_rows,
                                              long long H, const float* __restrict__ alpha,
                                              const float* __restrict__ g, float* __restrict__ dlogit,
                                              float* __restrict__ dd) {
    const long long w = warp_index();
    if (w >= n_rows * H) return;
    const long long row = w / H, h = w - row * H;
    const int lane = threadIdx.x & 31;
    const long long begin = indptr[row], end = indptr[row + 1];
    float dot = 0.f;
    for (long long k = begin + lane; k < end; k += 32) dot += alpha[k * H + h] * g[k * H + h];
    dot = warp_sum(dot);
    const float di = d[w];
    float acc = 0.f;
    for (long long k = begin + lane; k < end; k += 32) {
        const float de = alpha[k * H + h] * (g[k * H + h] - dot);
        const float dl = di + s[indices[k] * H + h] > 0.f ? de : de * slope;
        dlogit[k * H + h] = dl;
        acc += dl;
    }
    acc = warp_sum(acc);
    if (lane == 0) dd[w] = acc;
}

extern "C" __global__ void attention_bwd_cols(const long long* __restrict__ indptr_t,
                                              const long long* __restrict__ order_t,
                                              const float* __restrict__ dlogit, long long n_cols, long long H,
                                              float* __restrict__ ds) {
    const long long w = warp_index();
    if (w >= n_cols * H) return;
    const long long col = w / H, h = w - col * H;
    const int lane = threadIdx.x & 31;
    float acc = 0.f;
    for (long long t = indptr_t[col] + lane; t < indptr_t[col + 1]; t += 32) acc += dlogit[order_t[t] * H + h];
    acc = warp_sum(acc);
    if (lane == 0) ds[w] = acc;
}

// one product of a channel word into the dot product, in channel order: a float, or a float4's four
__device__ __forceinline__ float fma_word(float a, float b, float acc) { return fmaf(a, b, acc); }
__device__ __forceinline__ float fma_word(float4 a, float4 b, float acc) {
    return fmaf(a.w, b.w, fmaf(a.z, b.z, fmaf(a.y, b.y, fmaf(a.x, b.x, acc))));
}
template <int KIND>
__device__ __forceinline__ float fma_word(Half<KIND> a, Half<KIND> b, float acc) {
    return fmaf(widen(a), widen(b), acc);
}

// The C-channel dot product of head word rows u and v, one fmaf per channel in channel order.
template <typename W>
__device__ __forceinline__ float dot_words(const W* __restrict__ u, const W* __restrict__ v, long long CW) {
    float acc = 0.f;
    for (long long c = 0; c < CW; ++c) acc = fma_word(u[c], v[c], acc);
    return acc;
}

// U [n_rows, H * C], V [n_cols, H * C] as W words (float, or float4 where C % 4 == 0: CW words a head); out
// [nnz, H]. A thread per edge k (rows[k], indices[k]: its row and column), its H dot products in head order, each
// in channel order: every warp has 32 edges whatever the rows' lengths (a hub row spreads over many warps).
template <typename W>
__device__ __forceinline__ void sddmm_edge(const long long* __restrict__ rows, const long long* __restrict__ indices,
                                           const W* __restrict__ U, const W* __restrict__ V, long long nnz,
                                           long long H, long long CW, float* __restrict__ out) {
    const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= nnz) return;
    const W* u = U + rows[k] * H * CW;
    const W* v = V + indices[k] * H * CW;
    for (long long h = 0; h < H; ++h) out[k * H + h] = dot_words(u + h * CW, v + h * CW, CW);
}

#define SDDMM_PARAMS(W)                                                                                           \
    const long long *__restrict__ rows, const long long *__restrict__ indices, const W *__restrict__ U,             \
        const W *__restrict__ V, long long nnz, long long H, long long CW, float *__restrict__ out
extern "C" __global__ void sddmm_edges(SDDMM_PARAMS(float)) { sddmm_edge(rows, indices, U, V, nnz, H, CW, out); }
extern "C" __global__ void sddmm_edges_v4(SDDMM_PARAMS(float4)) { sddmm_edge(rows, indices, U, V, nnz, H, CW, out); }
extern "C" __global__ void sddmm_edges_f16(SDDMM_PARAMS(Half<F16>)) {
    sddmm_edge(rows, indices, U, V, nnz, H, CW, out);
}
extern "C" __global__ void sddmm_edges_bf16(SDDMM_PARAMS(Half<BF16>)) {
    sddmm_edge(rows, indices, U, V, nnz, H, CW, out);
}

// spmm_values: out = A_v @ X with per-call values, out [n_rows, N] and X [n_cols, N] row-major float32, N = H * C:
//   column c belongs to head c / C and is weighted by that head's value of the nonzero, values[idx * H + c / C]
//   with idx = order[k] (order: A.T's order_t, so A.T_v @ X reads A's values in place) or k (order null). One warp
//   per item, a row's edges [item_begin, min(item_begin + chunk, row end)) (a row of more than `chunk` edges is
//   several items, so a hub row does not hold one warp for the whole launch); a lane per output column (columns
//   lane, lane + 32, ...), the item's edges walked in order four at a time (loads issued together, the fmaf chain in
//   order). A whole row's item (item_slot < 0) writes out; a split row's items write their partial rows to
//   partial[slot], and spmm_values_fixup sums them per row in slot order: the same bits on every call.
#define SPMM_VALUES_PARAMS(W)                                                                                     \
    const long long *__restrict__ indptr, const long long *__restrict__ indices,                                   \
        const long long *__restrict__ order, const float *__restrict__ values, const W *__restrict__ X,           \
        const long long *__restrict__ item_row, const long long *__restrict__ item_begin,                          \
        const long long *__restrict__ item_slot, long long n_items, long long N, long long H, long long chunk,      \
        float *__restrict__ out, float *__restrict__ partial
#define SPMM_VALUES_ARGS \
    indptr, indices, order, values, X, item_row, item_begin, item_slot, n_items, N, H, chunk, out, partial

// X's words W: float, or Half<KIND> (a 16-bit X read as it is, widened exactly)
template <typename W>
__device__ __forceinline__ void spmm_values_items(SPMM_VALUES_PARAMS(W)) {
    const long long item = warp_index();
    if (item >= n_items) return;
    const int lane = threadIdx.x & 31;
    const long long row = item_row[item], begin = item_begin[item], slot = item_slot[item];
    const long long end = min(begin + chunk, indptr[row + 1]);
    const long long C = N / H;
    float* dst = slot < 0 ? out + row * N : partial + slot * N;
    for (long long c = lane; c < N; c += 32) {
        const long long h = c / C;
        float acc = 0.f;
        long long k = begin;
        for (; k + 4 <= end; k += 4) {
            float v[4], x[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                v[u] = values[(order ? order[k + u] : k + u) * H + h];
                x[u] = widen(X[indices[k + u] * N + c]);
            }
#pragma unroll
            for (int u = 0; u < 4; ++u) acc = fmaf(v[u], x[u], acc);
        }
        for (; k < end; ++k) acc = fmaf(values[(order ? order[k] : k) * H + h], widen(X[indices[k] * N + c]), acc);
        dst[c] = acc;
    }
}

extern "C" __global__ void spmm_values(SPMM_VALUES_PARAMS(float)) { spmm_values_items(SPMM_VALUES_ARGS); }
extern "C" __global__ void spmm_values_f16(SPMM_VALUES_PARAMS(Half<F16>)) { spmm_values_items(SPMM_VALUES_ARGS); }
extern "C" __global__ void spmm_values_bf16(SPMM_VALUES_PARAMS(Half<BF16>)) { spmm_values_items(SPMM_VALUES_ARGS); }

// out[split_row[r]] = sum of partial[split_slot[r] .. split_slot[r + 1]) in slot order, one warp per split row
extern "C" __global__ void spmm_values_fixup(const long long* __restrict__ split_row,
                                             const long long* __restrict__ split_slot, long long n_split,
                                             long long N, const float* __restrict__ partial,
                                             float* __restrict__ out) {
    const long long r = warp_index();
    if (r >= n_split) return;
    const int lane = threadIdx.x & 31;
    const long long row = split_row[r], s0 = split_slot[r], s1 = split_slot[r + 1];
    for (long long c = lane; c < N; c += 32) {
        float acc = 0.f;
        for (long long s = s0; s < s1; ++s) acc += partial[s * N + c];
        out[row * N + c] = acc;
    }
}
