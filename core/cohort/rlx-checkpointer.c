/* rlx-checkpointer.c — see rlx-checkpointer.h */
#include "rlx-config.h"
#include "rlx-checkpointer.h"
#include "core/rlx-coordinator.h"
#include "core/rlx-safetensors.h"
#include "core/cohort/rlx-outer.h"

#include <errno.h>
#include <glib/gstdio.h>
#include <string.h>

struct _RlxCheckpointer {
  GObject         parent_instance;
  char           *dir, *path, *cohort;
  const RlxModel *model;
  RlxDataset     *dataset;
  GCancellable   *cancellable;
  gboolean        busy;            /* a save is being made */
  gboolean        again;           /* save once more when it lands */
  RlxReplica     *again_replica;
  double          again_lr;
  char           *outer_path;      /* checkpoint.outer */
  RlxComputeQueue *queue;          /* whose worker may hold an outer momentum */
  RlxOuterSettings outer;
  RlxPrecision    outer_precision;
  guint64         saved_step;
  guint64         lineage;         /* of the state saved (0: none) */
};

G_DEFINE_FINAL_TYPE (RlxCheckpointer, rlx_checkpointer, G_TYPE_OBJECT)

enum { SIG_WRITTEN, SIG_FAILED, N_SIGNALS };
static guint signals[N_SIGNALS];

/* One save: the parameters copied out of the replica, then the file. */
typedef struct {
  RlxCheckpointer *self;           /* a reference */
  const RlxModel  *model;
  char            *path;
  float           *params;
  float           *momentum;       /* the worker's outer momentum at the copy, or NULL */
  GBytes          *outer;          /* its serialised outer state */
  char            *outer_path;
  RlxComputeQueue *queue;
  RlxOuterSettings settings;
  RlxPrecision     precision;
  GHashTable      *metadata;
  guint64          step;
  gboolean         handed;         /* the writer owns it now */
} Save;

static void
save_free (gpointer p)
{
  Save *s = p;

  g_clear_object (&s->self);
  g_free (s->path);
  g_free (s->params);
  g_free (s->momentum);
  g_clear_pointer (&s->outer, g_bytes_unref);
  g_free (s->outer_path);
  g_clear_pointer (&s->metadata, g_hash_table_unref);
  g_free (s);
}

static void
rlx_checkpointer_dispose (GObject *object)
{
  RlxCheckpointer *self = RLX_CHECKPOINTER (object);

  g_cancellable_cancel (self->cancellable);
  g_clear_object (&self->again_replica);
  G_OBJECT_CLASS (rlx_checkpointer_parent_class)->dispose (object);
}

static void
rlx_checkpointer_finalize (GObject *object)
{
  RlxCheckpointer *self = RLX_CHECKPOINTER (object);

  g_free (self->dir);
  g_free (self->path);
  g_free (self->outer_path);
  g_free (self->cohort);
  g_clear_object (&self->cancellable);
  g_clear_pointer (&self->dataset, rlx_dataset_unref);
  G_OBJECT_CLASS (rlx_checkpointer_parent_class)->finalize (object);
}

static void
rlx_checkpointer_class_init (RlxCheckpointerClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->dispose = rlx_checkpointer_dispose;
  object_class->finalize = rlx_checkpointer_finalize;
  signals[SIG_WRITTEN] = g_signal_new ("written", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0,
                                       NULL, NULL, NULL, G_TYPE_NONE, 2, G_TYPE_UINT64,
                                       G_TYPE_STRING);
  signals[SIG_FAILED] = g_signal_new ("failed", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0,
                                      NULL, NULL, NULL, G_TYPE_NONE, 1, G_TYPE_STRING);
}

static void
rlx_checkpointer_init (RlxCheckpointer *self)
{
  self->cancellable = g_cancellable_new ();
}

RlxCheckpointer *
rlx_checkpointer_new (const char *dir, const char *cohort, const RlxModel *model,
                      RlxDataset *dataset, GError **error)
{
  g_autoptr(RlxCheckpointer) self = NULL;

  g_return_val_if_fail (dir != NULL && cohort != NULL && model != NULL && dataset != NULL, NULL);

  if (g_mkdir_with_parents (dir, 0700) != 0)
    {
      g_set_error (error, RLX_COORDINATOR_ERROR, RLX_COORDINATOR_ERROR_CHECKPOINT,
                   "cannot create the checkpoint folder %s: %s", dir, g_strerror (errno));
      return NULL;
    }
  self = g_object_new (RLX_TYPE_CHECKPOINTER, NULL);
  self->dir = g_strdup (dir);
  self->path = g_build_filename (dir, "checkpoint.safetensors", NULL);
  self->outer_path = g_build_filename (dir, "checkpoint.outer", NULL);
  self->cohort = g_strdup (cohort);
  self->model = model;
  self->dataset = rlx_dataset_ref (dataset);
  return g_steal_pointer (&self);
}

const char *
rlx_checkpointer_get_path (RlxCheckpointer *self)
{
  return self->path;
}

gboolean
rlx_checkpointer_busy (RlxCheckpointer *self)
{
  return self->busy || self->again;
}

guint64
rlx_checkpointer_get_saved_step (RlxCheckpointer *self)
{
  return self->saved_step;
}

static gboolean
md_uint (GHashTable *md, const char *key, guint64 max, guint64 *out)
{
  const char *s = g_hash_table_lookup (md, key);

  return s != NULL && g_ascii_string_to_unsigned (s, 10, 0, max, out, NULL);
}

gboolean
rlx_checkpointer_load (RlxCheckpointer *self, RlxCheckpoint *out, GError **error)
{
  g_autoptr(GHashTable) md = NULL;
  g_autoptr(GError) local = NULL;
  g_autofree float *params = NULL;
  guint64 step, epoch, pos, hash, seed, chunk;
  guint n_train = rlx_dataset_size (self->dataset, RLX_SPLIT_TRAIN);

  memset (out, 0, sizeof *out);
  params = rlx_safetensors_read (self->path, self->model, &md, &local);
  if (params == NULL)
    {
      if (g_error_matches (local, RLX_SAFETENSORS_ERROR, RLX_SAFETENSORS_ERROR_NOT_FOUND))
        return TRUE;
      g_set_error (error, RLX_COORDINATOR_ERROR, RLX_COORDINATOR_ERROR_CHECKPOINT,
                   "the checkpoint of cohort %s cannot be resumed: %s (use another --cohort "
                   "name, or remove the file)", self->cohort, local->message);
      return FALSE;
    }
  if (g_strcmp0 (g_hash_table_lookup (md, "model"), self->model->slug) != 0 ||
      g_strcmp0 (g_hash_table_lookup (md, "dataset"), rlx_dataset_slug (self->dataset)) != 0)
    {
      g_set_error (error, RLX_COORDINATOR_ERROR, RLX_COORDINATOR_ERROR_CHECKPOINT,
                   "the checkpoint %s holds %s on %s, not %s on %s (use another --cohort name)",
                   self->path, (char *) g_hash_table_lookup (md, "model"),
                   (char *) g_hash_table_lookup (md, "dataset"),
                   self->model->slug, rlx_dataset_slug (self->dataset));
      return FALSE;
    }
  /* The hash's chunk size: files from before it was recorded used
   * RLX_PARAMS_HASH_CHUNK_V1. */
  chunk = RLX_PARAMS_HASH_CHUNK_V1;
  if (!md_uint (md, "step", G_MAXINT64, &step) ||
      !md_uint (md, "epoch", G_MAXINT32, &epoch) ||
      !md_uint (md, "pos", n_train, &pos) ||
      !md_uint (md, "seed", G_MAXUINT64, &seed) ||
      (g_hash_table_contains (md, "hash_chunk") &&
       (!md_uint (md, "hash_chunk", 1 << 30, &chunk) || chunk == 0)) ||
      !rlx_msg_hash_parse (g_hash_table_lookup (md, "hash"), &hash) ||
      rlx_params_hash_with_chunk (params, self->model->n_params, chunk) != hash)
    {
      g_set_error (error, RLX_COORDINATOR_ERROR, RLX_COORDINATOR_ERROR_CHECKPOINT,
                   "the checkpoint %s has missing or inconsistent metadata (step, epoch, pos, "
                   "seed, hash); remove it or use another --cohort name", self->path);
      return FALSE;
    }
  if (chunk != RLX_PARAMS_HASH_CHUNK)
    hash = rlx_params_hash (params, self->model->n_params);
  /* the outer state beside it, when it belongs to these parameters */
  {
    g_autofree char *data = NULL;
    gsize len = 0;
    g_autoptr(RlxOuterState) st = NULL;
    g_autoptr(GError) oerr = NULL;

    if (g_file_get_contents (self->outer_path, &data, &len, NULL))
      {
        st = rlx_outer_state_parse ((const guint8 *) data, len, self->model->n_params, &oerr);
        if (st == NULL)
          g_warning ("%s is not used: %s", self->outer_path, oerr->message);
        else if (rlx_params_hash (st->params, st->n) != hash)
          g_warning ("%s is not used: it belongs to other parameters than %s",
                     self->outer_path, self->path);
        else
          out->momentum = g_steal_pointer (&st->mom);
      }
  }
  /* the lineage its state belongs to (absent in older files: a new one) */
  if (!rlx_msg_hash_parse (g_hash_table_lookup (md, "lineage"), &out->lineage))
    out->lineage = 0;
  {
    /* (after the read: a file renamed in since is newer, not older) */
    GStatBuf st;

    out->written_us = g_stat (self->path, &st) == 0
                        ? (gint64) st.st_mtim.tv_sec * G_USEC_PER_SEC + st.st_mtim.tv_nsec / 1000
                        : 0;
  }
  out->params = g_steal_pointer (&params);
  out->step = step;
  out->hash = hash;
  out->seed = seed;
  out->epoch = (guint) epoch;
  out->pos = (guint) (pos >= n_train ? 0 : pos);
  return TRUE;
}

static void
write_thread (GTask *task, gpointer source, gpointer task_data, GCancellable *cancellable)
{
  Save *s = task_data;
  GError *error = NULL;

  /* the outer state first (each file lands whole: write and rename); the
   * loader pairs them by θ's hash */
  if (s->outer != NULL)
    {
      if (!g_file_set_contents (s->outer_path, g_bytes_get_data (s->outer, NULL),
                                (gssize) g_bytes_get_size (s->outer), &error))
        {
          g_task_return_error (task, error);
          return;
        }
    }
  else
    (void) g_unlink (s->outer_path);
  if (rlx_safetensors_write (s->path, s->model, s->params, s->metadata, &error))
    g_task_return_boolean (task, TRUE);
  else
    g_task_return_error (task, error);
}

static void save_now (RlxCheckpointer *self, RlxReplica *replica, double lr);

static void
on_written (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Save *s = g_task_get_task_data (G_TASK (result));
  RlxCheckpointer *self = s->self;
  g_autoptr(GError) error = NULL;

  self->busy = FALSE;
  if (g_cancellable_is_cancelled (self->cancellable))
    return;
  if (!g_task_propagate_boolean (G_TASK (result), &error))
    {
      g_autofree char *msg = g_strdup_printf ("checkpoint not written: %s", error->message);
      g_signal_emit (self, signals[SIG_FAILED], 0, msg);
    }
  else
    {
      self->saved_step = s->step;
      g_signal_emit (self, signals[SIG_WRITTEN], 0, s->step, self->path);
    }
  if (self->again && self->again_replica)
    {
      g_autoptr(RlxReplica) r = g_steal_pointer (&self->again_replica);
      self->again = FALSE;
      save_now (self, r, self->again_lr);
    }
}

static void
copy_params (const float *params, gsize n, gpointer data)
{
  Save *s = data;
  const float *m = s->queue ? rlx_compute_queue_momentum_w (s->queue) : NULL;

  s->params = g_memdup2 (params, n * sizeof (float));
  /* (on the worker, which holds the momentum of the same moment) */
  if (m != NULL && s->settings.h > 0)
    s->momentum = g_memdup2 (m, n * sizeof (float));
}

/* The replica dropped the read (a snapshot replaced the state first). */
static void
save_dropped (gpointer p)
{
  Save *s = p;

  if (s->handed)
    return;
  s->self->busy = FALSE;
  save_free (s);
}

static void
on_copied (RlxReplica *replica, gboolean ok, gpointer user_data)
{
  Save *s = user_data;
  g_autoptr(GTask) task = g_task_new (NULL, s->self->cancellable, on_written, NULL);

  /* The replica's state now is the state of the copy (its operations
   * complete in order). */
  s->step = rlx_replica_get_step (replica);
  g_hash_table_insert (s->metadata, "step", g_strdup_printf ("%" G_GUINT64_FORMAT, s->step));
  g_hash_table_insert (s->metadata, "epoch", g_strdup_printf ("%u", rlx_replica_get_epoch (replica)));
  g_hash_table_insert (s->metadata, "pos", g_strdup_printf ("%u", rlx_replica_get_pos (replica)));
  g_hash_table_insert (s->metadata, "hash", rlx_msg_hash_to_string (rlx_replica_get_hash (replica)));
  g_hash_table_insert (s->metadata, "hash_chunk",
                       g_strdup_printf ("%" G_GSIZE_FORMAT, RLX_PARAMS_HASH_CHUNK));
  g_hash_table_insert (s->metadata, "seed",
                       g_strdup_printf ("%" G_GUINT64_FORMAT, rlx_replica_get_seed (replica)));
  if (s->momentum != NULL && s->params != NULL)
    {
      g_autoptr(GError) oerr = NULL;
      g_autoptr(RlxOuterState) st = rlx_outer_state_new (s->params, s->model->n_params,
                                                         s->settings.lr, s->settings.momentum,
                                                         s->precision, s->settings.h, &oerr);
      if (st != NULL)
        {
          memcpy (st->mom, s->momentum, s->model->n_params * sizeof (float));
          st->round = s->step;
          s->outer = rlx_outer_state_write (st, FALSE);
        }
      else
        g_warning ("the outer state is not saved: %s", oerr->message);
    }
  s->handed = TRUE;
  g_task_set_task_data (task, s, save_free);
  g_task_run_in_thread (task, write_thread);
}

static void
save_now (RlxCheckpointer *self, RlxReplica *replica, double lr)
{
  Save *s = g_new0 (Save, 1);
  GHashTable *md = g_hash_table_new_full (g_str_hash, g_str_equal, NULL, g_free);

  g_hash_table_insert (md, "format", g_strdup ("rlx-cluster checkpoint 1"));
  g_hash_table_insert (md, "cohort", g_strdup (self->cohort));
  g_hash_table_insert (md, "model", g_strdup (self->model->slug));
  g_hash_table_insert (md, "dataset", g_strdup (rlx_dataset_slug (self->dataset)));
  g_hash_table_insert (md, "lr", g_strdup_printf ("%g", lr));
  if (self->lineage != 0)
    g_hash_table_insert (md, "lineage", rlx_msg_hash_to_string (self->lineage));
  s->self = g_object_ref (self);
  s->model = self->model;
  s->path = g_strdup (self->path);
  s->outer_path = g_strdup (self->outer_path);
  s->queue = self->queue;
  s->settings = self->outer;
  s->precision = self->outer_precision;
  s->metadata = md;
  self->busy = TRUE;
  rlx_replica_read (replica, copy_params, s, save_dropped, on_copied, s);
}

void
rlx_checkpointer_set_outer (RlxCheckpointer *self, RlxComputeQueue *queue,
                            const RlxOuterSettings *settings, RlxPrecision precision)
{
  self->queue = queue;
  self->outer = *settings;
  self->outer_precision = precision;
}

void
rlx_checkpointer_set_lineage (RlxCheckpointer *self, guint64 lineage)
{
  self->lineage = lineage;
}

void
rlx_checkpointer_save (RlxCheckpointer *self, RlxReplica *replica, double lr)
{
  g_return_if_fail (RLX_IS_CHECKPOINTER (self));
  g_return_if_fail (RLX_IS_REPLICA (replica));

  if (self->busy)
    {
      /* One write at a time; the newest state is written after this one. */
      self->again = TRUE;
      g_set_object (&self->again_replica, replica);
      self->again_lr = lr;
      return;
    }
  save_now (self, replica, lr);
}
