/* IDS4's recurrence (statetrack/ops/ids4.py; Merrill et al. 2024), its zero-order hold, the
   complex diagonal scan and the read-out in one pass per (batch row, channel c), over the modes n:

       lambda_t = lr + i (A_im + phi_t),   a_t given (exp(dt_t lambda_t), from the caller),
       Bbar_t = (a_t - 1) / lambda_t * B,  h_t = a_t h_{t-1} + Bbar_t u_t,  y_t = 2 Re(sum_n C h_t),

   with 1 / lambda = conj(lambda) / |lambda|^2. In PyTorch these are two dozen passes over
   [B, T, d, n] complex tensors each way; here none is written but a (which the caller forms with
   torch's vectorised cos, sin and exp) and the state every CHUNK steps. The backward reruns each
   chunk's recurrence from its checkpoint and walks it back, with gradients in torch's convention
   (dL/dRe + i dL/dIm):

       G_t = G_{t+1} conj(a_{t+1}) + 2 dy_t conj(C),   M = G_t u_t (= dL/dBbar),
       dL/da = G_t conj(h_{t-1}) + M conj(q),  q = B / lambda,   dz = dL/da conj(a)  (a = exp(z)),
       dL/dlambda = dz dt - M conj(q P),  P = (a - 1) / lambda,   dL/dB = sum M conj(P),
       dL/ddt = Re(dz conj(lambda)),  dL/du = Re(sum_n G conj(Bbar)),  dL/dC = sum 2 dy conj(h_t),

   and dL/dphi, dL/dA_im, dL/dlr from dL/dlambda. Complex arrays are split: [..., 2, nm] holds the
   real parts, then the imaginary ones.
   Batch rows are shared out over nthreads OpenMP threads (torch's pool; see native.py); the
   parameters' gradients are per-thread partial sums [nthreads, d, (2,) n], summed by the caller.
   Built with the other C files into one library by native.py. */

#include <stdint.h>
#include <stdlib.h>

#define CHUNK 64 /* IDS4_CHUNK in native.py: steps between the forward's checkpoints */

/* The mode-n quantities of a step: a, lambda, 1 / lambda, P, Bbar (ar, ai, Br, Bi [nm] split arrays,
   lr, aim [nm] the channel's rows, ph [nm] the step's rotations). */
#define IDS4_STEP(T)                                                                               \
    const T li = aim[n] + ph[n];                                                                   \
    const T rden = 1 / (lr[n] * lr[n] + li * li), ir = lr[n] * rden, ii = -li * rden;              \
    const T pr = (ar[n] - 1) * ir - ai[n] * ii, pim = (ar[n] - 1) * ii + ai[n] * ir;               \
    const T br = pr * Br[n] - pim * Bi[n], bi = pr * Bi[n] + pim * Br[n];

#define IDS4_KERNELS(SUFFIX, T)                                                                    \
    /* one step of one (row, channel): hn = a hp + Bbar u, returns 2 Re(sum_n C hn) */            \
    static inline T ids4_##SUFFIX##_advance(const T *restrict ar, const T *restrict ai,            \
                                            const T *restrict lr, const T *restrict aim,           \
                                            const T *restrict ph, const T *restrict Br,            \
                                            const T *restrict Bi, const T *restrict Cr,            \
                                            const T *restrict Ci, int64_t nm, T uu,                \
                                            const T *restrict hpr, const T *restrict hpi,          \
                                            T *restrict hnr, T *restrict hni) {                    \
        T acc = 0;                                                                                 \
        _Pragma("omp simd reduction(+: acc)")                                                      \
        for (int64_t n = 0; n < nm; n++) {                                                         \
            IDS4_STEP(T)                                                                           \
            const T hr = hpr[n], hi = hpi[n];                                                      \
            const T nr = ar[n] * hr - ai[n] * hi + br * uu, ni = ar[n] * hi + ai[n] * hr + bi * uu; \
            hnr[n] = nr;                                                                           \
            hni[n] = ni;                                                                           \
            acc += Cr[n] * nr - Ci[n] * ni;                                                        \
        }                                                                                          \
        return 2 * acc;                                                                            \
    }                                                                                              \
    /* y [nb, nt, nd]; state [nb, nd, 2, nm] enters as h0 and leaves as h_T; ckpt (or NULL)       \
       [nb, nd, nchunk, 2, nm] gets the state entering every chunk. a [nb, nt, nd, 2, nm],         \
       phi [nb, nt, nm], LR, AIM [nd, nm], Bc, Cc [nd, 2, nm]. */                                  \
    void ids4_##SUFFIX##_forward(const T *a, const T *u, const T *phi, const T *LR, const T *AIM,  \
                                 const T *Bc, const T *Cc, T *state, T *y, T *ckpt, int64_t nb,    \
                                 int64_t nt, int64_t nd, int64_t nm, int64_t nthreads) {           \
        const int64_t nchunk = (nt + CHUNK - 1) / CHUNK;                                           \
        _Pragma("omp parallel num_threads(nthreads)")                                              \
        {                                                                                          \
            T *buf = malloc((size_t)(2 * nm) * sizeof(T)); /* ping-pong with the state's row */    \
            _Pragma("omp for schedule(static)")                                                    \
            for (int64_t i = 0; i < nb; i++)                                                       \
                for (int64_t c = 0; c < nd; c++) {                                                 \
                    T *h = state + (i * nd + c) * 2 * nm, *cur = h, *next = buf;                   \
                    const T *lr = LR + c * nm, *aim = AIM + c * nm;                                \
                    const T *Br = Bc + c * 2 * nm, *Cr = Cc + c * 2 * nm;                          \
                    for (int64_t t = 0; t < nt; t++) {                                             \
                        const int64_t ot = i * nt + t;                                             \
                        if (ckpt && t % CHUNK == 0) {                                              \
                            T *k = ckpt + ((i * nd + c) * nchunk + t / CHUNK) * 2 * nm;            \
                            for (int64_t f = 0; f < 2 * nm; f++) k[f] = cur[f];                    \
                        }                                                                          \
                        const T *at = a + (ot * nd + c) * 2 * nm;                                  \
                        y[ot * nd + c] = ids4_##SUFFIX##_advance(at, at + nm, lr, aim, phi + ot * nm, Br, \
                                                                 Br + nm, Cr, Cr + nm, nm, u[ot * nd + c], \
                                                                 cur, cur + nm, next, next + nm);  \
                        T *swap = cur;                                                             \
                        cur = next;                                                                \
                        next = swap;                                                               \
                    }                                                                              \
                    if (cur != h)                                                                  \
                        for (int64_t f = 0; f < 2 * nm; f++) h[f] = cur[f];                        \
                }                                                                                  \
            free(buf);                                                                             \
        }                                                                                          \
    }                                                                                              \
    /* The adjoint of one step of one (row, channel), G [2, nm] from dL/dh_t to dL/dh_{t-1};      \
       accumulates into pLR, pAIM [nm], pB, pC [2, nm] and dph [nm]; returns dL/ddt, dL/du */      \
    static inline void ids4_##SUFFIX##_adjoint(const T *restrict ar, const T *restrict ai,         \
                                               const T *restrict lr, const T *restrict aim,        \
                                               const T *restrict ph, const T *restrict Br,         \
                                               const T *restrict Bi, const T *restrict Cr,         \
                                               const T *restrict Ci, int64_t nm, T d, T uu, T gy,  \
                                               const T *restrict hpr, const T *restrict hpi,       \
                                               const T *restrict hnr, const T *restrict hni,       \
                                               T *restrict Gr_, T *restrict Gi_,                   \
                                               T *restrict pLR, T *restrict pAIM,                  \
                                               T *restrict pBr, T *restrict pBi,                   \
                                               T *restrict pCr, T *restrict pCi,                   \
                                               T *restrict dph, T *ddt, T *du) {                   \
        T ddt_t = 0, du_t = 0;                                                                     \
        _Pragma("omp simd reduction(+: ddt_t, du_t)")                                              \
        for (int64_t n = 0; n < nm; n++) {                                                         \
            IDS4_STEP(T)                                                                           \
            const T Gr = Gr_[n] + gy * Cr[n], Gi = Gi_[n] - gy * Ci[n];                            \
            pCr[n] += gy * hnr[n];                                                                 \
            pCi[n] -= gy * hni[n];                                                                 \
            const T Mr = Gr * uu, Mi = Gi * uu;                                                    \
            du_t += Gr * br + Gi * bi;                                                             \
            const T qr = Br[n] * ir - Bi[n] * ii, qi = Br[n] * ii + Bi[n] * ir;                    \
            const T dar = Gr * hpr[n] + Gi * hpi[n] + Mr * qr + Mi * qi;                           \
            const T dai = Gi * hpr[n] - Gr * hpi[n] + Mi * qr - Mr * qi;                           \
            const T dzr = dar * ar[n] + dai * ai[n], dzi = dai * ar[n] - dar * ai[n];              \
            const T qpr = qr * pr - qi * pim, qpi = qr * pim + qi * pr;                            \
            const T dli = dzi * d - (Mi * qpr - Mr * qpi);                                         \
            pBr[n] += Mr * pr + Mi * pim;                                                          \
            pBi[n] += Mi * pr - Mr * pim;                                                          \
            ddt_t += dzr * lr[n] + dzi * li;                                                       \
            pLR[n] += dzr * d - (Mr * qpr + Mi * qpi);                                             \
            pAIM[n] += dli;                                                                        \
            dph[n] += dli;                                                                         \
            Gr_[n] = Gr * ar[n] + Gi * ai[n];                                                      \
            Gi_[n] = Gi * ar[n] - Gr * ai[n];                                                      \
        }                                                                                          \
        *ddt = ddt_t;                                                                              \
        *du = du_t;                                                                                \
    }                                                                                              \
    /* ddt, du [nb, nt, nd] and dphi [nb, nt, nm] written; dLR, dAIM [nthreads, nd, nm] and dB, dC \
       [nthreads, nd, 2, nm] partial sums, zeroed here; carry [nb, nd, 2, nm] enters as dL/dh_T   \
       and leaves as dL/dh0 */                                                                     \
    void ids4_##SUFFIX##_backward(const T *a, const T *dt, const T *u, const T *phi, const T *LR,  \
                                  const T *AIM, const T *Bc, const T *Cc, const T *ckpt,          \
                                  const T *dy, T *carry, T *ddt, T *du, T *dphi, T *dLR, T *dAIM,  \
                                  T *dB, T *dC, int64_t nb, int64_t nt, int64_t nd, int64_t nm,    \
                                  int64_t nthreads) {                                              \
        const int64_t nchunk = (nt + CHUNK - 1) / CHUNK, step = (nb + nthreads - 1) / nthreads;    \
        _Pragma("omp parallel for num_threads(nthreads) schedule(static, 1)")                      \
        for (int64_t w = 0; w < nthreads; w++) {                                                   \
            T *hs = malloc((size_t)((CHUNK + 1) * 2 * nm) * sizeof(T));                            \
            T *pLR = dLR + w * nd * nm, *pAIM = dAIM + w * nd * nm;                                \
            T *pB = dB + w * nd * 2 * nm, *pC = dC + w * nd * 2 * nm;                              \
            for (int64_t f = 0; f < nd * nm; f++) pLR[f] = pAIM[f] = 0;                            \
            for (int64_t f = 0; f < 2 * nd * nm; f++) pB[f] = pC[f] = 0;                           \
            const int64_t i0 = w * step < nb ? w * step : nb, i1 = i0 + step < nb ? i0 + step : nb; \
            for (int64_t f = i0 * nt * nm; f < i1 * nt * nm; f++) dphi[f] = 0;                     \
            for (int64_t i = i0; i < i1; i++)                                                      \
                for (int64_t c = 0; c < nd; c++) {                                                 \
                    T *G = carry + (i * nd + c) * 2 * nm;                                          \
                    const T *lr = LR + c * nm, *aim = AIM + c * nm;                                \
                    const T *Br = Bc + c * 2 * nm, *Cr = Cc + c * 2 * nm;                          \
                    for (int64_t j = nchunk - 1; j >= 0; j--) {                                    \
                        const int64_t start = j * CHUNK, end = start + CHUNK < nt ? start + CHUNK : nt; \
                        const T *k0 = ckpt + ((i * nd + c) * nchunk + j) * 2 * nm;                 \
                        for (int64_t f = 0; f < 2 * nm; f++) hs[f] = k0[f];                        \
                        for (int64_t t = start; t < end; t++) { /* the chunk's states, again */   \
                            const int64_t ot = i * nt + t;                                         \
                            const T *at = a + (ot * nd + c) * 2 * nm;                              \
                            T *hp = hs + (t - start) * 2 * nm;                                     \
                            ids4_##SUFFIX##_advance(at, at + nm, lr, aim, phi + ot * nm, Br, Br + nm, Cr, \
                                                    Cr + nm, nm, u[ot * nd + c], hp, hp + nm,      \
                                                    hp + 2 * nm, hp + 3 * nm);                     \
                        }                                                                          \
                        for (int64_t t = end - 1; t >= start; t--) { /* and back */               \
                            const int64_t ot = i * nt + t;                                         \
                            const T *at = a + (ot * nd + c) * 2 * nm;                              \
                            const T *hp = hs + (t - start) * 2 * nm;                               \
                            ids4_##SUFFIX##_adjoint(at, at + nm, lr, aim, phi + ot * nm, Br, Br + nm, Cr, \
                                                    Cr + nm, nm, dt[ot * nd + c], u[ot * nd + c],  \
                                                    2 * dy[ot * nd + c], hp, hp + nm, hp + 2 * nm, \
                                                    hp + 3 * nm, G, G + nm, pLR + c * nm,          \
                                                    pAIM + c * nm, pB + c * 2 * nm,                \
                                                    pB + c * 2 * nm + nm, pC + c * 2 * nm,         \
                                                    pC + c * 2 * nm + nm, dphi + ot * nm,          \
                                                    ddt + ot * nd + c, du + ot * nd + c);          \
                        }                                                                          \
                    }                                                                              \
                }                                                                                  \
            free(hs);                                                                              \
        }                                                                                          \
    }

IDS4_KERNELS(f32, float)
IDS4_KERNELS(f64, double)
