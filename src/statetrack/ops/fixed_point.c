/* One iteration of the fixed-point RNN (statetrack/ops/fixed_point.py; Movahedi et al. 2025, eq. 7),
   fused: the Householder product and the diagonal scan over time in one pass, without autograd.

       v_t   = Q_t (b_t - p_t),  Q_t = H_1 ... H_r,  H_k = I - 2 alpha_k u_k u_k^T  (H_r acts first),
       h_t   = lam_t * h_{t-1} + scale_t * (v_t + p_t),    h_{-1} = h0,

   p = h^{l-1} the previous iterate. In PyTorch these are a dozen passes over [B, T, d] per
   iteration (the difference, r dot products and updates, the sum, the scaled input, the scan);
   here each token's d-vector is read once and worked on in L1. The same pass returns what the
   stopping rule needs: stats = (max |h - p|, max |h|) over the whole call, NaN for the first when
   some h is not finite (as max |h - p| is in PyTorch, so the iteration does not stop early).

   Built with diagonal_scan.c into one library by statetrack/ops/native.py. Arrays are contiguous:
   lam, scale, b, prev, h [nb, nt, nf], u [nb, nt, nr, nf], alpha [nb, nt, nr], h0 [nb, nf]. Batch
   rows are independent and shared out over nthreads OpenMP threads (torch's pool; see native.py). */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#define FIXED_POINT(NAME, T, FABS)                                                                 \
    void NAME(const T *lam, const T *scale, const T *b, const T *u, const T *alpha, const T *prev,  \
              const T *h0, T *h, T *stats, int64_t nb, int64_t nt, int64_t nf, int64_t nr,         \
              int64_t nthreads) {                                                                  \
        T change = 0, size = 0;                                                                    \
        int bad = 0;                                                                               \
        _Pragma("omp parallel for num_threads(nthreads) schedule(static) reduction(max: change, size) reduction(|: bad)") \
        for (int64_t i = 0; i < nb; i++) {                                                         \
            T *v = malloc((size_t)nf * sizeof(T));                                                 \
            const T *hp = h0 + i * nf;                                                             \
            for (int64_t t = 0; t < nt; t++) {                                                     \
                const int64_t o = (i * nt + t) * nf, ot = i * nt + t;                              \
                const T *restrict bt = b + o, *restrict pt = prev + o, *restrict lt = lam + o;     \
                const T *restrict st = scale + o, *restrict hprev = hp;                            \
                T *restrict ht = h + o, *restrict vt = v;                                          \
                for (int64_t f = 0; f < nf; f++) vt[f] = bt[f] - pt[f];                            \
                for (int64_t k = nr - 1; k >= 0; k--) {                                            \
                    const T *restrict uk = u + (ot * nr + k) * nf;                                 \
                    T dot = 0;                                                                     \
                    _Pragma("omp simd reduction(+: dot)") /* a vector sum: reassociation allowed */ \
                    for (int64_t f = 0; f < nf; f++) dot += uk[f] * vt[f];                         \
                    dot *= 2 * alpha[ot * nr + k];                                                 \
                    for (int64_t f = 0; f < nf; f++) vt[f] -= dot * uk[f];                         \
                }                                                                                  \
                for (int64_t f = 0; f < nf; f++) {                                                 \
                    const T x = lt[f] * hprev[f] + st[f] * (vt[f] + pt[f]);                        \
                    const T dx = FABS(x - pt[f]), ax = FABS(x);                                    \
                    ht[f] = x;                                                                     \
                    change = dx > change ? dx : change;                                            \
                    size = ax > size ? ax : size;                                                  \
                    bad |= !(ax < HUGE_VAL);  /* inf or NaN: the stopping rule must not see convergence */ \
                }                                                                                  \
                hp = ht;                                                                           \
            }                                                                                      \
            free(v);                                                                               \
        }                                                                                          \
        stats[0] = bad ? (T)NAN : change;                                                          \
        stats[1] = size;                                                                           \
    }

FIXED_POINT(fixed_point_f32_iterate, float, fabsf)
FIXED_POINT(fixed_point_f64_iterate, double, fabs)
