/* rlx-blas.c — OpenBLAS, loaded at first use (see rlx-blas-private.h) */
#include "rlx-config.h"
#include "rlx-blas-private.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define BLAS_SONAME  "libopenblas.so.0"
#define BLAS_PACKAGE "libopenblas0-pthread"

/* What OPENBLAS_CORETYPE was before the constructor, for rlx_blas ()->name. */
static char *coretype_before;

/* OpenBLAS reads OPENBLAS_CORETYPE when it is loaded, which is why it is
 * dlopen'ed here rather than linked. RLX_BLAS_CORETYPE (e.g. "SkylakeX")
 * picks its kernels for rlx-cluster alone. A coretype the environment already
 * sets is respected: machines set it because some OpenBLAS builds choose
 * kernels that compute wrong results or crash on their processor. */
__attribute__ ((constructor)) static void
choose_coretype (void)
{
  const char *want = getenv ("RLX_BLAS_CORETYPE");
  const char *before = getenv ("OPENBLAS_CORETYPE");

  /* Only at startup: setenv is not safe once other threads may read the
   * environment. */
  if (before != NULL)
    coretype_before = strdup (before);
  if (want != NULL && *want != '\0')
    setenv ("OPENBLAS_CORETYPE", want, 1);
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
  blas_enter ();
  real_sgemm (order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  blas_leave ();
}

/* It may start pool threads. */
static void
guarded_set_num_threads (int n)
{
  blas_enter ();
  real_set_num_threads (n);
  blas_leave ();
}

static gpointer
blas_load (gpointer data)
{
  RlxBlas *blas = g_new0 (RlxBlas, 1);
  void *lib = dlopen (BLAS_SONAME, RTLD_NOW | RTLD_LOCAL);

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
  blas->name = g_strdup_printf ("%s, %s kernels%s%s%s", blas->get_config (), blas->get_corename (),
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
