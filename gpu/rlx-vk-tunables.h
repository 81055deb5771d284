/* rlx-vk-tunables.h — the Vulkan backend's environment switches, read in one
 * place (rlx-vk-tunables.c) and listed in one table (rlx_vk_tunable_docs,
 * from which docs/ENVIRONMENT.md is written)
 *
 * Private to gpu/. Threads: the functions only read the environment and
 * may run on any thread; a trainer reads its RlxVkTunables once, on the
 * thread that makes it (rlx_vk_trainer_new), and from then on they are the
 * trainer's, owned by the thread that uses it (the rank's compute worker).
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* A GEMM tile: bm×bn outputs a workgroup, bk along k a step, tm×tn a thread. */
typedef struct {
  guint bm, bn, bk, tm, tn;
} GemmCfg;

/* How the parameters reach the device each step (RLX_VK_UPLOAD): copied
 * by the GPU from a host-visible staging buffer that is write-combined
 * ("wc") or cached ("cached"), or written by the host straight into
 * device-local memory it maps ("bar", the default, where the device offers
 * such memory; otherwise "wc"). */
enum { UPLOAD_WC, UPLOAD_CACHED, UPLOAD_BAR };

/* Which parts of conv2 run as implicit GEMMs (RLX_VK_CNN_IMPLICIT). */
enum { CNN_IMPLICIT_FORWARD = 1, CNN_IMPLICIT_DATA = 2 };

/* gemm_cm.comp's tiles (RLX_VK_CM_TILE), in rlx_vkt_cfg_cm[]'s order */
enum { CM_TILE_128X128, CM_TILE_256X128, CM_TILE_128X256, N_CM_TILES };

/* What the environment asked a trainer for (the defaults where it asked
 * nothing, or nothing valid: an invalid value is warned about once). */
typedef struct {
  guint64  lose_at;       /* RLX_VK_SIMULATE_DEVICE_LOST: the step that reports a lost device */
  GemmCfg  big;           /* the big GEMM tile, or RLX_VK_GEMM_BIG=bm,bn,bk,tm,tn */
  GemmCfg  dcol;          /* RLX_VK_CNN_DCOL_TILE; bm = 0: choose_cfg */
  GemmCfg  fwd2;          /* RLX_VK_CNN_FWD_TILE; bm = 0: choose_cfg */
  GemmCfg  wgrad2;        /* RLX_VK_CNN_WGRAD_TILE; bm = 0: choose_cfg */
  guint    cnn_implicit;  /* CNN_IMPLICIT_*: RLX_VK_CNN_IMPLICIT */
  gboolean cnn_pooled;    /* RLX_VK_CNN_COL2IM: poolgrad MODE 3 */
  gboolean cnn_direct;    /* RLX_VK_CNN: fused direct convolutions */
  guint    upload;        /* UPLOAD_*: RLX_VK_UPLOAD (the trainer falls back to wc) */
  gboolean gemm2;         /* large GEMMs on gemm2.comp (RLX_VK_GEMM2=0: not) */
  gboolean cm_split;      /* ... and splits K across workgroups as the f32 GEMMs do
                           * (RLX_VK_CM_SPLIT=0: never) */
  gboolean cm_vec;        /* --compute f16: gemm_cm.comp reads 16-byte vectors where it
                           * can (RLX_VK_CM_VEC=0: never) */
  guint    cm_bk;         /* ... its k slice, 32 or 64 (RLX_VK_CM_BK) */
  guint    cm_tile;       /* ... its tile, CM_TILE_* (RLX_VK_CM_TILE) */
  gboolean cm_half;       /* ... its operands rounded to f16 once, where they are made
                           * (RLX_VK_CM_HALF=0: by every GEMM that reads them) */
  gboolean split_submit;  /* RLX_VK_SPLIT_SUBMIT=0: one submission a step */
  gboolean presub_env;    /* RLX_VK_PRESUBMIT=0: never a lone leader's update made ahead */
  gboolean fold_last;     /* passes fold by their last workgroup (RLX_VK_FOLD_LAST=0:
                           * by a wire_max dispatch behind a barrier, as before) */
  gboolean lone_env;      /* a lone leader's f32 round in one pass (RLX_VK_LONE=0: never) */
  gboolean lone_direct;   /* ... writing its summary where the host reads it
                           * (RLX_VK_LONE_DIRECT=0: copied there after it) */
  gboolean early_env;     /* the gradient after next queued early (RLX_VK_EARLY=0: never) */
  gboolean fold_env;      /* ... without its check, folded in (RLX_VK_FOLD_CHECK=0: never) */
  guint    max_groups_x;  /* RLX_VK_TEST_MAX_GROUPS_X, G_MAXUINT unset (the device's limit) */
  guint64  fill_threads;  /* threads a split-K GEMM keeps busy (RLX_VK_FILL_THREADS) */
  guint    cnn_w2_groups; /* RLX_VK_CNN_W2_GROUPS: cnn2w workgroups */
  guint32  cnn2_cic;      /* RLX_VK_CNN2_CIC: cnn2.comp CIC (4 or 8) */
  guint32  cnn1w_scatter; /* RLX_VK_CNN1W_FILL: cnn1w.comp SCATTER */
  gboolean profile;       /* RLX_VK_PROFILE set (to anything) */
  gboolean timeline;      /* RLX_VK_TIMELINE set (to anything) */
} RlxVkTunables;

/* Reads every trainer switch into @out, warning once about each invalid one. */
void        rlx_vk_tunables_read (RlxVkTunables *out);
/* RLX_VK_CNN alone (for the memory plan, which has no trainer): whether
 * mnist-cnn runs on the direct path; @warn: warn about an invalid value. */
gboolean    rlx_vk_tunable_cnn_direct (gboolean warn);
/* RLX_VK_VALIDATE set, non-empty and not "0" (read when the instance is made). */
gboolean    rlx_vk_tunable_validate (void);
/* RLX_VULKAN_LIBRARY, or "libvulkan.so.1" when unset or empty. */
const char *rlx_vk_tunable_library (void);

/* One switch, for the documentation: its name, its default (as a person
 * writes it), and what it does. */
typedef struct {
  const char *name;
  const char *dflt;
  const char *description;
} RlxVkTunableDoc;

/* Every environment variable gpu/ reads, in the order of the table in
 * docs/ENVIRONMENT.md; rlx_vk_n_tunable_docs entries. */
extern const RlxVkTunableDoc rlx_vk_tunable_docs[];
extern const guint           rlx_vk_n_tunable_docs;

G_END_DECLS
