/* rlx-blas-private.h — OpenBLAS, loaded at first use
 *
 * OpenBLAS picks its kernels once, when it is loaded, from the CPU or from
 * OPENBLAS_CORETYPE. Version 0.3.21 (Debian 12) does not know AMD Zen 4/5,
 * and machine images often pin OPENBLAS_CORETYPE (this project's machines pin
 * Haswell) because some builds compute wrong results or crash on CPUs they
 * misdetect. So rlx-vision does not link OpenBLAS: the library is dlopen()ed
 * when the first trainer is made, after a constructor (at startup, while the
 * process has one thread, so setenv is safe) has set OPENBLAS_CORETYPE to
 * RLX_BLAS_CORETYPE when that is set (e.g. SkylakeX on an AVX-512 CPU you
 * have checked it on). A coretype the environment sets is otherwise kept.
 *
 * sgemm and set_num_threads are wrappers: a fork() waits until the calls in
 * flight have returned (OpenBLAS 0.3.21's own fork handler stops its thread
 * pool under a running threaded call and hangs; see rlx-blas.c).
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
