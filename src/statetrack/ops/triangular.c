/* Batched inverse of unit lower-triangular matrices, T = (I + strictly-lower(A))^-1 (triangular.py).

   Built with diagonal_scan.c into one library by statetrack/ops/native.py. A and T are contiguous
   [nb, c, c] with c <= MAX_C; the matrices are shared out over nthreads OpenMP threads. Only the
   strictly lower part of A is read, and T is written whole (zeros above the diagonal). Forward
   substitution by rows,

       T[i, :] = e_i - sum_{k < i} A[i, k] T[k, :],

   accumulated in a local row: every inner loop is a full-length axpy over c (row k of T is zero
   beyond column k, so the extra terms add exact zeros) that the compiler vectorises, about c^3 / 2
   multiply-adds per matrix. The chunkwise delta rule calls it on all chunks at once; at c = 32 a
   matrix is 4 KiB and stays in L1 while it is built. The block-doubling PyTorch form it replaces
   spent its time in small strided copies, not arithmetic. */

#include <stdint.h>
#include <string.h>

#define MAX_C 256

#define UNIT_LOWER_INVERSE(NAME, T)                                                                \
    void NAME(const T *A, T *out, int64_t nb, int64_t c, int64_t nthreads) {                       \
        _Pragma("omp parallel for num_threads(nthreads) schedule(static)")                         \
        for (int64_t b = 0; b < nb; b++) {                                                         \
            T acc[MAX_C];                                                                          \
            const T *a = A + b * c * c;                                                            \
            T *t = out + b * c * c;                                                                \
            for (int64_t i = 0; i < c; i++) {                                                      \
                for (int64_t j = 0; j < c; j++) acc[j] = 0;                                        \
                acc[i] = 1;                                                                        \
                for (int64_t k = 0; k < i; k++) {                                                  \
                    const T coef = -a[i * c + k];                                                  \
                    const T *restrict src = t + k * c;                                             \
                    for (int64_t j = 0; j < c; j++) acc[j] += coef * src[j];                       \
                }                                                                                  \
                memcpy(t + i * c, acc, (size_t)c * sizeof(T));                                     \
            }                                                                                      \
        }                                                                                          \
    }

UNIT_LOWER_INVERSE(unit_lower_inverse_f32, float)
UNIT_LOWER_INVERSE(unit_lower_inverse_f64, double)
