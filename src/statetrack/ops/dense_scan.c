/* Fused CPU loops for the dense vector scan h_{n+1} = M_n h_n + X_n (statetrack/ops/dense.py).

   Built with diagonal_scan.c into one library by statetrack/ops/native.py. Arrays are contiguous
   and time-major: M [nt, nz, d, d] (row-major d x d transitions), X [nt, nz, d] or NULL (no additive
   term), states hs [nt + 1, nz, d] with hs[0] = h0. The nz independent lanes (batch x heads) are
   shared out over nthreads OpenMP threads in contiguous ranges, so a thread reads one contiguous
   slice of M per step.

   forward:  hs[n + 1] = M_n hs[n] + X_n.
   backward: lam[nt] = g[nt]; lam[n] = g[n] + M_n^T lam[n + 1]; dM_n = lam[n + 1] hs[n]^T (dM may be
             NULL). lam[0] is dL/dh0 and lam[1:] is dL/dX.

   This is the block bilinear model's scan: 512 lanes of 8 x 8 blocks per step at batch 64, d_h 64,
   where PyTorch pays one batched-product dispatch per step for a few thousand multiply-adds. */

#include <stdint.h>

/* Runs CALL with D_ a compile-time constant for the common block sizes (the compiler then unrolls
   and vectorises the d-long loops; with d known only at run time they ran about 2x slower), else
   with D_ = d. */
#define SPECIALISE(d, CALL)                                                                        \
    switch (d) {                                                                                   \
    case 2: { const int64_t D_ = 2; CALL; break; }                                                 \
    case 4: { const int64_t D_ = 4; CALL; break; }                                                 \
    case 8: { const int64_t D_ = 8; CALL; break; }                                                 \
    case 16: { const int64_t D_ = 16; CALL; break; }                                               \
    default: { const int64_t D_ = d; CALL; break; }                                                \
    }

#define DENSE_SCAN(NAME, T)                                                                        \
    static inline __attribute__((always_inline)) void NAME##_forward_range(const T *M, const T *X, T *hs, int64_t nt, int64_t nz,       \
                                     int64_t d, int64_t z0, int64_t z1) {                          \
        for (int64_t n = 0; n < nt; n++) {                                                         \
            for (int64_t z = z0; z < z1; z++) {                                                    \
                const T *restrict m = M + (n * nz + z) * d * d;                                    \
                const T *restrict h = hs + (n * nz + z) * d;                                       \
                T *restrict out = hs + ((n + 1) * nz + z) * d;                                     \
                for (int64_t r = 0; r < d; r++) {                                                  \
                    const T *restrict row = m + r * d;                                             \
                    T s = X ? X[(n * nz + z) * d + r] : (T)0;                                      \
                    _Pragma("omp simd reduction(+ : s)") for (int64_t j = 0; j < d; j++) s += row[j] * h[j]; \
                    out[r] = s;                                                                    \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static inline __attribute__((always_inline)) void NAME##_backward_range(const T *M, const T *hs, const T *g, T *lam, T *dM,         \
                                      int64_t nt, int64_t nz, int64_t d, int64_t z0, int64_t z1) { \
        for (int64_t z = z0; z < z1; z++)                                                          \
            for (int64_t j = 0; j < d; j++) lam[(nt * nz + z) * d + j] = g[(nt * nz + z) * d + j]; \
        for (int64_t n = nt - 1; n >= 0; n--) {                                                    \
            for (int64_t z = z0; z < z1; z++) {                                                    \
                const T *restrict m = M + (n * nz + z) * d * d;                                    \
                const T *restrict next = lam + ((n + 1) * nz + z) * d;                             \
                const T *restrict gn = g + (n * nz + z) * d;                                       \
                T *restrict out = lam + (n * nz + z) * d;                                          \
                for (int64_t j = 0; j < d; j++) out[j] = gn[j];                                    \
                for (int64_t r = 0; r < d; r++) { /* out += M^T lam: row r of M scaled by lam_r */ \
                    const T *restrict row = m + r * d;                                             \
                    const T l = next[r];                                                           \
                    for (int64_t j = 0; j < d; j++) out[j] += row[j] * l;                          \
                }                                                                                  \
                if (dM) {                                                                          \
                    const T *restrict h = hs + (n * nz + z) * d;                                   \
                    T *restrict dm = dM + (n * nz + z) * d * d;                                    \
                    for (int64_t r = 0; r < d; r++) {                                              \
                        const T l = next[r];                                                       \
                        for (int64_t j = 0; j < d; j++) dm[r * d + j] = l * h[j];                  \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    void NAME##_forward(const T *M, const T *X, T *hs, int64_t nt, int64_t nz, int64_t d,         \
                        int64_t nthreads) {                                                        \
        int64_t step = (nz + nthreads - 1) / nthreads;                                             \
        _Pragma("omp parallel for num_threads(nthreads) schedule(static, 1)")                      \
        for (int64_t id = 0; id < nthreads; id++) {                                                \
            int64_t z0 = id * step < nz ? id * step : nz, z1 = z0 + step < nz ? z0 + step : nz;    \
            if (z1 <= z0) continue;                                                                \
            SPECIALISE(d, NAME##_forward_range(M, X, hs, nt, nz, D_, z0, z1))                      \
        }                                                                                          \
    }                                                                                              \
    void NAME##_backward(const T *M, const T *hs, const T *g, T *lam, T *dM, int64_t nt,          \
                         int64_t nz, int64_t d, int64_t nthreads) {                                \
        int64_t step = (nz + nthreads - 1) / nthreads;                                             \
        _Pragma("omp parallel for num_threads(nthreads) schedule(static, 1)")                      \
        for (int64_t id = 0; id < nthreads; id++) {                                                \
            int64_t z0 = id * step < nz ? id * step : nz, z1 = z0 + step < nz ? z0 + step : nz;    \
            if (z1 <= z0) continue;                                                                \
            SPECIALISE(d, NAME##_backward_range(M, hs, g, lam, dM, nt, nz, D_, z0, z1))            \
        }                                                                                          \
    }

DENSE_SCAN(dense_scan_f32, float)
DENSE_SCAN(dense_scan_f64, double)
