/* test-blas.c — which OpenBLAS kernels rlx-cluster asks for before it loads
 * the library (core/vision/rlx-blas.c): the rule itself, and the real
 * library as a fresh process loads it under each environment. */
#include "rlx-config.h"

#include <string.h>

#include "core/vision/rlx-blas-private.h"

/* RLX_BLAS_CORETYPE wins; a set OPENBLAS_CORETYPE is kept; else AVX-512
 * CPUs get OpenBLAS's AVX-512 kernels by name, others nothing. */
static void
test_pick (void)
{
  g_assert_cmpstr (rlx_blas_pick_coretype (NULL, NULL, RLX_BLAS_AVX512_BF16), ==, "Cooperlake");
  g_assert_cmpstr (rlx_blas_pick_coretype (NULL, NULL, RLX_BLAS_AVX512), ==, "SkylakeX");
  g_assert_null (rlx_blas_pick_coretype (NULL, NULL, RLX_BLAS_AVX512_NONE));
  g_assert_cmpstr (rlx_blas_pick_coretype ("", "", RLX_BLAS_AVX512), ==, "SkylakeX");
  g_assert_null (rlx_blas_pick_coretype (NULL, "Haswell", RLX_BLAS_AVX512_BF16));
  g_assert_null (rlx_blas_pick_coretype ("", "Prescott", RLX_BLAS_AVX512));
  g_assert_cmpstr (rlx_blas_pick_coretype ("Zen", "Haswell", RLX_BLAS_AVX512_BF16), ==, "Zen");
  g_assert_cmpstr (rlx_blas_pick_coretype ("Haswell", NULL, RLX_BLAS_AVX512_NONE), ==, "Haswell");
}

/* In a child started with @var=@value (NULL: neither variable), OpenBLAS
 * loads with the kernels @want names ("auto": this CPU's pick). The child
 * is this same test, which prints the library's name. */
static void
check_child (const char *var, const char *value, const char *want)
{
  g_autofree char *expect = NULL;
  const char *pick = rlx_blas_pick_coretype (NULL, NULL, rlx_blas_cpu_avx512 ());

  if (g_test_subprocess ())
    {
      g_print ("%s\n", rlx_blas ()->name);
      return;
    }
  g_unsetenv ("RLX_BLAS_CORETYPE");
  g_unsetenv ("OPENBLAS_CORETYPE");
  if (var != NULL)
    g_setenv (var, value, TRUE);
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_INHERIT_STDERR);
  if (var != NULL)
    g_unsetenv (var);
  g_test_trap_assert_passed ();
  if (g_strcmp0 (want, "auto") == 0)
    {
      if (pick == NULL)
        {
          g_test_message ("no AVX-512 here: OpenBLAS chooses for itself");
          g_test_trap_assert_stdout_unmatched ("*chosen for this AVX-512 CPU*");
          return;
        }
      expect = g_strdup_printf ("*, %s kernels (chosen for this AVX-512 CPU;*", pick);
    }
  else
    expect = g_strdup_printf ("*, %s kernels*", want);
  g_test_trap_assert_stdout (expect);
}

/* neither variable: this CPU's pick */
static void
test_load_default (void)
{
  check_child (NULL, NULL, "auto");
}

/* a machine's pin is kept, and said */
static void
test_load_openblas_env (void)
{
  check_child ("OPENBLAS_CORETYPE", "Haswell", "Haswell");
  if (!g_test_subprocess ())
    g_test_trap_assert_stdout ("*(OPENBLAS_CORETYPE was Haswell)*");
}

/* ours wins */
static void
test_load_rlx_env (void)
{
  check_child ("RLX_BLAS_CORETYPE", "Haswell", "Haswell");
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/vision/blas/pick", test_pick);
  g_test_add_func ("/vision/blas/load/default", test_load_default);
  g_test_add_func ("/vision/blas/load/openblas-coretype", test_load_openblas_env);
  g_test_add_func ("/vision/blas/load/rlx-blas-coretype", test_load_rlx_env);
  return g_test_run ();
}
