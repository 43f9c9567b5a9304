/* The renormalised Panini recurrence of statetrack/ops/panini.py (Siems et al. 2026, App. C.2),
   one matrix at a time:

       X_t = A_l,t H_{t-1} A_r,t + B_t,    H_t = Sinkhorn(X_t),    H_{-1} = H0,

   Sinkhorn (Sinkhorn & Knopp 1967) as `sinkhorn_reference`: per sweep, stop once every row and
   column sum r_i, c_j of S is within tol of 1 (a NaN sum never is), else R = S / max(r, tiny) by
   rows, then S = R / max(c', tiny) by columns with c' the column sums of R; at most max_iter sweeps.

   In PyTorch a step is a dozen operations per sweep on [M, n, n] tensors of a few hundred numbers,
   so its time is per-operation overhead; here each matrix stays in L1 for the whole sequence. The
   forward keeps X_t and the number of sweeps of each step; the backward recomputes that step's
   sweeps from X_t and runs them in reverse:

       swept = R / c':   dR = (dS - <dS, swept>_col) / max(c', tiny)
       R = S / r:        dS = (dR - <dR, R>_row) / max(r, tiny)

   (with `masks`, a clamped sum passes no gradient: its inner product is multiplied by [sum >= tiny]),
   then dX_t = that gradient, dH_{t-1} = A_l,t^T dX_t A_r,t^T, dA_l,t = dX_t A_r,t^T H_{t-1}^T and
   dA_r,t = H_{t-1}^T A_l,t^T dX_t. Matrices are independent and are
   shared out over nthreads OpenMP threads (torch's pool; see native.py). Arrays are contiguous,
   time-major: A_l, A_r, B, states, X [nt, nm, n, n], H0 [nm, n, n], sweeps [nt, nm]. */

#include <float.h>
#include <stdint.h>
#include <stdlib.h>

#define MAX_N 32 /* PANINI_MAX_N in native.py: the per-matrix buffers live on the stack */

/* k sweeps of S (n x n, in place) and whether a row or column sum was below tiny (or NaN); with
   trace non-NULL each sweep's (r, max(r, tiny), R, c', max(c', tiny), swept) goes to trace. Returns
   the number of sweeps made (limit: the number allowed). */
#define SINKHORN(NAME, T, TINY)                                                                    \
    static int64_t NAME(T *S, int64_t n, int64_t limit, T tol, int check, int *clamped,           \
                        T *trace) {                                                                \
        int64_t sweeps = 0;                                                                        \
        const int64_t nn = n * n, per = 2 * nn + 4 * n;                                            \
        T rows_local[2 * MAX_N], cols_local[2 * MAX_N];                                            \
        for (; sweeps < limit; sweeps++) {                                                         \
            T *rows = trace ? trace + sweeps * per : rows_local;                                   \
            T *rc = trace ? rows + n : rows_local + n;                                             \
            T *R = trace ? rc + n : S;                                                             \
            T *cs = trace ? R + nn : cols_local;                                                   \
            T *cc = trace ? cs + n : cols_local + n;                                               \
            T *out = trace ? cc + n : S;                                                           \
            int done = check;                                                                      \
            for (int64_t i = 0; i < n; i++) {                                                      \
                T s = 0;                                                                           \
                for (int64_t j = 0; j < n; j++) s += S[i * n + j];                                 \
                rows[i] = s;                                                                       \
                if (!((s - 1 <= tol) && (1 - s <= tol))) done = 0;                                 \
            }                                                                                      \
            if (check) {                                                                           \
                for (int64_t j = 0; j < n && done; j++) {                                          \
                    T s = 0;                                                                       \
                    for (int64_t i = 0; i < n; i++) s += S[i * n + j];                             \
                    if (!((s - 1 <= tol) && (1 - s <= tol))) done = 0;                             \
                }                                                                                  \
                if (done) break;                                                                   \
            }                                                                                      \
            for (int64_t i = 0; i < n; i++) {                                                      \
                if (!(rows[i] >= TINY)) *clamped = 1;                                              \
                rc[i] = rows[i] < TINY ? TINY : rows[i]; /* NaN stays NaN, as clamp_min */         \
                for (int64_t j = 0; j < n; j++) R[i * n + j] = S[i * n + j] / rc[i];               \
            }                                                                                      \
            for (int64_t j = 0; j < n; j++) {                                                      \
                T s = 0;                                                                           \
                for (int64_t i = 0; i < n; i++) s += R[i * n + j];                                 \
                cs[j] = s;                                                                         \
                if (!(s >= TINY)) *clamped = 1;                                                    \
                cc[j] = s < TINY ? TINY : s;                                                       \
            }                                                                                      \
            for (int64_t i = 0; i < n; i++)                                                        \
                for (int64_t j = 0; j < n; j++) out[i * n + j] = R[i * n + j] / cc[j];             \
            if (trace)                                                                             \
                for (int64_t f = 0; f < nn; f++) S[f] = out[f];                                    \
        }                                                                                          \
        return sweeps;                                                                             \
    }

/* out = A B (+ C when C is non-NULL), n x n; out may not alias A or B. */
#define MATMUL(T, out, A, B, C, n)                                                                 \
    for (int64_t i = 0; i < (n); i++)                                                              \
        for (int64_t j = 0; j < (n); j++) {                                                        \
            T s = 0;                                                                               \
            for (int64_t k = 0; k < (n); k++) s += (A)[i * (n) + k] * (B)[k * (n) + j];            \
            (out)[i * (n) + j] = (C) ? s + (C)[i * (n) + j] : s;                                   \
        }

#define PANINI_KERNELS(SUFFIX, T, TINY)                                                            \
    SINKHORN(sinkhorn_##SUFFIX, T, TINY)                                                           \
    /* states and X written, sweeps per step; clamped[m] = 1 where matrix m clamped a sum */       \
    void panini_##SUFFIX##_forward(const T *A_l, const T *A_r, const T *B, const T *H0, T *states, \
                                   T *X, int64_t *sweeps, int64_t *clamped, int64_t nt, int64_t nm, \
                                   int64_t n, int64_t max_iter, double tol, int64_t nthreads) {    \
        const int64_t nn = n * n;                                                                  \
        _Pragma("omp parallel for num_threads(nthreads) schedule(static)")                         \
        for (int64_t m = 0; m < nm; m++) {                                                         \
            T tmp[MAX_N * MAX_N];                                                                  \
            int flag = 0;                                                                          \
            const T *prev = H0 + m * nn;                                                           \
            for (int64_t t = 0; t < nt; t++) {                                                     \
                const int64_t at = (t * nm + m) * nn;                                              \
                T *S = states + at;                                                                \
                MATMUL(T, tmp, A_l + at, prev, (const T *)0, n)                                    \
                MATMUL(T, S, tmp, A_r + at, B + at, n)                                             \
                if (X)                                                                             \
                    for (int64_t f = 0; f < nn; f++) X[at + f] = S[f];                             \
                sweeps[t * nm + m] = sinkhorn_##SUFFIX(S, n, max_iter, (T)tol, 1, &flag, (T *)0);  \
                prev = S;                                                                          \
            }                                                                                      \
            clamped[m] = flag;                                                                     \
        }                                                                                          \
    }                                                                                              \
    /* grad_X, and grad_A_l and grad_A_r where not NULL, written; carry [nm, n, n] enters as dL/dH_T (added to grad_states' last step) and    \
       leaves as dL/dH0 */                                                                         \
    void panini_##SUFFIX##_backward(const T *A_l, const T *A_r, const T *H0, const T *states,      \
                                    const T *X, const int64_t *sweeps, const T *grad_states,       \
                                    T *carry, T *grad_X, T *grad_A_l, T *grad_A_r, int64_t masks,  \
                                    int64_t nt, int64_t nm, int64_t n, int64_t max_iter,           \
                                    int64_t nthreads) {                                            \
        const int64_t nn = n * n, per = 2 * nn + 4 * n;                                            \
        _Pragma("omp parallel num_threads(nthreads)")                                              \
        {                                                                                          \
            T *trace = malloc((size_t)((max_iter > 0 ? max_iter : 1) * per) * sizeof(T));          \
            T S[MAX_N * MAX_N], g[MAX_N * MAX_N], tmp[MAX_N * MAX_N], inner[MAX_N];                \
            _Pragma("omp for schedule(static)")                                                    \
            for (int64_t m = 0; m < nm; m++) {                                                     \
                T *c = carry + m * nn;                                                             \
                int flag = 0;                                                                      \
                for (int64_t t = nt - 1; t >= 0; t--) {                                            \
                    const int64_t at = (t * nm + m) * nn;                                          \
                    for (int64_t f = 0; f < nn; f++) {                                             \
                        g[f] = grad_states[at + f] + c[f];                                         \
                        S[f] = X[at + f];                                                          \
                    }                                                                              \
                    const int64_t k = sinkhorn_##SUFFIX(S, n, sweeps[t * nm + m], 0, 0, &flag, trace); \
                    for (int64_t s = k - 1; s >= 0; s--) {                                         \
                        const T *rows = trace + s * per, *rc = rows + n, *R = rc + n;              \
                        const T *cs = R + nn, *cc = cs + n, *swept = cc + n;                       \
                        for (int64_t j = 0; j < n; j++) {                                          \
                            T d = 0;                                                               \
                            for (int64_t i = 0; i < n; i++) d += g[i * n + j] * swept[i * n + j];  \
                            inner[j] = masks ? d * (T)(cs[j] >= TINY) : d;                         \
                        }                                                                          \
                        for (int64_t i = 0; i < n; i++)                                            \
                            for (int64_t j = 0; j < n; j++) g[i * n + j] = (g[i * n + j] - inner[j]) / cc[j]; \
                        for (int64_t i = 0; i < n; i++) {                                          \
                            T d = 0;                                                               \
                            for (int64_t j = 0; j < n; j++) d += g[i * n + j] * R[i * n + j];      \
                            d = masks ? d * (T)(rows[i] >= TINY) : d;                              \
                            for (int64_t j = 0; j < n; j++) g[i * n + j] = (g[i * n + j] - d) / rc[i]; \
                        }                                                                          \
                    }                                                                              \
                    for (int64_t f = 0; f < nn; f++) grad_X[at + f] = g[f];                        \
                    /* with H = H_{t-1}: dA_l = g A_r^T H^T, dA_r = H^T A_l^T g, dH = A_l^T g A_r^T */ \
                    const T *Al = A_l + at, *Ar = A_r + at;                                        \
                    const T *H = t ? states + at - nm * nn : H0 + m * nn;                          \
                    for (int64_t i = 0; i < n; i++)                                                \
                        for (int64_t j = 0; j < n; j++) {                                          \
                            T s = 0, u = 0;                                                        \
                            for (int64_t q = 0; q < n; q++) {                                      \
                                s += Al[q * n + i] * g[q * n + j];                                 \
                                u += g[i * n + q] * Ar[j * n + q];                                 \
                            }                                                                      \
                            tmp[i * n + j] = s;                                                    \
                            S[i * n + j] = u; /* S is free: g A_r^T */                             \
                        }                                                                          \
                    if (grad_A_l)                                                                  \
                        for (int64_t i = 0; i < n; i++)                                            \
                            for (int64_t j = 0; j < n; j++) {                                      \
                                T s = 0;                                                           \
                                for (int64_t q = 0; q < n; q++) s += S[i * n + q] * H[j * n + q];  \
                                grad_A_l[at + i * n + j] = s;                                      \
                            }                                                                      \
                    if (grad_A_r)                                                                  \
                        for (int64_t i = 0; i < n; i++)                                            \
                            for (int64_t j = 0; j < n; j++) {                                      \
                                T s = 0;                                                           \
                                for (int64_t q = 0; q < n; q++) s += H[q * n + i] * tmp[q * n + j]; \
                                grad_A_r[at + i * n + j] = s;                                      \
                            }                                                                      \
                    for (int64_t i = 0; i < n; i++)                                                \
                        for (int64_t j = 0; j < n; j++) {                                          \
                            T s = 0;                                                               \
                            for (int64_t q = 0; q < n; q++) s += tmp[i * n + q] * Ar[j * n + q];   \
                            c[i * n + j] = s;                                                      \
                        }                                                                          \
                }                                                                                  \
            }                                                                                      \
            free(trace);                                                                           \
        }                                                                                          \
    }

PANINI_KERNELS(f32, float, FLT_MIN)
PANINI_KERNELS(f64, double, DBL_MIN)
