/* Compiled inference loops for the nonlinear recurrences of statetrack/ops/nonlinear.py: the sLSTM
   cell (Beck et al. 2024, eqs. 8-17, stabilised) and the NRU (Chandar et al. 2019, in the form of
   Anonymous 2025, eq. 5). Forward only: no autograd, used where no gradient is needed.

   Built with diagonal_scan.c into one library by statetrack/ops/native.py. The input part of every
   pre-activation comes precomputed for the whole chunk (one matrix product in PyTorch); what is left
   per step is a small matrix-vector product with the recurrent weights and a few pointwise
   functions, which in PyTorch is a dozen op dispatches per token. Batch rows are independent, so
   they are shared out over nthreads OpenMP threads in one parallel region per call: no thread
   hand-off per step (at batch 1 the caller passes one thread). The state arrays are updated in
   place and leave as the final state. */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* sLSTM, per batch row: pre [nt, 4, nh, d] (gates z, i, f, o from the input), R [nh, d, 4 d] (head
   k's h_{t-1} times R[k] gives its four recurrent pre-activations, gate-major), state h, c, n, m
   [nh, d], out [nt, nh, d] = h_1..h_T.

       m_t = max(log f_t + m_{t-1}, i~_t),  i' = exp(i~_t - m_t),  f' = exp(log f_t + m_{t-1} - m_t),
       c_t = f' c_{t-1} + i' tanh(z~_t),  n_t = f' n_{t-1} + i',  h_t = sigmoid(o~_t) c_t / n_t,

   log f = logsigmoid(f~) = min(f~, 0) - log1p(exp(-|f~|)). */
#define SLSTM(NAME, T, EXP, LOG1P, TANH, FABS)                                                     \
    void NAME(const T *pre, const T *R, T *h, T *c, T *n, T *m, T *out, int64_t nb, int64_t nt,    \
              int64_t nh, int64_t d, int64_t nthreads) {                                           \
        const int64_t hd = nh * d, e4 = 4 * d;                                                     \
        _Pragma("omp parallel for num_threads(nthreads) schedule(static)")                         \
        for (int64_t b = 0; b < nb; b++) {                                                         \
            T *rec = malloc((size_t)(nh * e4) * sizeof(T));                                        \
            T *hb = h + b * hd, *cb = c + b * hd, *nb_ = n + b * hd, *mb = m + b * hd;             \
            for (int64_t t = 0; t < nt; t++) {                                                     \
                const T *p = pre + (b * nt + t) * 4 * hd;                                          \
                for (int64_t k = 0; k < nh; k++) { /* rec_k = h_k R_k, all heads before any update */ \
                    T *restrict r = rec + k * e4;                                                  \
                    for (int64_t e = 0; e < e4; e++) r[e] = 0;                                     \
                    for (int64_t j = 0; j < d; j++) {                                              \
                        const T hj = hb[k * d + j];                                                \
                        const T *restrict row = R + (k * d + j) * e4;                              \
                        for (int64_t e = 0; e < e4; e++) r[e] += hj * row[e];                      \
                    }                                                                              \
                }                                                                                  \
                T *o_t = out + (b * nt + t) * hd;                                                  \
                for (int64_t k = 0; k < nh; k++) {                                                 \
                    const T *r = rec + k * e4;                                                     \
                    for (int64_t j = 0; j < d; j++) {                                              \
                        const int64_t u = k * d + j;                                               \
                        const T z = p[u] + r[j], ig = p[hd + u] + r[d + j];                        \
                        const T fg = p[2 * hd + u] + r[2 * d + j], og = p[3 * hd + u] + r[3 * d + j]; \
                        const T log_f = (fg < 0 ? fg : 0) - LOG1P(EXP(-FABS(fg)));                 \
                        const T from_f = log_f + mb[u];                                            \
                        const T m_new = from_f > ig ? from_f : ig;                                 \
                        const T i_gate = EXP(ig - m_new), f_gate = EXP(from_f - m_new);            \
                        cb[u] = f_gate * cb[u] + i_gate * TANH(z);                                 \
                        nb_[u] = f_gate * nb_[u] + i_gate;                                         \
                        hb[u] = cb[u] / nb_[u] / (1 + EXP(-og));                                   \
                        mb[u] = m_new;                                                             \
                        o_t[u] = hb[u];                                                            \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
            free(rec);                                                                             \
        }                                                                                          \
    }

/* NRU, per batch row: pre [nt, no] (the x_t part and bias of every pre-activation, rows ordered
   h [hidden], alpha [heads], beta [heads], v^w [heads, memory], v^e [heads, memory]), W
   [hidden + memory, no] (the weights reading h_{t-1} and m_{t-1}, transposed), state h [hidden],
   m [memory], out [nt, hidden] = h_1..h_T.

       a = relu(pre_t + [h_{t-1}, m_{t-1}] W),  h_t = a[:hidden],
       m_t = m_{t-1} + sum_i alpha_i v^w_i / |v^w_i| - beta_i v^e_i / |v^e_i|,

   |v| = max(||v||_5, eps) with `normalize`, else 1. */
#define NRU(NAME, T, POW)                                                                          \
    void NAME(const T *pre, const T *W, T *h, T *m, T *out, int64_t nb, int64_t nt, int64_t hidden, \
              int64_t heads, int64_t memory, int64_t normalize, double eps, int64_t nthreads) {    \
        const int64_t no = hidden + 2 * heads * (1 + memory);                                      \
        _Pragma("omp parallel for num_threads(nthreads) schedule(static)")                         \
        for (int64_t b = 0; b < nb; b++) {                                                         \
            T *act = malloc((size_t)(no + 2 * heads) * sizeof(T));                                 \
            T *coef = act + no;                                                                    \
            T *hb = h + b * hidden, *mb = m + b * memory;                                          \
            for (int64_t t = 0; t < nt; t++) {                                                     \
                const T *restrict p = pre + (b * nt + t) * no;                                     \
                T *restrict a = act;                                                               \
                for (int64_t o = 0; o < no; o++) a[o] = p[o];                                      \
                for (int64_t k = 0; k < hidden + memory; k++) {                                    \
                    const T s = k < hidden ? hb[k] : mb[k - hidden];                               \
                    const T *restrict row = W + k * no;                                            \
                    for (int64_t o = 0; o < no; o++) a[o] += s * row[o];                           \
                }                                                                                  \
                for (int64_t o = 0; o < no; o++) a[o] = a[o] > 0 ? a[o] : 0;                       \
                const T *v = a + hidden + 2 * heads; /* 2 heads vectors of `memory`: v^w_i, then v^e_i */ \
                for (int64_t j = 0; j < 2 * heads; j++) {                                          \
                    T gate = j < heads ? a[hidden + j] : -a[hidden + j];                           \
                    if (normalize) {                                                               \
                        T s = 0;                                                                   \
                        for (int64_t k = 0; k < memory; k++) {                                     \
                            const T x = v[j * memory + k], x2 = x * x;                             \
                            s += x2 * x2 * x;                                                      \
                        }                                                                          \
                        T norm = POW(s, (T)0.2);                                                   \
                        gate /= norm > (T)eps ? norm : (T)eps;                                     \
                    }                                                                              \
                    coef[j] = gate;                                                                \
                }                                                                                  \
                for (int64_t k = 0; k < memory; k++) {                                             \
                    T sum = 0;                                                                     \
                    for (int64_t j = 0; j < 2 * heads; j++) sum += coef[j] * v[j * memory + k];    \
                    mb[k] += sum;                                                                  \
                }                                                                                  \
                T *o_t = out + (b * nt + t) * hidden;                                              \
                for (int64_t k = 0; k < hidden; k++) hb[k] = o_t[k] = a[k];                        \
            }                                                                                      \
            free(act);                                                                             \
        }                                                                                          \
    }

SLSTM(slstm_f32_forward, float, expf, log1pf, tanhf, fabsf)
SLSTM(slstm_f64_forward, double, exp, log1p, tanh, fabs)
NRU(nru_f32_forward, float, powf)
NRU(nru_f64_forward, double, pow)
