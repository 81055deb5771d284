/* rlx-replica.c — see rlx-replica.h */
#include "rlx-config.h"
#include "rlx-replica.h"
#include "core/rlx-kernels.h"

#include <string.h>

/* Steps whose hashes a replica remembers: a leader finds where a joiner far
 * behind parted from it (the snapshot's hashes around the joiner's step). */
#define HISTORY 65536

typedef struct {
  guint32  *buf;
  guint     epoch;
  guint64   seed;
  gboolean  valid;   /* buf holds the permutation of (seed, epoch) */
} PermSlot;

struct _RlxReplica {
  GObject         parent_instance;
  RlxWorker      *worker;       /* not owned */
  const RlxModel *model;
  gsize           n;
  guint           n_train;
  guint64         seed;

  float          *params;       /* the host copy of the last read, or NULL */
  guint64         params_step;
  float          *spare;        /* a buffer for the next read */
  guint64         step, hash;
  double          loss;
  guint           epoch, pos;

  /* hashes of steps history_from … history_from + history_len - 1, a ring;
   * known[i]: ring[i] holds a hash (a state loaded keeps the steps of the
   * history it shares with ours, with a gap up to the loaded step). Never
   * set outside the range. */
  guint64        *ring;           /* HISTORY entries (too many for the instance) */
  guint8         *known;
  guint64         history_from;
  guint           history_len;

  /* The epochs' permutations: the one in use and, made ahead on a thread
   * of its own, the next epoch's. Making one takes ~1.5 ms for 60,000
   * samples; made on the main loop at each epoch's first step, it held the
   * leader's next rounds back (a GPU ran dry every epoch). */
  PermSlot        perm[2];
  guint           perm_last;    /* the slot returned last */
  gint            perm_busy;    /* the slot being made ahead, -1: none */
  GThreadPool    *perm_pool;
  GMutex          perm_lock;
  GCond           perm_cond;

  guint           pending;      /* operations queued and not completed */
  guint64         generation;   /* bumped by cancel */
};

G_DEFINE_FINAL_TYPE (RlxReplica, rlx_replica, G_TYPE_OBJECT)

static void perm_wait (RlxReplica *self);

typedef enum { OP_LOAD, OP_LOAD_FLOATS, OP_READ, OP_CORRUPT } OpKind;

typedef struct {
  RlxReplica        *self;      /* a reference: the worker may deliver late */
  OpKind             kind;
  guint64            generation;
  guint64            step;
  RlxMsgArray        array;     /* snapshot parameters */
  float             *floats;    /* OP_LOAD_FLOATS: taken; OP_READ, OP_CORRUPT: the buffer */
  gsize              n;
  guint64            hash;      /* OP_LOAD: expected; out: the new hash */
  guint              epoch, pos;
  gboolean           rebase;    /* OP_LOAD: the history is kept (history_rebase) */
  gint64             keep_until;
  guint64            hashes_from;
  GArray            *hashes, *sparse;
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
  g_clear_pointer (&op->hashes, g_array_unref);
  g_clear_pointer (&op->sparse, g_array_unref);
  g_free (op->floats);
  if (op->free_data)
    op->free_data (op->data);
  g_object_unref (op->self);
  g_free (op);
}

static void
rlx_replica_finalize (GObject *object)
{
  RlxReplica *self = RLX_REPLICA (object);

  perm_wait (self);
  if (self->perm_pool != NULL)
    g_thread_pool_free (self->perm_pool, FALSE, TRUE);
  g_free (self->ring);
  g_free (self->known);
  g_mutex_clear (&self->perm_lock);
  g_cond_clear (&self->perm_cond);
  g_free (self->params);
  g_free (self->spare);
  g_free (self->perm[0].buf);
  g_free (self->perm[1].buf);
  G_OBJECT_CLASS (rlx_replica_parent_class)->finalize (object);
}

static void
rlx_replica_class_init (RlxReplicaClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = rlx_replica_finalize;
}

static void
rlx_replica_init (RlxReplica *self)
{
  self->ring = g_new0 (guint64, HISTORY);
  self->known = g_new0 (guint8, HISTORY);
  g_mutex_init (&self->perm_lock);
  g_cond_init (&self->perm_cond);
  self->perm_busy = -1;
}

static void
history_set (RlxReplica *self, guint64 step, guint64 hash)
{
  self->ring[step % HISTORY] = hash;
  self->known[step % HISTORY] = 1;
}

static void
history_reset (RlxReplica *self)
{
  memset (self->known, 0, HISTORY);
  self->history_from = self->step;
  self->history_len = 1;
  history_set (self, self->step, self->hash);
}

/* A state was loaded at (step, hash): the history is the loaded state's.
 * Ours is kept up to @keep_until (-1: none of it), where the loaded state's
 * history and ours still agreed; @hashes (of steps @from…) and @sparse (of
 * steps from − RLX_MSG_SPARSE_BASE × 2^k) are the loaded state's (either
 * NULL). Steps between them and the loaded one are not known. Without
 * this, a node that caught up with a snapshot of its own lineage forgot its
 * steps before it, and when that lineage yielded in a merge later reported
 * only the steps since the snapshot (chaos.py --duration 3600 --seed 60:
 * steps 388,085–395,624 discarded unreported). */
static void
history_rebase (RlxReplica *self, gint64 keep_until, guint64 from, GArray *hashes,
                GArray *sparse)
{
  guint64 step = self->step;
  guint64 lo = step >= HISTORY - 1 ? step - (HISTORY - 1) : 0;   /* the oldest it can hold */
  guint64 end = self->history_from + self->history_len, first = step;

  for (guint64 s = self->history_from; self->history_len > 0 && s < end; s++)
    if (!self->known[s % HISTORY])
      continue;
    else if (keep_until >= 0 && s <= (guint64) keep_until && s >= lo && s < step)
      first = MIN (first, s);
    else
      self->known[s % HISTORY] = 0;
  for (guint i = 0; hashes && i < hashes->len; i++)
    if (from + i >= lo && from + i < step)
      {
        history_set (self, from + i, g_array_index (hashes, guint64, i));
        first = MIN (first, from + i);
      }
  for (guint k = 0; sparse && k < sparse->len && k < RLX_MSG_SPARSE_MAX; k++)
    {
      guint64 back = (guint64) RLX_MSG_SPARSE_BASE << k;

      if (from < back || from - back < lo)
        break;
      history_set (self, from - back, g_array_index (sparse, guint64, k));
      first = MIN (first, from - back);
    }
  history_set (self, step, self->hash);
  self->history_from = first;
  self->history_len = (guint) (step - first + 1);
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
      self->known[self->step % HISTORY] = 1;
      /* the oldest step is one it knows (past a gap a load left) */
      while (self->history_from < self->step && !self->known[self->history_from % HISTORY])
        {
          self->history_from++;
          self->history_len--;
        }
    }
  else if (self->history_len > 0 && self->step + 1 == self->history_from + self->history_len)
    history_set (self, self->step, self->hash);   /* the same step, hashed again */
  else
    history_reset (self);
}

/* ── operations (worker thread) ─────────────────────────────────────────── */

static gboolean
op_run (RlxBackend *backend, gpointer data, GError **error)
{
  Op *op = data;
  gsize n = op->n;

  switch (op->kind)
    {
    case OP_LOAD:
      {
        const float *in_place = rlx_msg_array_f32 (&op->array);
        g_autofree float *decoded = NULL;

        /* The hash reads bytes (little-endian): the payload is hashed as it
         * came, before anything is replaced. */
        if (rlx_kernels_hash (rlx_kernels_get_default (), (const float *) op->array.codes, n)
            != op->hash)
          return TRUE;   /* not ok, no error: the caller asks again */
        if (in_place == NULL)
          {
            decoded = g_new (float, n);
            rlx_msg_array_decode (&op->array, decoded);
            in_place = decoded;
          }
        if (!rlx_backend_load_params (backend, in_place, error))
          return FALSE;
        rlx_backend_reset_feedback (backend);
        op->ok = TRUE;
        return TRUE;
      }
    case OP_LOAD_FLOATS:
      if (!rlx_backend_load_params (backend, op->floats, error) ||
          !rlx_backend_params_hash (backend, &op->hash, error))
        return FALSE;
      rlx_backend_reset_feedback (backend);
      op->ok = TRUE;
      return TRUE;
    case OP_READ:
      if (!rlx_backend_read_params (backend, op->floats, error))
        return FALSE;
      if (op->read)
        op->read (op->floats, n, op->data);
      op->ok = TRUE;
      return TRUE;
    case OP_CORRUPT:
      {
        guint32 bits;

        if (!rlx_backend_read_params (backend, op->floats, error))
          return FALSE;
        memcpy (&bits, op->floats, 4);
        bits ^= 1;
        memcpy (op->floats, &bits, 4);
        /* a load drops a round in progress: this is a member's switch */
        if (!rlx_backend_load_params (backend, op->floats, error) ||
            !rlx_backend_params_hash (backend, &op->hash, error))
          return FALSE;
        op->ok = TRUE;
        return TRUE;
      }
    default:
      g_assert_not_reached ();
    }
}

static void
op_done (RlxWorker *worker, gpointer data, const GError *error, gpointer user_data)
{
  Op *op = data;
  RlxReplica *self = op->self;

  self->pending--;
  if (op->generation != self->generation)
    return;
  if (error != NULL)
    g_warning ("the replica's %s failed: %s",
               op->kind == OP_READ ? "read" : op->kind == OP_CORRUPT ? "corruption" : "load",
               error->message);
  if (op->ok)
    switch (op->kind)
      {
      case OP_LOAD:
      case OP_LOAD_FLOATS:
        self->step = op->step;
        self->epoch = op->epoch;
        self->pos = op->pos < self->n_train ? op->pos : 0;
        self->hash = op->hash;
        if (op->rebase)
          history_rebase (self, op->keep_until, op->hashes_from, op->hashes, op->sparse);
        else
          history_reset (self);
        break;
      case OP_READ:
        /* the copy becomes the host copy; the old one the next buffer */
        g_free (self->spare);
        self->spare = self->params;
        self->params = g_steal_pointer (&op->floats);
        self->params_step = self->step;
        break;
      case OP_CORRUPT:
        self->hash = op->hash;
        history_note (self);
        break;
      default:
        g_assert_not_reached ();
      }
  if (op->done)
    op->done (self, op->ok, op->user_data);
}

static Op *
op_new (RlxReplica *self, OpKind kind, RlxReplicaDone done, gpointer user_data)
{
  Op *op = g_new0 (Op, 1);

  op->self = g_object_ref (self);
  op->kind = kind;
  op->generation = self->generation;
  op->n = self->n;
  op->done = done;
  op->user_data = user_data;
  if (kind == OP_READ || kind == OP_CORRUPT)
    op->floats = self->spare ? g_steal_pointer (&self->spare) : g_new (float, self->n);
  return op;
}

static void
op_push (RlxReplica *self, Op *op)
{
  self->pending++;
  rlx_worker_queue (self->worker, op_run, op_done, op, op_free, NULL);
}

/* ── the object ─────────────────────────────────────────────────────────── */

RlxReplica *
rlx_replica_new (RlxWorker *worker, guint64 seed)
{
  RlxBackend *backend;
  RlxReplica *self;
  float *init;

  g_return_val_if_fail (worker != NULL, NULL);

  backend = rlx_worker_backend (worker);
  self = g_object_new (RLX_TYPE_REPLICA, NULL);
  self->worker = worker;
  self->model = rlx_backend_model (backend);
  self->n = self->model->n_params;
  self->n_train = rlx_dataset_size (rlx_backend_dataset (backend), RLX_SPLIT_TRAIN);
  self->seed = seed;
  self->perm[0].buf = g_new (guint32, MAX (self->n_train, 1));
  self->perm[1].buf = g_new (guint32, MAX (self->n_train, 1));
  init = g_new (float, self->n);
  rlx_model_init_params (self->model, seed, init);
  self->hash = rlx_params_hash (init, self->n);
  history_reset (self);
  /* the backend starts from them (a founder trains on them; a member's
   * snapshot replaces them) */
  rlx_replica_load_floats (self, 0, init, 0, 0, NULL, NULL);
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
guint64 rlx_replica_get_params_step (RlxReplica *self) { return self->params_step; }
gboolean rlx_replica_busy (RlxReplica *self) { return self->pending > 0; }

void
rlx_replica_set_seed (RlxReplica *self, guint64 seed)
{
  if (seed != self->seed)
    {
      /* (the slots record their seed; one made ahead for the old seed is
       * left alone) */
      self->seed = seed;
    }
}

void
rlx_replica_advance (RlxReplica *self, guint *epoch, guint *pos, guint count)
{
  guint64 p = (guint64) *pos + count;

  g_return_if_fail (RLX_IS_REPLICA (self));
  if (self->n_train == 0)
    return;
  /* (an outer round may run over the epoch's end, or over several) */
  *epoch += (guint) (p / self->n_train);
  *pos = (guint) (p % self->n_train);
}

guint32 *
rlx_replica_indices (RlxReplica *self, guint epoch, guint64 start, guint count)
{
  guint32 *out;
  guint pos, done = 0;

  g_return_val_if_fail (RLX_IS_REPLICA (self) && self->n_train > 0, NULL);

  out = g_try_new (guint32, MAX (count, 1u));
  if (out == NULL)
    return NULL;
  epoch += (guint) (start / self->n_train);
  pos = (guint) (start % self->n_train);
  while (done < count)
    {
      guint take = MIN (count - done, self->n_train - pos);

      /* (each epoch's permutation copied before the next is asked for:
       * rlx_replica_permutation's pointer lasts until its next call) */
      memcpy (out + done, rlx_replica_permutation (self, epoch) + pos, take * sizeof (guint32));
      done += take;
      pos = 0;
      epoch++;
    }
  return out;
}

/* The pool's thread: the slot perm_busy names, made. */
static void
perm_make (gpointer data, gpointer user_data)
{
  RlxReplica *self = user_data;
  PermSlot *slot;

  g_mutex_lock (&self->perm_lock);
  slot = &self->perm[self->perm_busy];
  g_mutex_unlock (&self->perm_lock);
  rlx_dataset_permutation (self->n_train, slot->seed, slot->epoch, slot->buf);
  g_mutex_lock (&self->perm_lock);
  slot->valid = TRUE;
  self->perm_busy = -1;
  g_cond_broadcast (&self->perm_cond);
  g_mutex_unlock (&self->perm_lock);
}

/* Until no slot is being made. */
static void
perm_wait (RlxReplica *self)
{
  g_mutex_lock (&self->perm_lock);
  while (self->perm_busy >= 0)
    g_cond_wait (&self->perm_cond, &self->perm_lock);
  g_mutex_unlock (&self->perm_lock);
}

static gboolean
perm_holds (RlxReplica *self, guint s, guint64 seed, guint epoch)
{
  return self->perm[s].valid && self->perm[s].seed == seed && self->perm[s].epoch == epoch;
}

const guint32 *
rlx_replica_permutation (RlxReplica *self, guint epoch)
{
  gint hit = -1, busy;
  guint other;

  g_mutex_lock (&self->perm_lock);
  busy = self->perm_busy;
  for (guint s = 0; s < 2 && hit < 0; s++)
    if ((gint) s != busy && perm_holds (self, s, self->seed, epoch))
      hit = (gint) s;
  g_mutex_unlock (&self->perm_lock);
  if (hit < 0)
    {
      /* being made ahead (then it is nearly done), or made here */
      perm_wait (self);
      for (guint s = 0; s < 2 && hit < 0; s++)
        if (perm_holds (self, s, self->seed, epoch))
          hit = (gint) s;
      if (hit < 0)
        {
          /* in place of one of another seed, or of an epoch other than
           * the last commit's, or the one returned before last */
          hit = (gint) (1 - self->perm_last);
          for (guint s = 0; s < 2; s++)
            if (!self->perm[s].valid || self->perm[s].seed != self->seed)
              hit = (gint) s;
          if (perm_holds (self, (guint) hit, self->seed, self->epoch))
            hit = 1 - hit;
          rlx_dataset_permutation (self->n_train, self->seed, epoch, self->perm[hit].buf);
          self->perm[hit] = (PermSlot) { self->perm[hit].buf, epoch, self->seed, TRUE };
        }
    }
  self->perm_last = (guint) hit;
  /* the next epoch's, made ahead in the other slot (whose pointers nobody
   * keeps: callers copy what they take) — when this is the epoch of the
   * last commit: later ones are asked for ahead of time, and the last
   * commit's must stay */
  other = 1 - (guint) hit;
  g_mutex_lock (&self->perm_lock);
  if (self->perm_busy < 0 && self->n_train > 1 && epoch == self->epoch &&
      !perm_holds (self, other, self->seed, epoch + 1))
    {
      if (self->perm_pool == NULL)
        self->perm_pool = g_thread_pool_new (perm_make, self, 1, FALSE, NULL);
      self->perm[other] = (PermSlot) { self->perm[other].buf, epoch + 1, self->seed, FALSE };
      self->perm_busy = (gint) other;
      g_thread_pool_push (self->perm_pool, self, NULL);
    }
  g_mutex_unlock (&self->perm_lock);
  return self->perm[hit].buf;
}

void
rlx_replica_commit (RlxReplica *self, guint64 step, guint64 hash, guint epoch, guint pos)
{
  g_return_if_fail (RLX_IS_REPLICA (self));

  self->step = step;
  self->hash = hash;
  self->epoch = epoch;
  self->pos = pos < self->n_train ? pos : 0;
  history_note (self);
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
rlx_replica_load_snapshot (RlxReplica *self, const RlxMsgSnapshot *s, gint64 keep_until,
                           RlxReplicaDone done, gpointer user_data)
{
  Op *op;

  g_return_if_fail (RLX_IS_REPLICA (self));
  g_return_if_fail (s != NULL && s->params.n == self->n &&
                    s->params.precision == RLX_PRECISION_F32);

  op = op_new (self, OP_LOAD, done, user_data);
  op->step = s->step;
  op->epoch = s->epoch;
  op->pos = s->pos;
  op->hash = s->hash;
  op->rebase = TRUE;
  op->keep_until = keep_until;
  op->hashes_from = s->hashes_from;
  op->hashes = s->hashes ? g_array_ref (s->hashes) : NULL;
  op->sparse = s->sparse ? g_array_ref (s->sparse) : NULL;
  rlx_msg_array_copy (&op->array, &s->params);
  op_push (self, op);
}

gint64
rlx_replica_agrees_until (RlxReplica *self, const RlxMsgSnapshot *s, gint64 *sparse_common)
{
  gint64 common = s->hashes ? rlx_replica_common_step (self, s->hashes_from, s->hashes) : -1;
  guint64 mine;

  /* The snapshot's own state is the newest step of its history. The dense
   * window ends at the step the member's join said, and a member that
   * caught up since (the answer to an earlier join, at the same step,
   * crossed this one) may be at the snapshot's state already: by the
   * window alone it parted after the window's end, and reported its steps
   * since as discarded (a false "merged" in
   * /cohort/forks/long-split-reports-from-split). */
  if ((gint64) s->step > common && rlx_replica_hash_at (self, s->step, &mine) && mine == s->hash)
    common = (gint64) s->step;

  *sparse_common = -1;
  for (guint k = 0; s->sparse && k < s->sparse->len && k < RLX_MSG_SPARSE_MAX; k++)
    {
      guint64 back = (guint64) RLX_MSG_SPARSE_BASE << k;

      if (s->hashes_from < back)
        break;
      if (rlx_replica_hash_at (self, s->hashes_from - back, &mine) &&
          mine == g_array_index (s->sparse, guint64, k))
        {
          *sparse_common = (gint64) (s->hashes_from - back);
          break;
        }
    }
  return common;
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
  self->generation++;
}

/* ── history ────────────────────────────────────────────────────────────── */

gboolean
rlx_replica_hash_at (RlxReplica *self, guint64 step, guint64 *hash)
{
  if (self->history_len == 0 || step < self->history_from ||
      step >= self->history_from + self->history_len || !self->known[step % HISTORY])
    return FALSE;
  *hash = self->ring[step % HISTORY];
  return TRUE;
}

GArray *
rlx_replica_history_until (RlxReplica *self, guint64 until, guint max, guint64 *from)
{
  guint64 last = self->history_from + self->history_len;   /* one past the newest */
  guint64 end, start;
  GArray *a;

  if (self->history_len == 0)
    {
      *from = self->step;
      return g_array_new (FALSE, FALSE, sizeof (guint64));
    }
  end = MAX (until >= last - 1 ? last : until + 1, self->history_from + 1);
  /* one run of known steps (a gap follows a state loaded): the newest that
   * ends at or before @until */
  while (end > self->history_from + 1 && !self->known[(end - 1) % HISTORY])
    end--;
  start = end - MIN (end - self->history_from, (guint64) max);
  for (guint64 s = end - 1; s > start; s--)
    if (!self->known[(s - 1) % HISTORY])
      {
        start = s;
        break;
      }
  a = g_array_sized_new (FALSE, FALSE, sizeof (guint64), (guint) (end - start));
  for (guint64 s = start; s < end; s++)
    g_array_append_val (a, self->ring[s % HISTORY]);
  *from = start;
  return a;
}

guint64
rlx_replica_history_start (RlxReplica *self)
{
  return self->history_len > 0 ? self->history_from : self->step;
}

GArray *
rlx_replica_history (RlxReplica *self, guint64 *from)
{
  return rlx_replica_history_until (self, G_MAXUINT64, RLX_MSG_MAX_HASHES, from);
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
