/* rlx-blas-private.h — OpenBLAS, loaded at first use
 *
 * OpenBLAS picks its kernels once, when it is loaded. Version 0.3.21 (Debian
 * 12) does not know AMD Zen 4/5: it falls back to its AVX2 (Haswell) kernels,
 * and images for such machines often pin OPENBLAS_CORETYPE=Haswell, although
 * these CPUs run its AVX-512 (SkylakeX) kernels about 1.6× faster. So
 * rlx-vision does not link OpenBLAS. A constructor (at startup, while the
 * process has one thread, so setenv is safe) sets OPENBLAS_CORETYPE to
 * RLX_BLAS_CORETYPE when that is set, else to SkylakeX when the CPU and the
 * OS support the AVX-512 subsets those kernels use (F, CD, BW, DQ, VL), and
 * the library is dlopen()ed when the first trainer is made.
 * RLX_BLAS_CORETYPE=Haswell gives the kernels PyTorch uses on such a machine.
 */
#pragma once

#include <glib.h>
#include <cblas.h>

G_BEGIN_DECLS

typedef struct {
  __typeof__ (cblas_sgemm)              *sgemm;
  __typeof__ (openblas_set_num_threads) *set_num_threads;
  __typeof__ (openblas_get_num_threads) *get_num_threads;
  __typeof__ (openblas_get_config)      *get_config;
  __typeof__ (openblas_get_corename)    *get_corename;
  char                                  *name;   /* "OpenBLAS 0.3.21 … (SkylakeX kernels)" */
} RlxBlas;

/* Loads the library on first call; aborts with a message naming the Debian
 * package when it cannot be loaded. */
const RlxBlas *rlx_blas (void);

G_END_DECLS
