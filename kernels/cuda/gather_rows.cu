// Row gather out[i, :] = C[index[i], :] of a row-major matrix, moved as raw words (no arithmetic: any element
// type, bitwise). kernels/gather.py binds it after a plan's product on permuted rows, so one bound call (and one
// replayed CUDA graph) writes the product in the caller's row order. Three word widths: 16 bytes where a row's
// bytes and both pointers allow it, else 4, else 2. Flat grid-stride loop over the words of out: consecutive
// threads read consecutive words of one source row (coalesced), each source row read once per output row.
// gather_rows_bias_f32: float32 rows moved as 16-byte words with a bias row added on the way, out[i, j] =
// C[index[i], j] + bias[j] (one float32 add per element, the bits of the gather followed by out += bias): a GNN
// layer's bias taken in the pass that restores its product's row order instead of one more pass over out.

template <typename W>
__device__ __forceinline__ void gather_rows(const W* __restrict__ C, const long long* __restrict__ index,
                                            W* __restrict__ out, long long n_rows, long long row_words) {
    const long long total = n_rows * row_words;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += stride) {
        const long long r = t / row_words;
        out[t] = C[index[r] * row_words + (t - r * row_words)];
    }
}

extern "C" __global__ void gather_rows_w16(const uint4* __restrict__ C, const long long* __restrict__ index,
                                           uint4* __restrict__ out, long long n_rows, long long row_words) {
    gather_rows(C, index, out, n_rows, row_words);
}

extern "C" __global__ void gather_rows_w4(const unsigned int* __restrict__ C, const long long* __restrict__ index,
                                          unsigned int* __restrict__ out, long long n_rows, long long row_words) {
    gather_rows(C, index, out, n_rows, row_words);
}

extern "C" __global__ void gather_rows_w2(const unsigned short* __restrict__ C, const long long* __restrict__ index,
                                          unsigned short* __restrict__ out, long long n_rows, long long row_words) {
    gather_rows(C, index, out, n_rows, row_words);
}

extern "C" __global__ void gather_rows_bias_f32(const float4* __restrict__ C, const long long* __restrict__ index,
                                               const float4* __restrict__ bias, float4* __restrict__ out,
                                               long long n_rows, long long row_words) {
    const long long total = n_rows * row_words;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += stride) {
        const long long r = t / row_words, w = t - r * row_words;
        const float4 c = C[index[r] * row_words + w], b = __ldg(bias + w);
        out[t] = make_float4(c.x + b.x, c.y + b.y, c.z + b.z, c.w + b.w);
    }
}
