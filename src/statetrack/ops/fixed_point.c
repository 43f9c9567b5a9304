/* One iteration of the fixed-point RNNs of statetrack/ops/fixed_point.py (Movahedi et al. 2025),
   fused: the Householder channel mixer and the diagonal scan over time in one pass; and its
   backward, for the solver's last, differentiable iteration.

   Vector state (eq. 7), p = h^{l-1} the previous iterate:
       v_t = Q_t (b_t - p_t),   h_t = lam_t * h_{t-1} + scale_t * (v_t + p_t),   h_{-1} = h0,
   Q_t = H_1 ... H_r, H_k = I - 2 alpha_k u_k u_k^T (H_r acts first).
   Bedouin's matrix state (eqs. 11-12), p = y^{l-1}, state h_t [ne, ns]:
       x~_t = Q_t (x_t - p_t) + p_t,   h_t = lam_t * h_{t-1} + (delta_t * x~_t) Bbar_t^T,   y_t = h_t Cbar_t.

   In PyTorch these are a dozen passes over [B, T, d] per iteration (the difference, r dot products
   and updates, the sum, the scaled input, the scan; for Bedouin also the outer product and the
   read-out over [B, T, E, N]); here each token's vectors are read once and worked on in L1, and in
   the no-grad iterations Bedouin's [E, N] state is never written per step (only its last value;
   the differentiable one keeps every state for its backward). The same pass returns
   what the stopping rule needs, per sequence: stats [nb, 2] = (max |y - p|, max |y|) over the
   sequence's tokens and features, NaN for the first when some y of it is not finite (as
   max |y - p| is in PyTorch, so that sequence does not stop).

   Built with diagonal_scan.c into one library by statetrack/ops/native.py. Arrays are contiguous,
   [nb, nt, ...] per token. Batch rows are independent and shared out over nthreads OpenMP threads
   (torch's pool; see native.py). */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* The Householder product of one token, in place: v = Q v = H_1 ... H_r v (H_r first), u [nr, nf]. */
#define HOUSEHOLDER(T, v, u, alpha, nr, nf)                                                        \
    for (int64_t k = (nr) - 1; k >= 0; k--) {                                                      \
        const T *restrict uk = (u) + k * (nf);                                                     \
        T dot = 0;                                                                                 \
        _Pragma("omp simd reduction(+: dot)") /* a vector sum: reassociation allowed */             \
        for (int64_t f = 0; f < (nf); f++) dot += uk[f] * (v)[f];                                  \
        dot *= 2 * (alpha)[k];                                                                     \
        for (int64_t f = 0; f < (nf); f++) (v)[f] -= dot * uk[f];                                  \
    }

/* The reflections' chain of one token for a backward: w [(nr + 1) nf] gets w_r = a - p (a, p
   [nf]), w_k = H_k w_{k+1}, so that w_0 = Q (a - p). */
#define HOUSEHOLDER_CHAIN(T, w, a, p, u, alpha, nr, nf)                                            \
    {                                                                                              \
        T *restrict wr_ = (w) + (nr) * (nf);                                                       \
        for (int64_t f = 0; f < (nf); f++) wr_[f] = (a)[f] - (p)[f];                               \
        for (int64_t k = (nr) - 1; k >= 0; k--) {                                                  \
            const T *restrict uk = (u) + k * (nf), *restrict wn = (w) + (k + 1) * (nf);            \
            T *restrict wk = (w) + k * (nf);                                                       \
            T dot = 0;                                                                             \
            _Pragma("omp simd reduction(+: dot)")                                                  \
            for (int64_t f = 0; f < (nf); f++) dot += uk[f] * wn[f];                               \
            dot *= 2 * (alpha)[k];                                                                 \
            for (int64_t f = 0; f < (nf); f++) wk[f] = wn[f] - dot * uk[f];                        \
        }                                                                                          \
    }

/* Its backward: given dw = dL/dw_0 [nf] (overwritten) and the chain w, writes du [nr, nf] and
   dalpha [nr] and leaves dL/dw_r in dw:
       dw_{k+1} = H_k dw_k,  dalpha_k = -2 s_k (u_k . dw_k),  du_k = -2 alpha_k (s_k dw_k + (u_k . dw_k) w_{k+1}),
   s_k = u_k . w_{k+1}. */
#define HOUSEHOLDER_BACK(T, w, dw, u, alpha, du, dalpha, nr, nf)                                   \
    for (int64_t k = 0; k < (nr); k++) {                                                           \
        const T *restrict uk = (u) + k * (nf), *restrict wn = (w) + (k + 1) * (nf);                \
        T *restrict duk = (du) + k * (nf);                                                         \
        T s = 0, q = 0;                                                                            \
        _Pragma("omp simd reduction(+: s, q)")                                                     \
        for (int64_t f = 0; f < (nf); f++) {                                                       \
            s += uk[f] * wn[f];                                                                    \
            q += uk[f] * (dw)[f];                                                                  \
        }                                                                                          \
        (dalpha)[k] = -2 * s * q;                                                                  \
        const T c = 2 * (alpha)[k];                                                                \
        for (int64_t f = 0; f < (nf); f++) {                                                       \
            duk[f] = -c * (s * (dw)[f] + q * wn[f]);                                               \
            (dw)[f] -= c * q * uk[f];                                                              \
        }                                                                                          \
    }

/* The mixer's input a - p of one token, backwards: given dw = dL/dw_0 where the mixer's output
   is w_0 + p (dw overwritten), writes da = dw_r and, when dp is not NULL, dp = dw_0 - dw_r, with
   du and dalpha (HOUSEHOLDER_BACK). */
#define MIXER_BACK(T, w, dw, u, alpha, du, dalpha, da, dp, nr, nf)                                 \
    {                                                                                              \
        if (dp)                                                                                    \
            for (int64_t f = 0; f < (nf); f++) (dp)[f] = (dw)[f];                                  \
        HOUSEHOLDER_BACK(T, w, dw, u, alpha, du, dalpha, nr, nf)                                   \
        for (int64_t f = 0; f < (nf); f++) (da)[f] = (dw)[f];                                      \
        if (dp)                                                                                    \
            for (int64_t f = 0; f < (nf); f++) (dp)[f] -= (dw)[f];                                 \
    }

/* The stopping rule's running maxima (one sequence's change, size and bad) for a new value x of an
   iterate whose previous value is p. */
#define TRACK(FABS, x, p)                                                                          \
    {                                                                                              \
        const __typeof__(x) dx_ = FABS((x) - (p)), ax_ = FABS(x);                                  \
        change = dx_ > change ? dx_ : change;                                                      \
        size = ax_ > size ? ax_ : size;                                                            \
        bad |= !(ax_ < HUGE_VAL); /* inf or NaN */                                                 \
    }

/* The vector state: lam, scale, b, prev, h [nb, nt, nf], u [nb, nt, nr, nf], alpha [nb, nt, nr],
   h0 [nb, nf]. */
#define FIXED_POINT(NAME, T, FABS)                                                                 \
    void NAME(const T *lam, const T *scale, const T *b, const T *u, const T *alpha, const T *prev,  \
              const T *h0, T *h, T *stats, int64_t nb, int64_t nt, int64_t nf, int64_t nr,         \
              int64_t nthreads) {                                                                  \
        _Pragma("omp parallel for num_threads(nthreads) schedule(static)")                         \
        for (int64_t i = 0; i < nb; i++) {                                                         \
            T change = 0, size = 0;                                                                \
            int bad = 0;                                                                           \
            T *v = malloc((size_t)nf * sizeof(T));                                                 \
            const T *hp = h0 + i * nf;                                                             \
            for (int64_t t = 0; t < nt; t++) {                                                     \
                const int64_t o = (i * nt + t) * nf, ot = i * nt + t;                              \
                const T *restrict bt = b + o, *restrict pt = prev + o, *restrict lt = lam + o;     \
                const T *restrict st = scale + o, *restrict hprev = hp;                            \
                T *restrict ht = h + o, *restrict vt = v;                                          \
                for (int64_t f = 0; f < nf; f++) vt[f] = bt[f] - pt[f];                            \
                HOUSEHOLDER(T, vt, u + ot * nr * nf, alpha + ot * nr, nr, nf)                          \
                for (int64_t f = 0; f < nf; f++) {                                                 \
                    const T x = lt[f] * hprev[f] + st[f] * (vt[f] + pt[f]);                        \
                    ht[f] = x;                                                                     \
                    TRACK(FABS, x, pt[f])                                                          \
                }                                                                                  \
                hp = ht;                                                                           \
            }                                                                                      \
            free(v);                                                                               \
            stats[2 * i] = bad ? (T)NAN : change;                                                  \
            stats[2 * i + 1] = size;                                                               \
        }                                                                                          \
    }

/* The vector state's backward, given dh [nb, nt, nf] (dL/dh_t from outside the scan) and carry
   [nb, nf] (dL/dh_T; it leaves as dL/dh0). With g_t = dh_t + lam_{t+1} g_{t+1} (g_T-1 gets the
   carry), drive_t = v_t + p_t and the reflections' chain w_r = b_t - p_t, w_k = H_k w_{k+1},
   v_t = w_0, s_k = u_k . w_{k+1}:
       dlam_t = g_t h_{t-1},  dscale_t = g_t drive_t,  dw_0 = g_t scale_t,
       dw_{k+1} = H_k dw_k,  dalpha_k = -2 s_k (u_k . dw_k),  du_k = -2 alpha_k (s_k dw_k + (u_k . dw_k) w_{k+1}),
       db_t = dw_r,  dp_t = dw_0 - dw_r (skipped when dprev is NULL),  dh0 = lam_0 g_0.
   The chain w is recomputed per token (r + 1 vectors in a scratch buffer). */
#define FIXED_POINT_BACKWARD(NAME, T)                                                              \
    void NAME(const T *lam, const T *scale, const T *b, const T *u, const T *alpha, const T *prev,  \
              const T *h0, const T *h, const T *dh, T *carry, T *dlam, T *dscale, T *db, T *du,    \
              T *dalpha, T *dprev, int64_t nb, int64_t nt, int64_t nf, int64_t nr, int64_t nthreads) { \
        _Pragma("omp parallel for num_threads(nthreads) schedule(static)")                         \
        for (int64_t i = 0; i < nb; i++) {                                                         \
            T *w = malloc((size_t)((nr + 2) * nf) * sizeof(T)); /* w_0..w_r, then dw */            \
            T *restrict g = carry + i * nf, *restrict dw = w + (nr + 1) * nf;                      \
            for (int64_t t = nt - 1; t >= 0; t--) {                                                \
                const int64_t ot = i * nt + t, o = ot * nf;                                        \
                const T *restrict pt = prev + o, *restrict bt = b + o, *restrict lt = lam + o;     \
                const T *restrict st = scale + o, *restrict gt = dh + o;                           \
                const T *restrict hp = t > 0 ? h + o - nf : h0 + i * nf;                           \
                const T *restrict ut = u + ot * nr * nf, *restrict at = alpha + ot * nr;           \
                HOUSEHOLDER_CHAIN(T, w, bt, pt, ut, at, nr, nf)                                   \
                T *restrict dlt = dlam + o, *restrict dst = dscale + o;                            \
                for (int64_t f = 0; f < nf; f++) { /* g_t, and what it gives directly */            \
                    const T gf = gt[f] + g[f];                                                     \
                    dlt[f] = gf * hp[f];                                                           \
                    dst[f] = gf * (w[f] + pt[f]);                                                  \
                    dw[f] = gf * st[f];                                                            \
                    g[f] = gf * lt[f]; /* lam_t g_t: the carry into step t - 1 */                  \
                }                                                                                  \
                T *dpt = dprev ? dprev + o : NULL; /* NULL: no gradient for p wanted */            \
                MIXER_BACK(T, w, dw, ut, at, du + ot * nr * nf, dalpha + ot * nr, db + o, dpt, nr, nf) \
            }                                                                                      \
            free(w);                                                                               \
        }                                                                                          \
    }

/* Bedouin: lam [nb, nt, ne, ns], delta, x, prev, y [nb, nt, ne], u [nb, nt, nr, ne], alpha
   [nb, nt, nr], bb, cb [nb, nt, ns] (Bbar, Cbar), state [nb, ne, ns]: h0 in, h_T out; hs
   [nb, nt, ne, ns] gets every h_t when not NULL (for the backward). */
#define BEDOUIN(NAME, T, FABS)                                                                     \
    void NAME(const T *lam, const T *delta, const T *x, const T *prev, const T *u, const T *alpha, \
              const T *bb, const T *cb, T *state, T *y, T *hs, T *stats, int64_t nb, int64_t nt,  \
              int64_t ne, int64_t ns, int64_t nr, int64_t nthreads) {                              \
        _Pragma("omp parallel for num_threads(nthreads) schedule(static)")                         \
        for (int64_t i = 0; i < nb; i++) {                                                         \
            T change = 0, size = 0;                                                                \
            int bad = 0;                                                                           \
            T *v = malloc((size_t)ne * sizeof(T));                                                 \
            T *h = state + i * ne * ns;                                                            \
            for (int64_t t = 0; t < nt; t++) {                                                     \
                const int64_t ot = i * nt + t, o = ot * ne;                                        \
                const T *restrict pt = prev + o, *restrict xt = x + o, *restrict dt = delta + o;   \
                const T *restrict bt = bb + ot * ns, *restrict ct = cb + ot * ns;                  \
                T *restrict vt = v, *restrict yt = y + o;                                          \
                for (int64_t e = 0; e < ne; e++) vt[e] = xt[e] - pt[e];                            \
                HOUSEHOLDER(T, vt, u + ot * nr * ne, alpha + ot * nr, nr, ne)                      \
                for (int64_t e = 0; e < ne; e++) {                                                 \
                    const T s = dt[e] * (vt[e] + pt[e]);                                           \
                    const T *restrict le = lam + (o + e) * ns;                                     \
                    T *restrict he = h + e * ns;                                                   \
                    T out = 0;                                                                     \
                    _Pragma("omp simd reduction(+: out)")                                          \
                    for (int64_t n = 0; n < ns; n++) {                                             \
                        he[n] = le[n] * he[n] + s * bt[n];                                         \
                        out += he[n] * ct[n];                                                      \
                    }                                                                              \
                    yt[e] = out;                                                                   \
                    TRACK(FABS, out, pt[e])                                                        \
                }                                                                                  \
                if (hs)                                                                            \
                    for (int64_t f = 0; f < ne * ns; f++) hs[ot * ne * ns + f] = h[f];             \
            }                                                                                      \
            free(v);                                                                               \
            stats[2 * i] = bad ? (T)NAN : change;                                                  \
            stats[2 * i + 1] = size;                                                               \
        }                                                                                          \
    }

/* Bedouin's backward, given dy [nb, nt, ne] and carry [nb, ne, ns] (dL/dh_T; it leaves as dL/dh0),
   with hs the forward's states. G_t = dy_t Cbar_t^T + lam_{t+1} * G_{t+1} (the state's adjoint),
   x~_t = w_0 + p_t from the chain w_r = x_t - p_t, s_t = delta_t * x~_t:
       dCbar_t = h_t^T dy_t,  dlam_t = G_t * h_{t-1},  ds_t = G_t Bbar_t,  dBbar_t = G_t^T s_t,
       ddelta_t = ds_t * x~_t,  dw_0 = ds_t * delta_t,  (HOUSEHOLDER_BACK)  dx_t = dw_r,
       dp_t = dw_0 - dw_r (skipped when dprev is NULL),  dh0 = lam_0 * G_0. */
#define BEDOUIN_BACKWARD(NAME, T)                                                                  \
    void NAME(const T *lam, const T *delta, const T *x, const T *prev, const T *u, const T *alpha, \
              const T *bb, const T *cb, const T *h0, const T *hs, const T *dy, T *carry, T *dlam,  \
              T *ddelta, T *dx, T *dprev, T *du, T *dalpha, T *dbb, T *dcb, int64_t nb, int64_t nt, \
              int64_t ne, int64_t ns, int64_t nr, int64_t nthreads) {                              \
        const int64_t es = ne * ns;                                                                \
        _Pragma("omp parallel for num_threads(nthreads) schedule(static)")                         \
        for (int64_t i = 0; i < nb; i++) {                                                         \
            T *w = malloc((size_t)((nr + 2) * ne) * sizeof(T)); /* w_0..w_r, then dw */            \
            T *restrict G = carry + i * es, *restrict dw = w + (nr + 1) * ne;                      \
            for (int64_t t = nt - 1; t >= 0; t--) {                                                \
                const int64_t ot = i * nt + t, o = ot * ne;                                        \
                const T *restrict pt = prev + o, *restrict dt = delta + o, *restrict gy = dy + o;  \
                const T *restrict bt = bb + ot * ns, *restrict ct = cb + ot * ns;                  \
                const T *restrict ht = hs + ot * es, *restrict hp = t > 0 ? ht - es : h0 + i * es; \
                const T *restrict ut = u + ot * nr * ne, *restrict at = alpha + ot * nr;           \
                T *restrict dbt = dbb + ot * ns, *restrict dct = dcb + ot * ns;                    \
                HOUSEHOLDER_CHAIN(T, w, x + o, pt, ut, at, nr, ne)                                 \
                for (int64_t n = 0; n < ns; n++) dbt[n] = dct[n] = 0;                              \
                for (int64_t e = 0; e < ne; e++) {                                                 \
                    const T xm = w[e] + pt[e], s = dt[e] * xm, ge = gy[e];                         \
                    const T *restrict le = lam + (o + e) * ns, *restrict he = ht + e * ns;         \
                    const T *restrict hpe = hp + e * ns;                                           \
                    T *restrict Ge = G + e * ns, *restrict dle = dlam + (o + e) * ns;              \
                    T ds = 0;                                                                      \
                    for (int64_t n = 0; n < ns; n++) {                                             \
                        const T g = Ge[n] + ge * ct[n];                                            \
                        dct[n] += he[n] * ge;                                                      \
                        dle[n] = g * hpe[n];                                                       \
                        ds += g * bt[n];                                                           \
                        dbt[n] += g * s;                                                           \
                        Ge[n] = g * le[n]; /* lam_t G_t: the carry into step t - 1 */              \
                    }                                                                              \
                    ddelta[o + e] = ds * xm;                                                       \
                    dw[e] = ds * dt[e];                                                            \
                }                                                                                  \
                T *dpt = dprev ? dprev + o : NULL;                                                 \
                MIXER_BACK(T, w, dw, ut, at, du + ot * nr * ne, dalpha + ot * nr, dx + o, dpt, nr, ne) \
            }                                                                                      \
            free(w);                                                                               \
        }                                                                                          \
    }

FIXED_POINT(fixed_point_f32_iterate, float, fabsf)
FIXED_POINT(fixed_point_f64_iterate, double, fabs)
FIXED_POINT_BACKWARD(fixed_point_f32_backward, float)
FIXED_POINT_BACKWARD(fixed_point_f64_backward, double)
BEDOUIN(bedouin_f32_iterate, float, fabsf)
BEDOUIN(bedouin_f64_iterate, double, fabs)
BEDOUIN_BACKWARD(bedouin_f32_backward, float)
BEDOUIN_BACKWARD(bedouin_f64_backward, double)
