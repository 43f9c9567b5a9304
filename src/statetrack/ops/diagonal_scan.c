/* Fused CPU loops for the diagonal scan h_t = a_t h_{t-1} + b_t (statetrack/ops/diagonal.py).

   Built on first use by statetrack/ops/native.py with the system C compiler and called through
   ctypes. Arrays are contiguous [nb, nt, nf] (h0, the carry, [nb, nf]). Complex arrays are
   interleaved (re, im) pairs and nf counts complex elements. A call splits its work over nthreads
   OpenMP threads (torch's own pool; see native.py): whole batch rows when there are enough, else
   ranges of state lanes f in [lo, hi).

   forward:  h_t = a_t h_{t-1} + b_t, h_{-1} = h0.
   backward: lambda_t = dh_t + conj(a_{t+1}) lambda_{t+1}, lambda_{T-1} = dh_{T-1} + dh_final;
             db_t = lambda_t, da_t = lambda_t conj(h_{t-1}), dh0 = conj(a_0) lambda_0.
   carry [nb, nf] enters as dh_final and leaves as dh0. */

#include <stdint.h>

/* The backward runs the reverse scan over BLOCK steps (writing db = lambda), then da for those
   steps in forward order while they are still in cache: one loop writing both da and db while
   walking time backwards ran 2x slower on the machine of docs/performance.md. */
#define BLOCK 32

/* The loops, once for every element type T with W values per element (1 real, 2 complex), over
   the batch rows [0, nb) and lanes [lo, hi) of a piece. The arithmetic per lane, on pointers to one
   element: STEP(h, a, p, b) sets h = a p + b; BACK(l, g, c, a) sets l = g + c and c = conj(a) l;
   GRAD(d, l, h) sets d = l conj(h). */
#define PIECES(NAME, T, W, STEP, BACK, GRAD)                                                       \
    static void NAME##_forward_piece(const T *a, const T *b, const T *h0, T *h, int64_t nb,       \
                                     int64_t nt, int64_t nf, int64_t lo, int64_t hi) {             \
        for (int64_t i = 0; i < nb; i++) {                                                         \
            const T *prev = h0 + W * i * nf;                                                       \
            for (int64_t t = 0; t < nt; t++) {                                                     \
                int64_t o = W * (i * nt + t) * nf;                                                 \
                const T *restrict at = a + o, *restrict bt = b + o, *restrict pv = prev;           \
                T *restrict ht = h + o;                                                            \
                for (int64_t f = W * lo; f < W * hi; f += W) STEP(T, ht + f, at + f, pv + f, bt + f); \
                prev = ht;                                                                         \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static void NAME##_backward_piece(const T *a, const T *h, const T *h0, const T *dh, T *carry, \
                                      T *da, T *db, int64_t nb, int64_t nt, int64_t nf, int64_t lo, \
                                      int64_t hi) {                                                \
        for (int64_t i = 0; i < nb; i++) {                                                         \
            T *c = carry + W * i * nf;                                                             \
            for (int64_t end = nt; end > 0; end -= BLOCK) {                                        \
                int64_t start = end > BLOCK ? end - BLOCK : 0;                                     \
                for (int64_t t = end - 1; t >= start; t--) { /* lambda_t, backwards */             \
                    int64_t o = W * (i * nt + t) * nf;                                             \
                    const T *restrict at = a + o, *restrict gt = dh + o;                           \
                    T *restrict dbt = db + o, *restrict cc = c;                                    \
                    for (int64_t f = W * lo; f < W * hi; f += W) BACK(T, dbt + f, gt + f, cc + f, at + f); \
                }                                                                                  \
                for (int64_t t = start; t < end; t++) { /* da_t = lambda_t conj(h_{t-1}), forwards */ \
                    int64_t o = W * (i * nt + t) * nf;                                             \
                    const T *restrict lt = db + o;                                                 \
                    const T *restrict hp = t > 0 ? h + o - W * nf : h0 + W * i * nf;               \
                    T *restrict dat = da + o;                                                      \
                    for (int64_t f = W * lo; f < W * hi; f += W) GRAD(T, dat + f, lt + f, hp + f); \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

#define REAL_STEP(T, h, a, p, b) ((h)[0] = (a)[0] * (p)[0] + (b)[0])
#define REAL_BACK(T, l, g, c, a)                                                                   \
    do {                                                                                           \
        T lam_ = (g)[0] + (c)[0];                                                                  \
        (l)[0] = lam_;                                                                             \
        (c)[0] = (a)[0] * lam_;                                                                    \
    } while (0)
#define REAL_GRAD(T, d, l, h) ((d)[0] = (l)[0] * (h)[0])

#define COMPLEX_STEP(T, h, a, p, b)                                                                \
    do {                                                                                           \
        T ar_ = (a)[0], ai_ = (a)[1], pr_ = (p)[0], pi_ = (p)[1];                                  \
        (h)[0] = ar_ * pr_ - ai_ * pi_ + (b)[0];                                                   \
        (h)[1] = ar_ * pi_ + ai_ * pr_ + (b)[1];                                                   \
    } while (0)
#define COMPLEX_BACK(T, l, g, c, a) /* c = conj(a) lambda */                                       \
    do {                                                                                           \
        T lr_ = (g)[0] + (c)[0], li_ = (g)[1] + (c)[1], ar_ = (a)[0], ai_ = (a)[1];                \
        (l)[0] = lr_;                                                                              \
        (l)[1] = li_;                                                                              \
        (c)[0] = ar_ * lr_ + ai_ * li_;                                                            \
        (c)[1] = ar_ * li_ - ai_ * lr_;                                                            \
    } while (0)
#define COMPLEX_GRAD(T, d, l, h) /* lambda conj(h) */                                              \
    do {                                                                                           \
        T lr_ = (l)[0], li_ = (l)[1], hr_ = (h)[0], hi_ = (h)[1];                                  \
        (d)[0] = lr_ * hr_ + li_ * hi_;                                                            \
        (d)[1] = li_ * hr_ - lr_ * hi_;                                                            \
    } while (0)

/* Piece id of n: whole batch rows when there are at least n rows (each thread streams its own
   memory), else lane ranges rounded up to 16 lanes, so ranges start on 64-byte boundaries. */
static void piece(int64_t id, int64_t n, int64_t nb, int64_t nf, int64_t *i0, int64_t *i1, int64_t *lo,
                  int64_t *hi) {
    if (nb >= n) {
        int64_t step = (nb + n - 1) / n;
        *i0 = id * step < nb ? id * step : nb;
        *i1 = *i0 + step < nb ? *i0 + step : nb;
        *lo = 0;
        *hi = nf;
    } else {
        int64_t step = ((nf + n - 1) / n + 15) / 16 * 16;
        *i0 = 0;
        *i1 = nb;
        *lo = id * step < nf ? id * step : nf;
        *hi = *lo + step < nf ? *lo + step : nf;
    }
}

/* Runs BODY for every piece on nthreads threads of the OpenMP pool (serially when the library was
   built without OpenMP), with the piece in i0, i1, lo, hi and row = values per batch row. */
#define FOR_EACH_PIECE(W, BODY)                                                                    \
    _Pragma("omp parallel for num_threads(nthreads) schedule(static, 1)")                          \
    for (int64_t id = 0; id < nthreads; id++) {                                                    \
        int64_t i0, i1, lo, hi, row = W * nt * nf;                                                 \
        piece(id, nthreads, nb, nf, &i0, &i1, &lo, &hi);                                           \
        if (i1 > i0 && hi > lo) BODY;                                                              \
    }

/* The entry points. W: values per element (1 real, 2 complex). */
#define THREADED(NAME, T, W)                                                                       \
    void NAME##_forward(const T *a, const T *b, const T *h0, T *h, int64_t nb, int64_t nt,        \
                        int64_t nf, int64_t nthreads) {                                            \
        FOR_EACH_PIECE(W, NAME##_forward_piece(a + i0 * row, b + i0 * row, h0 + W * i0 * nf,       \
                                               h + i0 * row, i1 - i0, nt, nf, lo, hi))             \
    }                                                                                              \
    void NAME##_backward(const T *a, const T *h, const T *h0, const T *dh, T *carry, T *da,       \
                         T *db, int64_t nb, int64_t nt, int64_t nf, int64_t nthreads) {            \
        FOR_EACH_PIECE(W, NAME##_backward_piece(a + i0 * row, h + i0 * row, h0 + W * i0 * nf,      \
                                                dh + i0 * row, carry + W * i0 * nf, da + i0 * row,  \
                                                db + i0 * row, i1 - i0, nt, nf, lo, hi))           \
    }

PIECES(scan_f32, float, 1, REAL_STEP, REAL_BACK, REAL_GRAD)
PIECES(scan_f64, double, 1, REAL_STEP, REAL_BACK, REAL_GRAD)
PIECES(scan_c64, float, 2, COMPLEX_STEP, COMPLEX_BACK, COMPLEX_GRAD)
PIECES(scan_c128, double, 2, COMPLEX_STEP, COMPLEX_BACK, COMPLEX_GRAD)
THREADED(scan_f32, float, 1)
THREADED(scan_f64, double, 1)
THREADED(scan_c64, float, 2)
THREADED(scan_c128, double, 2)

/* 1 when built with OpenMP (the calls above then run on torch's thread pool), else 0. */
int native_openmp(void) {
#if defined(_OPENMP)
    return 1;
#else
    return 0;
#endif
}
