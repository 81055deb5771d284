/* rlx-blas.c — OpenBLAS, loaded at first use (see rlx-blas-private.h) */
#include "rlx-config.h"
#include "rlx-blas-private.h"

#include <dlfcn.h>
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
