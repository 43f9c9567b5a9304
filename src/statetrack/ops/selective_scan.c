/* Mamba's selective scan (S6; Gu & Dao 2023) fused: discretisation, recurrence and read-out in one
   pass per (batch row, channel), and its backward (statetrack/ops/selective.py).

   Per batch row b and channel e, with x_t = dt_t u_t (scalars) and the state h_t [ns]:
       z_t[n] = -dt_t A[e, n],   a_t[n] = scale exp(z_t[n]) - (scale - 1),
       h_t[n] = a_t[n] h_{t-1}[n] + x_t B_t[n],   y_t = sum_n C_t[n] h_t[n],   h_{-1} = h0.
   Backward, from dy [nb, nt, ne] and dL/dh_T (the carry), with G the state's adjoint:
       G_t = dy_t C_t + a_{t+1} G_{t+1},   dC_t += dy_t h_t (summed over e),   dB_t += x_t G_t (over e),
       dx_t = G_t . B_t,   dz_t = G_t h_{t-1} scale exp(z_t),   ddt_t = dx_t u_t - dz_t . A[e],
       du_t = dx_t dt_t,   dA[e] -= dt_t dz_t (summed over b and t),   dh0 = a_0 G_0.
   a_t is never recovered by division (it is 0 or negative under scale 2).

   What the backward keeps: the forward writes y, h_T and, when a gradient is wanted, exp(z_t) for
   every step (exs [nb, ne, nt, ns], one buffer) and the state entering every chunk of CHUNK steps
   (ckpt). The backward reruns each chunk's recurrence from its checkpoint into a buffer of
   (CHUNK + 1) x ns states that stays in L1 (one multiply-add per element) and walks it backwards.
   exp is the costly part of a step; on the machine of docs/performance.md writing and reading it
   through memory cost less than computing it again (fwd + bwd 2.6-2.7 against 3.2-3.7 ms at
   B 64, T 16, E 64, N 16; "Selective scan (Mamba)"), and storing the states as well would save
   only the multiply-add. Neither direction forms a, b, h or their gradients as [nb, nt, ne, ns] tensors,
   which is where the PyTorch form spent its time (a pass over memory and a fresh buffer per op).

   float32 uses the exp below (Cephes' expf polynomial, about 1 ulp), which the compiler vectorises
   over n; float64 calls libm's exp.

   Built with the other C files into one library by statetrack/ops/native.py and called through
   ctypes. Arrays are contiguous: dt, u, y, ddt, du [nb, nt, ne]; bb, cb (B_t, C_t) [nb, nt, ns];
   A [ne, ns]; state, carry [nb, ne, ns]; ckpt [nb, ne, nchunk, ns]; exs [nb, ne, nt, ns]. Work
   is shared out over nthreads OpenMP threads (torch's pool; see native.py) as pieces of the
   (batch row, channel) grid: whole batch rows when there are at least nthreads, else ranges of
   channels over all rows. */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* GCC if-converts the clamps of exp_f32 (and so vectorises the loops over the state) only when it
   may assume that nobody watches floating-point exceptions (no result changes; Clang assumes so by
   default). fp-contract: a b + c as one fused multiply-add where the target has one (the AVX2 + FMA
   loops), one rounding instead of two. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math", "fp-contract=fast")
#endif

#define CHUNK 64 /* steps between checkpoints of the state */

/* exp(x) in float32 without branches, so that a loop over it vectorises: x = k ln 2 + r with k an
   integer and |r| <= ln 2 / 2, exp(r) by Cephes' expf polynomial (about 1 ulp), 2^k as two factors
   2^(k/2) 2^(k - k/2), which reach the subnormals and overflow to inf as exp does. x is first
   clamped to [-104.5, 89], where the result is already 0 (rounded) or inf; NaN stays NaN. k is read
   from the bits of x log2(e) + 1.5 2^23 (the float whose last mantissa bits are the rounded value):
   no float-to-int conversion. */
static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float exp_f32(float x) {
    const float big = 12582912.0f; /* 1.5 2^23, bits 0x4b400000 */
    x = x < -104.5f ? -104.5f : x;
    x = x > 89.0f ? 89.0f : x;
    const float t = x * 1.44269504088896341f + big;
    const float k = t - big; /* x log2(e), rounded to an integer */
    const int32_t ki = (int32_t)(f32_bits(t) - 0x4b400000u), k1 = ki >> 1, k2 = ki - k1;
    float r = x - k * 0.693359375f;
    r = r - k * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    return p * bits_f32((uint32_t)(k1 + 127) << 23) * bits_f32((uint32_t)(k2 + 127) << 23);
}

static inline double exp_f64(double x) { return exp(x); }

/* Piece id of n: batch rows [i0, i1) and channels [e0, e1). */
static void sel_piece(int64_t id, int64_t n, int64_t nb, int64_t ne, int64_t *i0, int64_t *i1, int64_t *e0,
                      int64_t *e1) {
    if (nb >= n) {
        int64_t step = (nb + n - 1) / n;
        *i0 = id * step < nb ? id * step : nb;
        *i1 = *i0 + step < nb ? *i0 + step : nb;
        *e0 = 0;
        *e1 = ne;
    } else {
        int64_t step = (ne + n - 1) / n;
        *i0 = 0;
        *i1 = nb;
        *e0 = id * step < ne ? id * step : ne;
        *e1 = *e0 + step < ne ? *e0 + step : ne;
    }
}

/* The work of one piece: batch rows [i0, i1), channels [e0, e1). ATTR: the instruction set; NS: 0,
   or the state size ns fixed at compile time (the loops over it are then unrolled and the carries
   stay in registers). */
#define SELECTIVE_PIECES(NAME, T, EXP, ATTR, NS)                                                   \
    ATTR static void NAME##_forward_piece(const T *dt, const T *A, const T *u, const T *bb,       \
                                          const T *cb, T *state, T *y, T *ckpt, T *exs, T scale,  \
                                          int64_t nt, int64_t ne, int64_t ns_, int64_t i0,         \
                                          int64_t i1, int64_t e0, int64_t e1) {                   \
        const T shift = scale - 1;                                                                 \
        const int64_t nchunk = (nt + CHUNK - 1) / CHUNK, ns = NS ? NS : ns_;                       \
        for (int64_t i = i0; i < i1; i++)                                                          \
            for (int64_t e = e0; e < e1; e++) {                                                    \
                T *restrict h = state + (i * ne + e) * ns;                                         \
                const T *restrict Ae = A + e * ns;                                                 \
                for (int64_t t = 0; t < nt; t++) {                                                 \
                    if (ckpt && t % CHUNK == 0) {                                                  \
                        T *restrict c = ckpt + ((i * ne + e) * nchunk + t / CHUNK) * ns;           \
                        for (int64_t n = 0; n < ns; n++) c[n] = h[n];                              \
                    }                                                                              \
                    const int64_t ot = i * nt + t;                                                 \
                    const T d = dt[ot * ne + e], x = d * u[ot * ne + e];                           \
                    const T *restrict Bt = bb + ot * ns, *restrict Ct = cb + ot * ns;              \
                    T out = 0;                                                                     \
                    if (exs) {                                                                     \
                        T *restrict w = exs + ((i * ne + e) * nt + t) * ns;                        \
                        _Pragma("omp simd reduction(+: out)")                                      \
                        for (int64_t n = 0; n < ns; n++) {                                         \
                            w[n] = EXP(d * -Ae[n]);                                                \
                            h[n] = (scale * w[n] - shift) * h[n] + x * Bt[n];                      \
                            out += Ct[n] * h[n];                                                   \
                        }                                                                          \
                    } else {                                                                       \
                        _Pragma("omp simd reduction(+: out)")                                      \
                        for (int64_t n = 0; n < ns; n++) {                                         \
                            const T a = scale * EXP(d * -Ae[n]) - shift;                           \
                            h[n] = a * h[n] + x * Bt[n];                                           \
                            out += Ct[n] * h[n];                                                   \
                        }                                                                          \
                    }                                                                              \
                    y[ot * ne + e] = out;                                                          \
                }                                                                                  \
            }                                                                                      \
    }                                                                                              \
    /* hs: (CHUNK + 1) ns states; exs: the forward's exp(z); dbb, dcb: this piece's partial */     \
    ATTR static void NAME##_backward_piece(const T *dt, const T *A, const T *u, const T *bb,      \
                                           const T *cb, const T *ckpt, const T *exs, const T *dy, T *carry, \
                                           T *ddt, T *du, T *dbb, T *dcb, T *dAp, T *hs, T scale, \
                                           int64_t nt, int64_t ne, int64_t ns_, int64_t i0,        \
                                           int64_t i1, int64_t e0, int64_t e1) {                  \
        const T shift = scale - 1;                                                                 \
        const int64_t nchunk = (nt + CHUNK - 1) / CHUNK, ns = NS ? NS : ns_;                       \
        for (int64_t i = i0; i < i1; i++)                                                          \
            for (int64_t e = e0; e < e1; e++) {                                                    \
                T *restrict G = carry + (i * ne + e) * ns;                                         \
                const T *restrict Ae = A + e * ns;                                                 \
                T *restrict dAe = dAp + e * ns;                                                    \
                for (int64_t j = nchunk - 1; j >= 0; j--) {                                        \
                    const int64_t start = j * CHUNK, end = start + CHUNK < nt ? start + CHUNK : nt; \
                    const T *restrict c = ckpt + ((i * ne + e) * nchunk + j) * ns;                 \
                    for (int64_t n = 0; n < ns; n++) hs[n] = c[n];                                 \
                    const T *restrict ex = exs + ((i * ne + e) * nt + start) * ns;                 \
                    for (int64_t t = start; t < end; t++) { /* the chunk's states, again */        \
                        const int64_t ot = i * nt + t, k = t - start;                              \
                        const T d = dt[ot * ne + e], x = d * u[ot * ne + e];                       \
                        const T *restrict Bt = bb + ot * ns, *restrict hp = hs + k * ns;           \
                        T *restrict hn = hs + (k + 1) * ns;                                        \
                        const T *restrict exk = ex + k * ns;                                       \
                        _Pragma("omp simd")                                                        \
                        for (int64_t n = 0; n < ns; n++) {                                         \
                            hn[n] = (scale * exk[n] - shift) * hp[n] + x * Bt[n];                  \
                        }                                                                          \
                    }                                                                              \
                    for (int64_t t = end - 1; t >= start; t--) { /* and back */                   \
                        const int64_t ot = i * nt + t, k = t - start;                              \
                        const T d = dt[ot * ne + e], ut = u[ot * ne + e], x = d * ut;              \
                        const T g_y = dy[ot * ne + e];                                             \
                        const T *restrict Bt = bb + ot * ns, *restrict Ct = cb + ot * ns;          \
                        const T *restrict hp = hs + k * ns, *restrict hn = hs + (k + 1) * ns;      \
                        const T *restrict exk = ex + k * ns;                                       \
                        T *restrict dBt = dbb + ot * ns, *restrict dCt = dcb + ot * ns;            \
                        T dx = 0, dzA = 0;                                                         \
                        _Pragma("omp simd reduction(+: dx, dzA)")                                  \
                        for (int64_t n = 0; n < ns; n++) {                                         \
                            const T g = G[n] + g_y * Ct[n];                                        \
                            const T w = scale * exk[n]; /* d a / d z, and a = w - shift */         \
                            const T dz = g * hp[n] * w;                                            \
                            dCt[n] += g_y * hn[n];                                                 \
                            dBt[n] += g * x;                                                       \
                            dx += g * Bt[n];                                                       \
                            dzA += dz * Ae[n];                                                     \
                            dAe[n] -= dz * d;                                                      \
                            G[n] = g * (w - shift);                                                \
                        }                                                                          \
                        ddt[ot * ne + e] = dx * ut - dzA;                                          \
                        du[ot * ne + e] = dx * d;                                                  \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
    }

/* The pieces once for the compiler's target and, on x86 built for less, once more for AVX2 + FMA,
   chosen at run time (1.5-1.8x faster in float32, where exp_f32 vectorises). */
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__)) && !defined(__AVX2__)
#define SELECTIVE_AVX2 1
#define AVX2_TARGET __attribute__((target("avx2,fma")))
static int use_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#else
#define SELECTIVE_AVX2 0
static int use_avx2(void) { return 0; }
#endif

/* float32 also with ns = 16 fixed (Mamba's default d_state): about 1.3x faster */
SELECTIVE_PIECES(sel_f32, float, exp_f32, , 0)
SELECTIVE_PIECES(sel_f32_n16, float, exp_f32, , 16)
SELECTIVE_PIECES(sel_f64, double, exp_f64, , 0)
#if SELECTIVE_AVX2
SELECTIVE_PIECES(sel_f32_avx2, float, exp_f32, AVX2_TARGET, 0)
SELECTIVE_PIECES(sel_f32_avx2_n16, float, exp_f32, AVX2_TARGET, 16)
#define SEL_F32_PIECE(DIRECTION)                                                                   \
    (fast ? (ns == 16 ? sel_f32_avx2_n16_##DIRECTION##_piece : sel_f32_avx2_##DIRECTION##_piece)   \
          : (ns == 16 ? sel_f32_n16_##DIRECTION##_piece : sel_f32_##DIRECTION##_piece))
#else
#define SEL_F32_PIECE(DIRECTION) (ns == 16 ? sel_f32_n16_##DIRECTION##_piece : sel_f32_##DIRECTION##_piece)
#endif
#define SEL_F64_PIECE(DIRECTION) sel_f64_##DIRECTION##_piece

/* forward: y, and state (h0 in, h_T out); ckpt and exs (both NULL: no gradient wanted) get the
   state entering every chunk of CHUNK steps and every exp(z_t). */
#define SELECTIVE_FORWARD(NAME, T, PIECE)                                                          \
    void NAME(const T *dt, const T *A, const T *u, const T *bb, const T *cb, T *state, T *y,     \
              T *ckpt, T *exs, T scale, int64_t nb, int64_t nt, int64_t ne, int64_t ns,          \
              int64_t nthreads) {                                                                  \
        const int fast = use_avx2();                                                               \
        (void)fast;                                                                                \
        _Pragma("omp parallel for num_threads(nthreads) schedule(static, 1)")                      \
        for (int64_t id = 0; id < nthreads; id++) {                                                \
            int64_t i0, i1, e0, e1;                                                                \
            sel_piece(id, nthreads, nb, ne, &i0, &i1, &e0, &e1);                                   \
            PIECE(forward)(dt, A, u, bb, cb, state, y, ckpt, exs, scale, nt, ne, ns, i0, i1, e0, e1); \
        }                                                                                          \
    }

/* backward: ddt, du written; dbb, dcb [np, nb, nt, ns] and dA [nthreads, ne, ns] are partial sums
   (np = 1 when pieces are whole batch rows, else nthreads), zeroed here, summed by the caller;
   carry [nb, ne, ns] enters as dL/dh_T and leaves as dL/dh0. */
#define SELECTIVE_BACKWARD(NAME, T, PIECE)                                                         \
    void NAME(const T *dt, const T *A, const T *u, const T *bb, const T *cb, const T *ckpt,      \
              const T *exs, const T *dy, T *carry, T *ddt, T *du, T *dbb, T *dcb, T *dA, T scale, int64_t nb,   \
              int64_t nt, int64_t ne, int64_t ns, int64_t nthreads) {                              \
        const int fast = use_avx2();                                                               \
        (void)fast;                                                                                \
        _Pragma("omp parallel for num_threads(nthreads) schedule(static, 1)")                      \
        for (int64_t id = 0; id < nthreads; id++) {                                                \
            int64_t i0, i1, e0, e1;                                                                \
            sel_piece(id, nthreads, nb, ne, &i0, &i1, &e0, &e1);                                   \
            const int64_t part = nb >= nthreads ? 0 : id, rows = nt * ns;                          \
            T *dbp = dbb + part * nb * rows, *dcp = dcb + part * nb * rows;                        \
            T *dAp = dA + id * ne * ns;                                                            \
            for (int64_t f = 0; f < ne * ns; f++) dAp[f] = 0;                                      \
            /* this piece's rows of the one partial, or all rows of its own */                     \
            for (int64_t f = i0 * rows; f < i1 * rows; f++) dbp[f] = dcp[f] = 0;                   \
            if (i1 > i0 && e1 > e0) {                                                              \
                T *hs = malloc((size_t)((CHUNK + 1) * ns) * sizeof(T));                            \
                PIECE(backward)(dt, A, u, bb, cb, ckpt, exs, dy, carry, ddt, du, dbp, dcp, dAp, hs, scale, \
                                nt, ne, ns, i0, i1, e0, e1);                                       \
                free(hs);                                                                          \
            }                                                                                      \
        }                                                                                          \
    }

SELECTIVE_FORWARD(selective_scan_f32_forward, float, SEL_F32_PIECE)
SELECTIVE_FORWARD(selective_scan_f64_forward, double, SEL_F64_PIECE)
SELECTIVE_BACKWARD(selective_scan_f32_backward, float, SEL_F32_PIECE)
SELECTIVE_BACKWARD(selective_scan_f64_backward, double, SEL_F64_PIECE)
