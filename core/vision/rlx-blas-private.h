/* rlx-blas-private.h — OpenBLAS, loaded at first use
 *
 * OpenBLAS picks its kernels once, when it is loaded, from the CPU or from
 * OPENBLAS_CORETYPE. Version 0.3.21 (Debian 12) does not know AMD Zen 4/5,
 * and machine images often pin OPENBLAS_CORETYPE (this project's machines pin
 * Haswell) because some builds compute wrong results or crash on CPUs they
 * misdetect. So rlx-vision does not link OpenBLAS: the library is dlopen()ed
 * when the first trainer is made, after a constructor (at startup, while the
 * process has one thread, so setenv is safe) has set OPENBLAS_CORETYPE to
 * RLX_BLAS_CORETYPE when that is set. A coretype the environment sets is
 * otherwise kept. With neither, an AVX-512 CPU gets OpenBLAS's AVX-512
 * kernels by name (Cooperlake with BF16, else SkylakeX), because 0.3.21
 * falls back to its SSE3 (Prescott) kernels on models it does not know.
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

typedef enum {
  RLX_BLAS_AVX512_NONE,   /* no AVX-512, or an OS that does not save it */
  RLX_BLAS_AVX512,        /* F, CD, BW, DQ and VL */
  RLX_BLAS_AVX512_BF16,   /* and AVX512_BF16 */
} RlxBlasAvx512;

/* What this CPU (and OS) offers of AVX-512, from CPUID and XCR0. */
RlxBlasAvx512 rlx_blas_cpu_avx512 (void);

/* The OPENBLAS_CORETYPE rlx-cluster sets before loading OpenBLAS, or NULL
 * to leave the environment as it is: @rlx_env (RLX_BLAS_CORETYPE) when set
 * and not empty; nothing when @openblas_env (OPENBLAS_CORETYPE) is set;
 * else Cooperlake or SkylakeX for an AVX-512 @cpu, else nothing. */
const char *rlx_blas_pick_coretype (const char *rlx_env, const char *openblas_env,
                                    RlxBlasAvx512 cpu);

/* Loads the library on first call; aborts with a message naming the Debian
 * package when it cannot be loaded. */
const RlxBlas *rlx_blas (void);

G_END_DECLS
