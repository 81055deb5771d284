/* rlx-replica.c — see rlx-replica.h */
#include "rlx-config.h"
#include "rlx-replica.h"
#include "core/rlx-kernels.h"
#include "rlx-serial.h"

#include <string.h>

#define HISTORY RLX_MSG_MAX_HASHES

struct _RlxReplica {
  GObject         parent_instance;
  const RlxModel *model;
  RlxDataset     *dataset;
  gsize           n;
  guint           n_train;
  guint64         seed;

  float          *params;
  guint64         step, hash;
  double          loss;
  guint           epoch, pos;

  /* hashes of steps history_from … history_from + history_len - 1, a ring */
  guint64         ring[HISTORY];
  guint64         history_from;
  guint           history_len;

  guint32        *perm;
  guint           perm_epoch;
  gboolean        perm_valid;

  RlxSerial      *serial;
  /* The replica's passes run beside the next gradient: on the job's own
   * thread only, so they take one core from the compute, not all. */
  RlxKernels     *kernels;
};

G_DEFINE_FINAL_TYPE (RlxReplica, rlx_replica, G_TYPE_OBJECT)

typedef enum { OP_APPLY, OP_LOAD, OP_LOAD_FLOATS, OP_READ, OP_CORRUPT } OpKind;

typedef struct {
  RlxReplica        *self;      /* not a reference: the serial never outlives it */
  OpKind             kind;
  guint64            step;
  RlxMsgArray        array;     /* update or snapshot parameters */
  float             *floats;    /* OP_LOAD_FLOATS, taken */
  guint64            hash;      /* OP_LOAD: expected; out: the new hash */
  guint              epoch, pos;
  gboolean           ok;
  RlxReplicaReadFunc read;
  gpointer           data;
  GDestroyNotify     free_data;
  RlxReplicaDone     done;
  gpointer           user_data;
} Op;

static void
op_free (gpointer p)
{
  Op *op = p;

  rlx_msg_array_clear (&op->array);
  g_free (op->floats);
  if (op->free_data)
    op->free_data (op->data);
  g_free (op);
}

static void
rlx_replica_dispose (GObject *object)
{
  RlxReplica *self = RLX_REPLICA (object);

  /* Waits for the running operation's thread part: it writes our buffers. */
  g_clear_pointer (&self->serial, rlx_serial_free);
  G_OBJECT_CLASS (rlx_replica_parent_class)->dispose (object);
}

static void
rlx_replica_finalize (GObject *object)
{
  RlxReplica *self = RLX_REPLICA (object);

  g_free (self->params);
  g_free (self->perm);
  g_clear_object (&self->kernels);
  g_clear_pointer (&self->dataset, rlx_dataset_unref);
  G_OBJECT_CLASS (rlx_replica_parent_class)->finalize (object);
}

static void
rlx_replica_class_init (RlxReplicaClass *klass)
{
  G_OBJECT_CLASS (klass)->dispose = rlx_replica_dispose;
  G_OBJECT_CLASS (klass)->finalize = rlx_replica_finalize;
}

static void
rlx_replica_init (RlxReplica *self)
{
  self->serial = rlx_serial_new ();
  self->kernels = rlx_kernels_new (1);
}

static void
history_reset (RlxReplica *self)
{
  self->history_from = self->step;
  self->history_len = 1;
  self->ring[self->step % HISTORY] = self->hash;
}

/* The state moved to (step, hash): remember it. A step that does not follow
 * the history starts a new one. */
static void
history_note (RlxReplica *self)
{
  if (self->history_len > 0 && self->step == self->history_from + self->history_len)
    {
      self->ring[self->step % HISTORY] = self->hash;
      if (self->history_len < HISTORY)
        self->history_len++;
      else
        self->history_from++;
    }
  else if (self->history_len > 0 && self->step + 1 == self->history_from + self->history_len)
    self->ring[self->step % HISTORY] = self->hash;   /* the same step, hashed again */
  else
    history_reset (self);
}

RlxReplica *
rlx_replica_new (const RlxModel *model, RlxDataset *dataset, guint64 seed)
{
  RlxReplica *self;

  g_return_val_if_fail (model != NULL && dataset != NULL, NULL);

  self = g_object_new (RLX_TYPE_REPLICA, NULL);
  self->model = model;
  self->dataset = rlx_dataset_ref (dataset);
  self->n = model->n_params;
  self->n_train = rlx_dataset_size (dataset, RLX_SPLIT_TRAIN);
  self->seed = seed;
  self->params = g_new (float, self->n);
  self->perm = g_new (guint32, MAX (self->n_train, 1));
  rlx_model_init_params (model, seed, self->params);
  self->hash = rlx_params_hash (self->params, self->n);
  history_reset (self);
  return self;
}

gsize rlx_replica_get_n (RlxReplica *self) { return self->n; }
guint64 rlx_replica_get_step (RlxReplica *self) { return self->step; }
guint64 rlx_replica_get_hash (RlxReplica *self) { return self->hash; }
double rlx_replica_get_loss (RlxReplica *self) { return self->loss; }
void rlx_replica_set_loss (RlxReplica *self, double loss) { self->loss = loss; }
guint64 rlx_replica_get_seed (RlxReplica *self) { return self->seed; }
guint rlx_replica_get_epoch (RlxReplica *self) { return self->epoch; }
guint rlx_replica_get_pos (RlxReplica *self) { return self->pos; }
guint rlx_replica_get_n_train (RlxReplica *self) { return self->n_train; }
const float *rlx_replica_get_params (RlxReplica *self) { return self->params; }
gboolean rlx_replica_busy (RlxReplica *self) { return rlx_serial_busy (self->serial); }

void
rlx_replica_set_seed (RlxReplica *self, guint64 seed)
{
  if (seed != self->seed)
    {
      self->seed = seed;
      self->perm_valid = FALSE;
    }
}

void
rlx_replica_advance (RlxReplica *self, guint *epoch, guint *pos, guint count)
{
  *pos += count;
  if (*pos >= self->n_train)
    {
      *pos = 0;
      *epoch += 1;
    }
}

const guint32 *
rlx_replica_permutation (RlxReplica *self, guint epoch)
{
  if (!self->perm_valid || self->perm_epoch != epoch)
    {
      rlx_dataset_permutation (self->n_train, self->seed, epoch, self->perm);
      self->perm_epoch = epoch;
      self->perm_valid = TRUE;
    }
  return self->perm;
}

/* ── operations ─────────────────────────────────────────────────────────── */

static void
op_run (gpointer data)
{
  Op *op = data;
  RlxReplica *self = op->self;

  switch (op->kind)
    {
    case OP_APPLY:
      /* One pass: subtract and hash each chunk while it is in cache. */
      rlx_kernels_apply (self->kernels, self->params, op->array.codes, self->n,
                         op->array.precision, op->array.scale, &op->hash);
      op->ok = TRUE;
      break;
    case OP_LOAD:
      /* The hash reads bytes (little-endian), so the payload is hashed in
       * place before it may overwrite the parameters. */
      op->ok = rlx_kernels_hash (self->kernels, (const float *) op->array.codes,
                                 self->n) == op->hash;
      if (op->ok)
        rlx_msg_array_decode (&op->array, self->params);
      break;
    case OP_LOAD_FLOATS:
      memcpy (self->params, op->floats, self->n * sizeof (float));
      op->hash = rlx_kernels_hash (self->kernels, self->params, self->n);
      op->ok = TRUE;
      break;
    case OP_READ:
      op->read (self->params, self->n, op->data);
      op->ok = TRUE;
      break;
    case OP_CORRUPT:
      {
        guint32 bits;
        memcpy (&bits, self->params, 4);
        bits ^= 1;
        memcpy (self->params, &bits, 4);
        op->hash = rlx_kernels_hash (self->kernels, self->params, self->n);
        op->ok = TRUE;
        break;
      }
    default:
      g_assert_not_reached ();
    }
}

static void
op_done (gpointer data, gpointer user_data)
{
  Op *op = data;
  RlxReplica *self = op->self;

  if (op->ok && op->kind != OP_READ)
    {
      if (op->kind != OP_CORRUPT)
        {
          self->step = op->step;
          self->epoch = op->epoch;
          self->pos = op->pos < self->n_train ? op->pos : 0;
        }
      self->hash = op->hash;
      if (op->kind == OP_APPLY || op->kind == OP_CORRUPT)
        history_note (self);
      else
        history_reset (self);
    }
  if (op->done)
    op->done (self, op->ok, op->user_data);
}

static Op *
op_new (RlxReplica *self, OpKind kind, RlxReplicaDone done, gpointer user_data)
{
  Op *op = g_new0 (Op, 1);

  op->self = self;
  op->kind = kind;
  op->done = done;
  op->user_data = user_data;
  return op;
}

static void
op_push (RlxReplica *self, Op *op)
{
  rlx_serial_push (self->serial, op_run, op_done, op, op_free, NULL);
}

void
rlx_replica_apply (RlxReplica *self, guint64 step, const RlxMsgArray *update, guint epoch,
                   guint pos, RlxReplicaDone done, gpointer user_data)
{
  Op *op;

  g_return_if_fail (RLX_IS_REPLICA (self));
  g_return_if_fail (update != NULL && update->n == self->n);

  op = op_new (self, OP_APPLY, done, user_data);
  op->step = step;
  op->epoch = epoch;
  op->pos = pos;
  rlx_msg_array_copy (&op->array, update);
  op_push (self, op);
}

void
rlx_replica_load (RlxReplica *self, guint64 step, const RlxMsgArray *params, guint64 hash,
                  guint epoch, guint pos, RlxReplicaDone done, gpointer user_data)
{
  Op *op;

  g_return_if_fail (RLX_IS_REPLICA (self));
  g_return_if_fail (params != NULL && params->n == self->n &&
                    params->precision == RLX_PRECISION_F32);

  op = op_new (self, OP_LOAD, done, user_data);
  op->step = step;
  op->epoch = epoch;
  op->pos = pos;
  op->hash = hash;
  rlx_msg_array_copy (&op->array, params);
  op_push (self, op);
}

void
rlx_replica_load_floats (RlxReplica *self, guint64 step, float *params, guint epoch, guint pos,
                         RlxReplicaDone done, gpointer user_data)
{
  Op *op;

  g_return_if_fail (RLX_IS_REPLICA (self));
  g_return_if_fail (params != NULL);

  op = op_new (self, OP_LOAD_FLOATS, done, user_data);
  op->step = step;
  op->epoch = epoch;
  op->pos = pos;
  op->floats = params;
  op_push (self, op);
}

void
rlx_replica_read (RlxReplica *self, RlxReplicaReadFunc read, gpointer data,
                  GDestroyNotify free_data, RlxReplicaDone done, gpointer user_data)
{
  Op *op;

  g_return_if_fail (RLX_IS_REPLICA (self));
  g_return_if_fail (read != NULL);

  op = op_new (self, OP_READ, done, user_data);
  op->read = read;
  op->data = data;
  op->free_data = free_data;
  op_push (self, op);
}

void
rlx_replica_corrupt (RlxReplica *self, RlxReplicaDone done, gpointer user_data)
{
  g_return_if_fail (RLX_IS_REPLICA (self));
  op_push (self, op_new (self, OP_CORRUPT, done, user_data));
}

void
rlx_replica_cancel (RlxReplica *self)
{
  g_return_if_fail (RLX_IS_REPLICA (self));
  rlx_serial_cancel (self->serial);
}

/* ── history ────────────────────────────────────────────────────────────── */

gboolean
rlx_replica_hash_at (RlxReplica *self, guint64 step, guint64 *hash)
{
  if (self->history_len == 0 || step < self->history_from ||
      step >= self->history_from + self->history_len)
    return FALSE;
  *hash = self->ring[step % HISTORY];
  return TRUE;
}

GArray *
rlx_replica_history (RlxReplica *self, guint64 *from)
{
  GArray *a = g_array_sized_new (FALSE, FALSE, sizeof (guint64), self->history_len);

  for (guint i = 0; i < self->history_len; i++)
    g_array_append_val (a, self->ring[(self->history_from + i) % HISTORY]);
  *from = self->history_from;
  return a;
}

gint64
rlx_replica_common_step (RlxReplica *self, guint64 from, GArray *hashes)
{
  for (guint64 s = MIN (from + hashes->len, self->history_from + self->history_len); s > 0; s--)
    {
      guint64 step = s - 1, mine;
      if (step < from || step < self->history_from)
        break;
      if (rlx_replica_hash_at (self, step, &mine) &&
          mine == g_array_index (hashes, guint64, step - from))
        return (gint64) step;
    }
  return -1;
}
