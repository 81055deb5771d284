/* rlx-vk-tunables.c — every environment switch of the Vulkan backend, read
 * here and nowhere else in gpu/, with the table that documents them
 *
 * The defaults are what BENCHMARKS.md measured fastest on an H200; the
 * comments beside them say with which figures. A trainer reads them when
 * it is made (rlx_vk_trainer_new), so a test may change them between two
 * trainers. Threads: see rlx-vk-tunables.h.
 */
#include "rlx-config.h"
#include "rlx-vk-tunables.h"
#include "rlx-vk-memory.h"

#include <stdio.h>
#include <string.h>

/* 8×4 per thread: on the H200 an 8×8 block ran ten times slower (2 against
 * 28 TFLOP/s, BENCHMARKS.md): its vec4 accumulator array goes to local
 * memory there (gemm2.comp keeps 8×8 in named registers instead) */
static const GemmCfg CFG_BIG    = { 128, 128, 16, 8, 4 };

/* threads a split-K GEMM should keep busy (RLX_VK_FILL_THREADS overrides):
 * on the H200, mnist-mlp-xl 8192's weight gradients (BENCHMARKS.md) ran at
 * 2.50M samples/s with 512k or 256k against 2.46M with 128k, whose 280
 * workgroups for dW1 left a third of the last wave idle */
#define FILL_THREADS  (512u * 1024u)

/* RLX_VK_CNN_IMPLICIT: "forward" (conv2 forward and weight gradient read
 * pool1 through im2col addressing, no column matrix), "data" (pool1's
 * gradient straight from conv2's output gradient, no column gradient), both
 * ("1", "all", "forward,data"), or neither ("0", "none").
 * Default "forward": on the H200 at batch 1024 (BENCHMARKS.md) it ran at
 * 903k samples/s against 890k for "none" (forward GEMM 136 µs instead of
 * im2col 133 + GEMM 95, weight gradient 196 µs instead of 118), while the
 * implicit data gradient (a 200704×16×288 GEMM on 64×16 tiles) took 858 µs
 * against 362 µs for column gradient + col2im: 585k samples/s. */
#define CNN_IMPLICIT_DEFAULT CNN_IMPLICIT_FORWARD

/* RLX_VK_GEMM_BIG, RLX_VK_CNN_{FWD,WGRAD,DCOL}_TILE = bm,bn,bk,tm,tn: GEMM
 * tile overrides for tuning (the big tile; conv2's forward, weight-gradient
 * and column-gradient GEMMs); "auto" (not for the big tile) leaves the
 * choice to choose_cfg; @cfg is left alone when unset or invalid. */
static void
tile_from_env (const char *name, GemmCfg *cfg)
{
  const char *s = g_getenv (name);
  guint v[5];

  if (s == NULL || *s == '\0')
    return;
  if (g_strcmp0 (s, "auto") == 0 && g_strcmp0 (name, "RLX_VK_GEMM_BIG") != 0)
    {
      *cfg = (GemmCfg) { 0 };
      return;
    }
  if (sscanf (s, "%u,%u,%u,%u,%u", &v[0], &v[1], &v[2], &v[3], &v[4]) == 5 &&
      v[0] > 0 && v[1] > 0 && v[2] > 0 && v[3] > 0 && v[4] > 0 &&
      v[3] % 4 == 0 && v[4] % 4 == 0 && v[0] % v[3] == 0 && v[1] % v[4] == 0 &&
      (v[0] / v[3]) * (v[1] / v[4]) <= 1024 &&
      (v[0] * v[2]) % ((v[0] / v[3]) * (v[1] / v[4])) == 0 &&
      (v[1] * v[2]) % ((v[0] / v[3]) * (v[1] / v[4])) == 0)
    *cfg = (GemmCfg) { v[0], v[1], v[2], v[3], v[4] };
  else
    g_warning ("%s=%s is not a valid bm,bn,bk,tm,tn tile (tm, tn multiples of 4 dividing bm, bn; "
               "bm*bk and bn*bk multiples of the thread count); using the default", name, s);
}

/* the H200 at mnist-mlp-xl 8192 (BENCHMARKS.md): bar 2.46M samples/s,
 * wc 2.29M, cached 2.27M; mnist-mlp 1024: 5.37M, 4.97M, 4.87M */
#define UPLOAD_DEFAULT UPLOAD_BAR

/* The index in @names of environment variable @var's value; unset or
 * empty: @dflt; anything else: @dflt, with a warning that lists the names
 * if @warn. */
static guint
env_choice (const char *var, const char *const *names, guint n, guint dflt, gboolean warn)
{
  const char *v = g_getenv (var);
  g_autofree char *list = NULL;

  if (v == NULL || *v == '\0')
    return dflt;
  for (guint i = 0; i < n; i++)
    if (g_str_equal (v, names[i]))
      return i;
  if (!warn)
    return dflt;
  list = g_strjoinv (", ", (char **) names);
  g_warning ("%s=%s: use one of %s; using %s", var, v, list, names[dflt]);
  return dflt;
}

/* Environment variable @var as a whole number in [@lo, @hi]; unset or
 * empty: @dflt; anything else (not a number, out of range): @dflt with a
 * warning that says what was expected. */
static guint64
env_uint (const char *var, guint64 lo, guint64 hi, guint64 dflt)
{
  const char *v = g_getenv (var);
  guint64 x;

  if (v == NULL || *v == '\0')
    return dflt;
  if (!g_ascii_string_to_unsigned (v, 10, lo, hi, &x, NULL))
    {
      g_warning ("%s=%s: use a whole number in %" G_GUINT64_FORMAT "..%" G_GUINT64_FORMAT
                 "; using %" G_GUINT64_FORMAT, var, v, lo, hi, dflt);
      return dflt;
    }
  return x;
}

static guint
upload_from_env (void)
{
  /* in the order of UPLOAD_* */
  static const char *const names[] = { "wc", "cached", "bar", NULL };

  return env_choice ("RLX_VK_UPLOAD", names, 3, UPLOAD_DEFAULT, TRUE);
}

/* RLX_VK_CNN: "direct" (the default) runs mnist-cnn on the fused direct
 * convolution shaders (cnn1, cnn2, cnn2w, cnn1w); "gemm" on the earlier
 * path of GEMMs, im2col and col2im, which the RLX_VK_CNN_IMPLICIT,
 * RLX_VK_CNN_COL2IM and RLX_VK_CNN_*_TILE switches tune. */
gboolean
rlx_vk_tunable_cnn_direct (gboolean warn)
{
  static const char *const names[] = { "gemm", "direct", NULL };

  return env_choice ("RLX_VK_CNN", names, 2, 1, warn) == 1;
}

/* RLX_VK_CNN_COL2IM: "pooled" gathers pool1's gradient from the column
 * gradient once per pooled value (poolgrad MODE 3), "pixel" once per
 * pre-pool pixel (MODE 1). Same sums in the same order: same bits. */
#define CNN_POOLED_DEFAULT TRUE

static gboolean
cnn_pooled_from_env (void)
{
  static const char *const names[] = { "pixel", "pooled", NULL };

  return env_choice ("RLX_VK_CNN_COL2IM", names, 2, CNN_POOLED_DEFAULT, TRUE) == 1;
}

static guint
cnn_implicit_from_env (void)
{
  const char *v = g_getenv ("RLX_VK_CNN_IMPLICIT");
  g_auto(GStrv) parts = NULL;
  guint out = 0;

  if (v == NULL || *v == '\0')
    return CNN_IMPLICIT_DEFAULT;
  if (strcmp (v, "0") == 0 || strcmp (v, "none") == 0)
    return 0;
  if (strcmp (v, "1") == 0 || strcmp (v, "all") == 0)
    return CNN_IMPLICIT_FORWARD | CNN_IMPLICIT_DATA;
  parts = g_strsplit (v, ",", -1);
  for (guint i = 0; parts[i] != NULL; i++)
    {
      if (strcmp (parts[i], "forward") == 0)
        out |= CNN_IMPLICIT_FORWARD;
      else if (strcmp (parts[i], "data") == 0)
        out |= CNN_IMPLICIT_DATA;
      else
        {
          g_warning ("RLX_VK_CNN_IMPLICIT=%s: use forward, data, all or none; using the default", v);
          return CNN_IMPLICIT_DEFAULT;
        }
    }
  return out;
}

void
rlx_vk_tunables_read (RlxVkTunables *t)
{
  static const char *const off_on[] = { "0", "1", NULL };
  static const char *const cic[] = { "4", "8", NULL };
  static const char *const fill[] = { "gather", "scatter", NULL };

  memset (t, 0, sizeof *t);
  t->big = CFG_BIG;
  t->lose_at = env_uint ("RLX_VK_SIMULATE_DEVICE_LOST", 1, G_MAXUINT64, 0);
  tile_from_env ("RLX_VK_GEMM_BIG", &t->big);
  /* conv2's GEMMs at batch 1024 on the H200 (RLX_VK_CNN_*_TILE sweep, see
   * BENCHMARKS.md): the column gradient 200704×144×32 on 64×48×12 tiles
   * (144 = 3×48: no padded columns; the generic 128×128 tile computed 256),
   * the weight gradient 32×144×200704 on one 32×144×18 tile per split
   * instead of three 32×64 ones (192 columns), the forward on 128×32×8. With
   * the pooled col2im: 1.07M against 0.90M samples/s. */
  t->dcol = (GemmCfg) { 64, 48, 12, 4, 4 };
  t->wgrad2 = (GemmCfg) { 32, 144, 18, 4, 4 };
  t->fwd2 = (GemmCfg) { 128, 32, 8, 8, 4 };
  tile_from_env ("RLX_VK_CNN_DCOL_TILE", &t->dcol);
  tile_from_env ("RLX_VK_CNN_FWD_TILE", &t->fwd2);
  tile_from_env ("RLX_VK_CNN_WGRAD_TILE", &t->wgrad2);
  t->cnn_implicit = cnn_implicit_from_env ();
  t->cnn_pooled = cnn_pooled_from_env ();
  t->cnn_direct = rlx_vk_tunable_cnn_direct (TRUE);
  t->upload = upload_from_env ();
  /* large GEMMs on gemm2.comp unless RLX_VK_GEMM2=0: on the H200 at
   * mnist-mlp-xl 8192 (BENCHMARKS.md) its forward GEMMs took 379 / 488 µs
   * against 404 / 513 on gemm.comp's big tile, the data gradient 474
   * against 513: 2.56-2.57M samples/s against 2.50-2.51M */
  t->gemm2 = env_choice ("RLX_VK_GEMM2", off_on, 2, 1, TRUE) == 1;
  t->cm_vec = env_choice ("RLX_VK_CM_VEC", off_on, 2, 1, TRUE) == 1;
  t->cm_split = env_choice ("RLX_VK_CM_SPLIT", off_on, 2, 1, TRUE) == 1;
  {
    static const char *const bks[] = { "32", "64", NULL };
    /* 64 on the H200 at mnist-mlp-xl 8192 (BENCHMARKS.md, issue 27): the
     * forward GEMMs 155 / 185 µs against 168 / 202, the step 5.52 M
     * against 5.38 M samples/s, same rounds */
    t->cm_bk = env_choice ("RLX_VK_CM_BK", bks, 2, 1, TRUE) == 1 ? 64 : 32;
  }
  {
    static const char *const tiles[] = { "128x128", "256x128", "128x256", NULL };
    t->cm_tile = env_choice ("RLX_VK_CM_TILE", tiles, N_CM_TILES, CM_TILE_128X128, TRUE);
  }
  t->cm_half = env_choice ("RLX_VK_CM_HALF", off_on, 2, 1, TRUE) == 1;
  t->split_submit = env_choice ("RLX_VK_SPLIT_SUBMIT", off_on, 2, 1, TRUE) == 1;
  /* a lone leader's next finish submitted ahead (rlx_vk_trainer_round_expect_alone) */
  t->presub_env = env_choice ("RLX_VK_PRESUBMIT", off_on, 2, 1, TRUE) == 1;
  t->fold_last = env_choice ("RLX_VK_FOLD_LAST", off_on, 2, 1, TRUE) == 1;
  t->lone_env = env_choice ("RLX_VK_LONE", off_on, 2, 1, TRUE) == 1;
  t->lone_direct = env_choice ("RLX_VK_LONE_DIRECT", off_on, 2, 1, TRUE) == 1;
  t->early_env = env_choice ("RLX_VK_EARLY", off_on, 2, 1, TRUE) == 1;
  t->fold_env = env_choice ("RLX_VK_FOLD_CHECK", off_on, 2, 1, TRUE) == 1;
  /* the trainer lowers it to the device's limit; RLX_VK_TEST_MAX_GROUPS_X
   * lowers it further so that the tests reach the reduce's z blocks at
   * small sizes */
  t->max_groups_x = (guint) env_uint ("RLX_VK_TEST_MAX_GROUPS_X", 1, G_MAXUINT, G_MAXUINT);
  t->fill_threads = env_uint ("RLX_VK_FILL_THREADS", 1024, 16u << 20, FILL_THREADS);
  /* the direct CNN's knobs, chosen on the H200 at batch 1024 (medians of
   * three interleaved 1 s runs, BENCHMARKS.md): cnn2w on 128 workgroups
   * (2.35M samples/s; 256: 2.32M, 512: 2.23M: fewer leave SMs to cnn1w,
   * which runs beside it), cnn2 staging 4 input channels' weights at a
   * time (8: 2.15M against 2.23M), cnn1w filling dZ2 by zeros + scatter
   * (gather: 2.01M against 2.16M). */
  t->cnn_w2_groups = (guint) env_uint ("RLX_VK_CNN_W2_GROUPS", 1, PART_FLOATS / 4640, 128);
  t->cnn2_cic = env_choice ("RLX_VK_CNN2_CIC", cic, 2, 0, TRUE) == 1 ? 8 : 4;
  t->cnn1w_scatter = env_choice ("RLX_VK_CNN1W_FILL", fill, 2, 1, TRUE) == 1;
  t->profile = g_getenv ("RLX_VK_PROFILE") != NULL;
  t->timeline = g_getenv ("RLX_VK_TIMELINE") != NULL;
}

gboolean
rlx_vk_tunable_validate (void)
{
  const char *v = g_getenv ("RLX_VK_VALIDATE");
  return v != NULL && *v != '\0' && strcmp (v, "0") != 0;
}

const char *
rlx_vk_tunable_library (void)
{
  const char *name = g_getenv ("RLX_VULKAN_LIBRARY");

  return name == NULL || *name == '\0' ? "libvulkan.so.1" : name;
}

/* ------------------------------------------------------------- the table
 *
 * Every variable read above (and core/rlx-backend.c's RLX_VK_RESIDENT,
 * which decides whether the backend uses the resident parameters at all).
 * tests/gpu/check-vk-tunables.py checks that the two agree. */

const RlxVkTunableDoc rlx_vk_tunable_docs[] = {
  { "RLX_VULKAN_LIBRARY", "libvulkan.so.1",
    "The Vulkan loader to dlopen. A file that does not exist makes the backend report "
    "\"no Vulkan loader\" (the tests use that)." },
  { "RLX_VK_VALIDATE", "unset",
    "1: run under the Khronos validation layer (vulkan-validationlayers); the instance "
    "is made with it, and its messages are printed and counted." },
  { "RLX_VK_PROFILE", "unset",
    "Set (to anything): a timestamp and a barrier after every dispatch; the mean GPU time "
    "of each is printed when the trainer is freed." },
  { "RLX_VK_TIMELINE", "unset",
    "Set (to anything): every submission bracketed by two timestamps; at exit, per kind "
    "of submission, the device's time on it and its idle time before it." },
  { "RLX_VK_SIMULATE_DEVICE_LOST", "unset",
    "N: the Nth step reports VK_ERROR_DEVICE_LOST instead of being submitted (tests)." },
  { "RLX_VK_RESIDENT", "1",
    "0: keep the parameters on the host (core/rlx-backend.c), with that reason in the "
    "roster." },
  { "RLX_VK_UPLOAD", "bar",
    "How the parameters reach the device each step: bar (the host writes mapped "
    "device-local memory, where the device has it), wc or cached (a staging buffer of that "
    "kind, copied by the GPU)." },
  { "RLX_VK_SPLIT_SUBMIT", "1",
    "0: one submission a step (default: models of at least 4 MiB submit the first "
    "layer's forward before the host has written the other layers)." },
  { "RLX_VK_GEMM2", "1",
    "0: large GEMMs on gemm.comp's big tile instead of gemm2.comp." },
  { "RLX_VK_CM_VEC", "1",
    "0: --compute f16's tensor-core GEMM reads its operands element by element, never as "
    "16-byte vectors." },
  { "RLX_VK_CM_SPLIT", "1",
    "0: --compute f16's tensor-core GEMM never splits K across workgroups." },
  { "RLX_VK_CM_BK", "64",
    "32: --compute f16's tensor-core GEMM advances k 32 at a time instead of 64 (twice the "
    "barriers, half the shared memory and staging registers)." },
  { "RLX_VK_CM_TILE", "128x128",
    "256x128 or 128x256: --compute f16's tensor-core GEMM tile (M×N; each of its 8 "
    "subgroups then owns 64×64 of it, against 64×32 in 128x128); k 32 deep where 64 would "
    "not fit the device's shared memory." },
  { "RLX_VK_CM_HALF", "1",
    "0: --compute f16's tensor-core GEMMs round their f32 operands to f16 themselves, each "
    "GEMM again, instead of reading the f16 copy one pass made after the operand's producer "
    "(mnist-mlp, mnist-mlp-xl)." },
  { "RLX_VK_GEMM_BIG", "128,128,16,8,4",
    "bm,bn,bk,tm,tn: replaces gemm.comp's big tile." },
  { "RLX_VK_FILL_THREADS", "524288",
    "Threads (1024..16777216) a split-K GEMM should keep busy." },
  { "RLX_VK_TEST_MAX_GROUPS_X", "the device's limit",
    "Lowers the workgroup grid's x limit, so that the tests reach the column sums' z "
    "blocks at small sizes." },
  { "RLX_VK_CNN", "direct",
    "mnist-cnn on the fused direct convolutions (direct) or on the older path of GEMMs, "
    "im2col and col2im (gemm), which the switches below tune." },
  { "RLX_VK_CNN_IMPLICIT", "forward",
    "gemm path: which parts of conv2 run as implicit GEMMs: forward (its forward pass and "
    "weight gradient), data (pool1's gradient), all (or 1), none (or 0)." },
  { "RLX_VK_CNN_COL2IM", "pooled",
    "gemm path: pool1's gradient gathered from the column gradient once per pooled value "
    "(pooled) or once per pixel (pixel); the same bits." },
  { "RLX_VK_CNN_FWD_TILE", "128,32,8,8,4",
    "gemm path: bm,bn,bk,tm,tn or auto (the generic choice) for conv2's forward GEMM." },
  { "RLX_VK_CNN_WGRAD_TILE", "32,144,18,4,4",
    "gemm path: the tile of conv2's weight-gradient GEMM (bm,bn,bk,tm,tn or auto)." },
  { "RLX_VK_CNN_DCOL_TILE", "64,48,12,4,4",
    "gemm path: the tile of conv2's column-gradient GEMM (bm,bn,bk,tm,tn or auto)." },
  { "RLX_VK_CNN_W2_GROUPS", "128",
    "direct path: workgroups of cnn2w (conv2's weight gradient)." },
  { "RLX_VK_CNN2_CIC", "4",
    "direct path: input channels whose weights cnn2 stages at a time (4 or 8)." },
  { "RLX_VK_CNN1W_FILL", "scatter",
    "direct path: cnn1w fills dZ2 by zeros and a scatter (scatter) or by a gather." },
  { "RLX_VK_FOLD_LAST", "1",
    "0: fold a pass's per-workgroup maxima in a wire_max dispatch of its own instead of by "
    "the pass's last workgroup (for comparisons)." },
  { "RLX_VK_PRESUBMIT", "1",
    "0: a lone leader never makes its next round's update on the device ahead of time, "
    "behind its own gradient (undone from a device-side backup when that round turns out "
    "otherwise; models of at most 4 MiB of parameters)." },
  { "RLX_VK_LONE", "1",
    "0: finish a lone leader's f32 round in the general passes (update, quantise and "
    "apply, hash) instead of the one pass round_lone.comp (up to 1 M parameters)." },
  { "RLX_VK_LONE_DIRECT", "1",
    "0: copy that one pass's summary to the host after it instead of having the pass "
    "write it there." },
  { "RLX_VK_EARLY", "1",
    "0: a lone leader does not queue the gradient of the round after next behind the "
    "next round's update made in one pass." },
  { "RLX_VK_FOLD_CHECK", "1",
    "0: that gradient is queued with its own check pass instead of being checked by the "
    "one pass behind it (largest |g|, non-finite elements, the loss)." },
};
const guint rlx_vk_n_tunable_docs = G_N_ELEMENTS (rlx_vk_tunable_docs);
