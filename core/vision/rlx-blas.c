/* rlx-blas.c — OpenBLAS, loaded at first use (see rlx-blas-private.h) */
#include "rlx-config.h"
#include "rlx-blas-private.h"

#include <dlfcn.h>
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "core/util/rlx-fp-mode.h"

#define BLAS_SONAME  "libopenblas.so.0"
#define BLAS_PACKAGE "libopenblas0-pthread"

/* What OPENBLAS_CORETYPE was before the constructor, and whether the
 * constructor chose the kernels itself, for rlx_blas ()->name. */
static char *coretype_before;
static gboolean coretype_auto;

RlxBlasAvx512
rlx_blas_cpu_avx512 (void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  unsigned int eax, ebx, ecx, edx;

  /* as core/wire chooses its AVX-512 kernels (the checks cover the OS
   * saving the registers); AVX512_BF16, which clang 14's
   * __builtin_cpu_supports does not know, from CPUID leaf 7 subleaf 1 EAX
   * bit 5 */
  __builtin_cpu_init ();
  if (!__builtin_cpu_supports ("avx512f") || !__builtin_cpu_supports ("avx512cd") ||
      !__builtin_cpu_supports ("avx512bw") || !__builtin_cpu_supports ("avx512dq") ||
      !__builtin_cpu_supports ("avx512vl"))
    return RLX_BLAS_AVX512_NONE;
  if (__get_cpuid_max (0, NULL) >= 7)
    {
      __cpuid_count (7, 1, eax, ebx, ecx, edx);
      if (eax & (1u << 5))
        return RLX_BLAS_AVX512_BF16;
    }
  return RLX_BLAS_AVX512;
#else
  return RLX_BLAS_AVX512_NONE;
#endif
}

const char *
rlx_blas_pick_coretype (const char *rlx_env, const char *openblas_env, RlxBlasAvx512 cpu)
{
  if (rlx_env != NULL && *rlx_env != '\0')
    return rlx_env;
  if (openblas_env != NULL && *openblas_env != '\0')
    return NULL;
  switch (cpu)
    {
    case RLX_BLAS_AVX512_BF16:
      return "Cooperlake";
    case RLX_BLAS_AVX512:
      return "SkylakeX";
    case RLX_BLAS_AVX512_NONE:
    default:
      return NULL;
    }
}

/* OpenBLAS reads OPENBLAS_CORETYPE when it is loaded, which is why it is
 * dlopen'ed here rather than linked. RLX_BLAS_CORETYPE (e.g. "SkylakeX")
 * picks its kernels for rlx-cluster alone. A coretype the environment already
 * sets is respected: machines set it because some OpenBLAS builds choose
 * kernels that compute wrong results or crash on their processor. With
 * neither, an AVX-512 CPU gets OpenBLAS's AVX-512 kernels by name
 * (rlx_blas_pick_coretype): 0.3.21 (Debian 12) falls back to its slowest,
 * Prescott's SSE3 kernels, on x86 models it does not know, as on the H200
 * host's Xeon, where mnist-mlp-xl then trained 5× slower (BENCHMARKS.md). */
__attribute__ ((constructor)) static void
choose_coretype (void)
{
  const char *want = getenv ("RLX_BLAS_CORETYPE");
  const char *before = getenv ("OPENBLAS_CORETYPE");
  const char *coretype_set;

  /* Only at startup: setenv is not safe once other threads may read the
   * environment. */
  if (before != NULL)
    coretype_before = strdup (before);
  coretype_set = rlx_blas_pick_coretype (want, before, rlx_blas_cpu_avx512 ());
  coretype_auto = coretype_set != NULL && (want == NULL || *want == '\0');
  if (coretype_set != NULL)
    setenv ("OPENBLAS_CORETYPE", coretype_set, 1);
  /* OpenBLAS's pool threads spin (sched_yield) for 2^28 cycles after each
   * call before they sleep. A cohort rank runs its own passes between the
   * gradients' calls (the update, its apply and hash: ~1.4 ms a step for
   * mnist-mlp-xl on 2 cores), and those spinning threads took the cores
   * from them. 2^18 cycles (~0.1 ms) still spans the gaps between one
   * gradient's calls: on the dev machine a one-rank cohort of mnist-mlp-xl
   * at 256 went from 0.90 to 0.94× `rlx-rank bench` (BENCHMARKS.md), whose
   * own speed did not move. A value the environment sets is kept. */
  setenv ("OPENBLAS_THREAD_TIMEOUT", "18", 0);
}

/* ── fork while a BLAS call runs ──────────────────────────────────────────
 *
 * OpenBLAS (pthreads) registers a pthread_atfork prepare handler,
 * blas_thread_shutdown_, that stops its thread pool before every fork().
 * In 0.3.21 it does so even while another thread is inside a threaded call:
 * either the forking thread waits forever in pthread_join for a pool thread
 * that never sees the shutdown, or the call in flight loses its pool and
 * spins in exec_blas_async_wait forever. A process that trains and spawns
 * (the app adding a local rank, a test spawning rlx-rank) hung so.
 *
 * So the calls that use or start the pool (sgemm, set_num_threads) go
 * through the wrappers below, and a prepare handler registered after
 * OpenBLAS's (prepare handlers run last-registered first) lets the calls in
 * flight finish and holds new ones back until the fork is done: OpenBLAS
 * then stops an idle pool, which it restarts at the next threaded call. Calls from several threads still run side by side
 * (the CNN's two lanes). */
static GMutex fork_lock;
static GCond  fork_cond;
static guint  calls_in_flight;
static guint  forks_in_progress;

static void
blas_enter (void)
{
  g_mutex_lock (&fork_lock);
  while (forks_in_progress > 0)
    g_cond_wait (&fork_cond, &fork_lock);
  calls_in_flight++;
  g_mutex_unlock (&fork_lock);
}

static void
blas_leave (void)
{
  g_mutex_lock (&fork_lock);
  if (--calls_in_flight == 0)
    g_cond_broadcast (&fork_cond);
  g_mutex_unlock (&fork_lock);
}

static void
fork_prepare (void)
{
  g_mutex_lock (&fork_lock);
  forks_in_progress++;
  while (calls_in_flight > 0)
    g_cond_wait (&fork_cond, &fork_lock);
  g_mutex_unlock (&fork_lock);
}

static void
fork_parent (void)
{
  g_mutex_lock (&fork_lock);
  if (--forks_in_progress == 0)
    g_cond_broadcast (&fork_cond);
  g_mutex_unlock (&fork_lock);
}

/* The child has one thread: what other threads held is void there. */
static void
fork_child (void)
{
  g_mutex_init (&fork_lock);
  g_cond_init (&fork_cond);
  calls_in_flight = 0;
  forks_in_progress = 0;
}

static __typeof__ (cblas_sgemm) *real_sgemm;
static __typeof__ (openblas_set_num_threads) *real_set_num_threads;

static void
guarded_sgemm (OPENBLAS_CONST enum CBLAS_ORDER order, OPENBLAS_CONST enum CBLAS_TRANSPOSE ta,
               OPENBLAS_CONST enum CBLAS_TRANSPOSE tb, OPENBLAS_CONST blasint m,
               OPENBLAS_CONST blasint n, OPENBLAS_CONST blasint k, OPENBLAS_CONST float alpha,
               OPENBLAS_CONST float *a, OPENBLAS_CONST blasint lda, OPENBLAS_CONST float *b,
               OPENBLAS_CONST blasint ldb, OPENBLAS_CONST float beta, float *c,
               OPENBLAS_CONST blasint ldc)
{
  RlxFpScope fp = rlx_fp_scope_begin_fast ();   /* and any pool thread it starts */

  blas_enter ();
  real_sgemm (order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  blas_leave ();
  rlx_fp_scope_end (fp);
}

/* It may start pool threads, which take this thread's mode: fast. */
static void
guarded_set_num_threads (int n)
{
  RlxFpScope fp = rlx_fp_scope_begin_fast ();

  blas_enter ();
  real_set_num_threads (n);
  blas_leave ();
  rlx_fp_scope_end (fp);
}

static gpointer
blas_load (gpointer data)
{
  RlxBlas *blas = g_new0 (RlxBlas, 1);
  /* OpenBLAS starts its pool threads as it loads, and they keep the mode
   * they start with (no CONSISTENT_FPCSR in Debian's build): fast, as the
   * GEMMs of the training arithmetic are (core/util/rlx-fp-mode.h) */
  RlxFpScope fp = rlx_fp_scope_begin_fast ();
  void *lib = dlopen (BLAS_SONAME, RTLD_NOW | RTLD_LOCAL);

  rlx_fp_scope_end (fp);

  if (lib == NULL)
    g_error ("cannot load OpenBLAS (%s): %s; install the Debian package %s",
             BLAS_SONAME, dlerror (), BLAS_PACKAGE);
  blas->sgemm = (__typeof__ (blas->sgemm)) dlsym (lib, "cblas_sgemm");
  blas->set_num_threads = (__typeof__ (blas->set_num_threads)) dlsym (lib, "openblas_set_num_threads");
  blas->get_num_threads = (__typeof__ (blas->get_num_threads)) dlsym (lib, "openblas_get_num_threads");
  blas->get_config = (__typeof__ (blas->get_config)) dlsym (lib, "openblas_get_config");
  blas->get_corename = (__typeof__ (blas->get_corename)) dlsym (lib, "openblas_get_corename");
  if (!blas->sgemm || !blas->set_num_threads || !blas->get_num_threads ||
      !blas->get_config || !blas->get_corename)
    g_error ("%s lacks cblas_sgemm or the openblas_* functions; install the Debian package %s",
             BLAS_SONAME, BLAS_PACKAGE);
  /* OpenBLAS registered its fork handler when it was loaded, just now. */
  real_sgemm = blas->sgemm;
  real_set_num_threads = blas->set_num_threads;
  blas->sgemm = guarded_sgemm;
  blas->set_num_threads = guarded_set_num_threads;
  if (pthread_atfork (fork_prepare, fork_parent, fork_child) != 0)
    g_error ("pthread_atfork failed: OpenBLAS could not be made safe to fork around");
  if (coretype_auto)
    blas->name = g_strdup_printf ("%s, %s kernels (chosen for this AVX-512 CPU; "
                                  "OPENBLAS_CORETYPE or RLX_BLAS_CORETYPE picks others)",
                                  blas->get_config (), blas->get_corename ());
  else
    blas->name = g_strdup_printf ("%s, %s kernels%s%s%s", blas->get_config (),
                                  blas->get_corename (),
                                  coretype_before ? " (OPENBLAS_CORETYPE was " : "",
                                  coretype_before ? coretype_before : "",
                                  coretype_before ? ")" : "");
  return blas;
}

const RlxBlas *
rlx_blas (void)
{
  static GOnce once = G_ONCE_INIT;

  return g_once (&once, blas_load, NULL);
}
