// Per-edge steps of a GNN layer on one CSR pattern (indptr, indices: int64; values float32), one warp per row
// (destination): GAT's attention, ``alpha = softmax over row i of leaky_relu(d[i] + s[col_k])``, its backward,
// and the float32 SDDMM ``out[k] = U[row_k] . V[col_k]``. kernels/edge.py launches them on torch's stream for
// gnn.gpu. Every sum is a lane's strided loop followed by a fixed xor-shuffle tree, each output written by one
// thread: no atomics, the same bits on every call. Empty rows write nothing (their row outputs 0).
//
// attention_fwd: three passes over a row's edges (max, sum of exp, write), which is torch's
//   exp(e - max) / sum(exp(e - max)) with the sum in a fixed order instead of index_add's atomics; expf, not the
//   fast-math __expf, so the weights match torch's within the sum's rounding.
// attention_bwd_rows: with g = dL/dalpha, de_k = alpha_k (g_k - sum_row alpha g), the logit's gradient
//   dl_k = de_k where d[i] + s[col_k] > 0, else slope de_k (torch's leaky_relu backward), written per edge, and
//   dd[i] = sum_row dl.
// attention_bwd_cols: ds[j] = sum of dl over column j's edges, walked in A.T's CSR order (indptr_t and order_t:
//   A.T's nonzeros as positions in A's order), so again one warp per output and a fixed order.
// sddmm_rows(_v4): one lane per edge, K products summed in column order, one fmaf each (float4 loads where
//   K % 4 == 0 and both operands are 16-byte aligned: the _v4 kernel, the same bits).

#define FULL_MASK 0xffffffffu

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

// the warp's row (warp-uniform, so a warp past the end leaves as a whole) and the lane
__device__ __forceinline__ long long warp_row() {
    return ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
}

extern "C" __global__ void attention_fwd(const long long* __restrict__ indptr, const long long* __restrict__ indices,
                                         const float* __restrict__ d, const float* __restrict__ s, float slope,
                                         long long n_rows, float* __restrict__ alpha) {
    const long long row = warp_row();
    if (row >= n_rows) return;
    const int lane = threadIdx.x & 31;
    const long long begin = indptr[row], end = indptr[row + 1];
    const float di = d[row];
    float m = __int_as_float(0xff800000);  // -inf (NVRTC has no INFINITY macro)
    for (long long k = begin + lane; k < end; k += 32) m = fmaxf(m, leaky(di + s[indices[k]], slope));
    m = warp_max(m);
    float sum = 0.f;
    for (long long k = begin + lane; k < end; k += 32) sum += expf(leaky(di + s[indices[k]], slope) - m);
    sum = warp_sum(sum);
    for (long long k = begin + lane; k < end; k += 32) alpha[k] = expf(leaky(di + s[indices[k]], slope) - m) / sum;
}

extern "C" __global__ void attention_bwd_rows(const long long* __restrict__ indptr,
                                              const long long* __restrict__ indices, const float* __restrict__ d,
                                              const float* __restrict__ s, float slope, long long n_rows,
                                              const float* __restrict__ alpha, const float* __restrict__ g,
                                              float* __restrict__ dlogit, float* __restrict__ dd) {
    const long long row = warp_row();
    if (row >= n_rows) return;
    const int lane = threadIdx.x & 31;
    const long long begin = indptr[row], end = indptr[row + 1];
    float dot = 0.f;
    for (long long k = begin + lane; k < end; k += 32) dot += alpha[k] * g[k];
    dot = warp_sum(dot);
    const float di = d[row];
    float acc = 0.f;
    for (long long k = begin + lane; k < end; k += 32) {
        const float de = alpha[k] * (g[k] - dot);
        const float dl = di + s[indices[k]] > 0.f ? de : de * slope;
        dlogit[k] = dl;
        acc += dl;
    }
    acc = warp_sum(acc);
    if (lane == 0) dd[row] = acc;
}

extern "C" __global__ void attention_bwd_cols(const long long* __restrict__ indptr_t,
                                              const long long* __restrict__ order_t,
                                              const float* __restrict__ dlogit, long long n_cols,
                                              float* __restrict__ ds) {
    const long long col = warp_row();
    if (col >= n_cols) return;
    const int lane = threadIdx.x & 31;
    float acc = 0.f;
    for (long long t = indptr_t[col] + lane; t < indptr_t[col + 1]; t += 32) acc += dlogit[order_t[t]];
    acc = warp_sum(acc);
    if (lane == 0) ds[col] = acc;
}

extern "C" __global__ void sddmm_rows(const long long* __restrict__ indptr, const long long* __restrict__ indices,
                                      const float* __restrict__ U, const float* __restrict__ V, long long n_rows,
                                      long long K, float* __restrict__ out) {
    const long long row = warp_row();
    if (row >= n_rows) return;
    const int lane = threadIdx.x & 31;
    const float* u = U + row * K;
    for (long long k = indptr[row] + lane; k < indptr[row + 1]; k += 32) {
        const float* v = V + indices[k] * K;
        float acc = 0.f;
        for (long long c = 0; c < K; ++c) acc = fmaf(u[c], v[c], acc);
        out[k] = acc;
    }
}

extern "C" __global__ void sddmm_rows_v4(const long long* __restrict__ indptr, const long long* __restrict__ indices,
                                         const float4* __restrict__ U, const float4* __restrict__ V,
                                         long long n_rows, long long K4, float* __restrict__ out) {
    const long long row = warp_row();
    if (row >= n_rows) return;
    const int lane = threadIdx.x & 31;
    const float4* u = U + row * K4;
    for (long long k = indptr[row] + lane; k < indptr[row + 1]; k += 32) {
        const float4* v = V + indices[k] * K4;
        float acc = 0.f;
        for (long long c = 0; c < K4; ++c) {
            const float4 a = u[c], b = v[c];
            acc = fmaf(a.x, b.x, acc);
            acc = fmaf(a.y, b.y, acc);
            acc = fmaf(a.z, b.z, acc);
            acc = fmaf(a.w, b.w, acc);
        }
        out[k] = acc;
    }
}

// spmm_values: out = A_v @ X with per-call values, out [n_rows, N] and X [n_cols, N] row-major float32; the value
//   of stored nonzero k is values[order[k]] (order: A.T's order_t, so A.T_v @ X reads A's values in place) or
//   values[k] (order null). One warp per item, a row's edges [item_begin, min(item_begin + chunk, row end)) (a row
//   of more than `chunk` edges is several items, so a hub row does not hold one warp for the whole launch); a lane
//   per output column (columns lane, lane + 32, ...), the item's edges walked in order four at a time (loads issued
//   together, the fmaf chain in order). A whole row's item (item_slot < 0) writes out; a split row's items write
//   their partial rows to partial[slot], and spmm_values_fixup sums them per row in slot order: the same bits on
//   every call.
extern "C" __global__ void spmm_values(const long long* __restrict__ indptr, const long long* __restrict__ indices,
                                       const long long* __restrict__ order, const float* __restrict__ values,
                                       const float* __restrict__ X, const long long* __restrict__ item_row,
                                       const long long* __restrict__ item_begin,
                                       const long long* __restrict__ item_slot, long long n_items, long long N,
                                       long long chunk, float* __restrict__ out, float* __restrict__ partial) {
    const long long item = warp_row();
    if (item >= n_items) return;
    const int lane = threadIdx.x & 31;
    const long long row = item_row[item], begin = item_begin[item], slot = item_slot[item];
    const long long end = min(begin + chunk, indptr[row + 1]);
    float* dst = slot < 0 ? out + row * N : partial + slot * N;
    for (long long c = lane; c < N; c += 32) {
        float acc = 0.f;
        long long k = begin;
        for (; k + 4 <= end; k += 4) {
            float v[4], x[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                v[u] = values[order ? order[k + u] : k + u];
                x[u] = X[indices[k + u] * N + c];
            }
#pragma unroll
            for (int u = 0; u < 4; ++u) acc = fmaf(v[u], x[u], acc);
        }
        for (; k < end; ++k) acc = fmaf(values[order ? order[k] : k], X[indices[k] * N + c], acc);
        dst[c] = acc;
    }
}

// out[split_row[r]] = sum of partial[split_slot[r] .. split_slot[r + 1]) in slot order, one warp per split row
extern "C" __global__ void spmm_values_fixup(const long long* __restrict__ split_row,
                                             const long long* __restrict__ split_slot, long long n_split,
                                             long long N, const float* __restrict__ partial,
                                             float* __restrict__ out) {
    const long long r = warp_row();
    if (r >= n_split) return;
    const int lane = threadIdx.x & 31;
    const long long row = split_row[r], s0 = split_slot[r], s1 = split_slot[r + 1];
    for (long long c = lane; c < N; c += 32) {
        float acc = 0.f;
        for (long long s = s0; s < s1; ++s) acc += partial[s * N + c];
        out[row * N + c] = acc;
    }
}
