/* rlx-kernels.c — the round arithmetic on a persistent thread pool (see
 * rlx-kernels.h)
 *
 * Work is split into chunks of CHUNK elements (64 KiB of f32: a chunk of
 * the parameters, its update and its codes sit in L2 while it is worked on,
 * and apply can hash it there: a work chunk holds HCHUNKS whole chunks of
 * rlx_params_hash's tree). The threads of the pool and
 * the calling thread take chunks from one atomic counter; results that
 * combine across chunks (max |u|, the first non-finite element, the chunk
 * hashes) are kept per chunk and combined in chunk order, so the answer is
 * the same whoever took which chunk. Inside a chunk, blocks of
 * RLX_WIRE_BLOCK elements are dequantised into an L1 buffer with core/wire's
 * kernels and finished by the loops below, compiled once per instruction set
 * (the set core/wire chose). The library is built with -ffp-contract=off: a
 * fused multiply-add would change the bits of w · x + s.
 *
 * Over 1,000 lines: every pass shares the pool, the chunking and the
 * per-instruction-set loops, and they are one translation unit so that the
 * loops inline into each pass under the library's flags; split, the
 * compiler would see less of the hot loops (speed is the point here).
 */
#include "rlx-config.h"
#include "rlx-kernels.h"

#include <math.h>
#include <string.h>

#include "core/vision/rlx-model.h"
#include "core/wire/rlx-wire-kernels.h"
#include "core/util/rlx-fp-mode.h"

G_DEFINE_QUARK (rlx-kernels-error-quark, rlx_kernels_error)

#define CHUNK  RLX_KERNELS_CHUNK
#define BLOCK  RLX_WIRE_BLOCK
#define HCHUNKS (CHUNK / RLX_PARAMS_HASH_CHUNK)
G_STATIC_ASSERT (CHUNK % BLOCK == 0);
G_STATIC_ASSERT (CHUNK % RLX_PARAMS_HASH_CHUNK == 0);

/* Work chunks of an @n-element job. */
static inline gsize
n_chunks_of (gsize n)
{
  return (n + CHUNK - 1) / CHUNK;
}

/* The hash tree's chunks inside work chunk @c, into @slots (indexed by the
 * tree's chunk index). */
static void
hash_work_chunk (const float *params, gsize n, gsize c, guint64 *slots)
{
  gsize end = MIN ((c + 1) * HCHUNKS, rlx_params_hash_n_chunks (n));

  for (gsize k = c * HCHUNKS; k < end; k++)
    slots[k] = rlx_params_hash_chunk (params, n, k);
}
/* Below this many elements a job runs on the caller alone: waking a sleeping
 * thread costs more than it saves (on the 2-core dev VM, 2 threads only pay
 * from ~1M elements: BENCHMARKS.md, "Round kernels"). */
#define DEFAULT_MIN_PARALLEL (32 * CHUNK)

/* ── the pool ───────────────────────────────────────────────────────────── */

typedef void (*ChunkFunc) (gpointer data, gsize chunk);

typedef struct {
  ChunkFunc func;
  gpointer  data;
  gint      n_chunks;
  gint      next;        /* atomic: the next chunk to take */
  gint      completed;   /* atomic: chunks finished */
  gint      refs;        /* atomic */
} Job;

struct _RlxKernels
{
  GObject    parent_instance;

  guint      n_threads;
  guint      min_parallel;   /* atomic; elements */
  GPtrArray *threads;     /* GThread*, n_threads - 1 */

  GMutex     call_lock;   /* one parallel job at a time */
  GMutex     lock;        /* job, generation, quit */
  GCond      wake;        /* helpers: a new job or quit */
  GCond      done;        /* the caller: every chunk finished */
  Job       *job;
  guint64    generation;
  gboolean   quit;
};

G_DEFINE_FINAL_TYPE (RlxKernels, rlx_kernels, G_TYPE_OBJECT)

static void
job_unref (Job *job)
{
  if (g_atomic_int_dec_and_test (&job->refs))
    g_free (job);
}

static void
job_run (RlxKernels *self, Job *job)
{
  for (;;)
    {
      gint c = g_atomic_int_add (&job->next, 1);

      if (c >= job->n_chunks)
        return;
      job->func (job->data, (gsize) c);
      if (g_atomic_int_add (&job->completed, 1) + 1 == job->n_chunks)
        {
          g_mutex_lock (&self->lock);
          g_cond_broadcast (&self->done);
          g_mutex_unlock (&self->lock);
        }
    }
}

static gpointer
helper_main (gpointer data)
{
  RlxKernels *self = data;
  guint64 seen;

  /* replicated arithmetic: exact, whoever made this pool (rlx-fp-mode.h) */
  rlx_fp_mode_enter_exact ();
  g_mutex_lock (&self->lock);
  seen = self->generation;
  for (;;)
    {
      Job *job;

      while (!self->quit && self->generation == seen)
        g_cond_wait (&self->wake, &self->lock);
      if (self->quit)
        break;
      seen = self->generation;
      /* A helper that wakes after the job ended finds no job (or a later
       * one, which it may as well help with). */
      job = self->job;
      if (job == NULL)
        continue;
      g_atomic_int_inc (&job->refs);
      g_mutex_unlock (&self->lock);
      job_run (self, job);
      job_unref (job);
      g_mutex_lock (&self->lock);
    }
  g_mutex_unlock (&self->lock);
  return NULL;
}

/* Run @func on chunks 0 … @n_chunks − 1, on every thread; returns when all
 * have finished. The caller waits only for chunks in progress, never for a
 * helper that has not woken up yet. */
static void
parallel_for (RlxKernels *self, gsize n, ChunkFunc func, gpointer data)
{
  gsize n_chunks = (n + CHUNK - 1) / CHUNK;
  RlxFpScope fp = rlx_fp_scope_begin_exact ();   /* the caller's chunks too */
  Job *job;

  if (self->n_threads <= 1 || n < (guint) g_atomic_int_get (&self->min_parallel) ||
      n_chunks > G_MAXINT / 2)
    {
      for (gsize c = 0; c < n_chunks; c++)
        func (data, c);
      rlx_fp_scope_end (fp);
      return;
    }

  job = g_new0 (Job, 1);
  job->func = func;
  job->data = data;
  job->n_chunks = (gint) n_chunks;
  job->refs = 1;

  g_mutex_lock (&self->call_lock);
  g_mutex_lock (&self->lock);
  self->job = job;
  self->generation++;
  g_cond_broadcast (&self->wake);
  g_mutex_unlock (&self->lock);

  job_run (self, job);

  g_mutex_lock (&self->lock);
  while (g_atomic_int_get (&job->completed) != job->n_chunks)
    g_cond_wait (&self->done, &self->lock);
  self->job = NULL;
  g_mutex_unlock (&self->lock);
  g_mutex_unlock (&self->call_lock);
  job_unref (job);
  rlx_fp_scope_end (fp);
}

static guint
default_threads (void)
{
  const char *env = g_getenv ("RLX_KERNEL_THREADS");

  if (env != NULL && *env != '\0')
    {
      guint64 v;

      if (g_ascii_string_to_unsigned (env, 10, 1, 256, &v, NULL))
        return (guint) v;
      g_warning ("RLX_KERNEL_THREADS=%s is not a number from 1 to 256; using one thread per "
                 "processor (%u)", env, g_get_num_processors ());
    }
  return g_get_num_processors ();
}

RlxKernels *
rlx_kernels_new (guint n_threads)
{
  RlxKernels *self = g_object_new (RLX_TYPE_KERNELS, NULL);

  self->n_threads = n_threads ? MIN (n_threads, 256) : default_threads ();
  self->min_parallel = DEFAULT_MIN_PARALLEL;
  for (guint i = 1; i < self->n_threads; i++)
    {
      g_autofree char *name = g_strdup_printf ("rlx-kernels-%u", i);
      g_ptr_array_add (self->threads, g_thread_new (name, helper_main, self));
    }
  return self;
}

RlxKernels *
rlx_kernels_get_default (void)
{
  static RlxKernels *pool;

  if (g_once_init_enter (&pool))
    g_once_init_leave (&pool, rlx_kernels_new (0));
  return pool;
}

guint
rlx_kernels_get_n_threads (RlxKernels *self)
{
  g_return_val_if_fail (RLX_IS_KERNELS (self), 1);
  return self->n_threads;
}

void
rlx_kernels_set_min_parallel (RlxKernels *self, gsize n)
{
  g_return_if_fail (RLX_IS_KERNELS (self));
  g_atomic_int_set (&self->min_parallel, (guint) MIN (n, G_MAXUINT));
}

static void
rlx_kernels_finalize (GObject *object)
{
  RlxKernels *self = RLX_KERNELS (object);

  g_mutex_lock (&self->lock);
  self->quit = TRUE;
  g_cond_broadcast (&self->wake);
  g_mutex_unlock (&self->lock);
  for (guint i = 0; i < self->threads->len; i++)
    g_thread_join (g_ptr_array_index (self->threads, i));
  g_ptr_array_unref (self->threads);
  g_mutex_clear (&self->call_lock);
  g_mutex_clear (&self->lock);
  g_cond_clear (&self->wake);
  g_cond_clear (&self->done);
  G_OBJECT_CLASS (rlx_kernels_parent_class)->finalize (object);
}

static void
rlx_kernels_class_init (RlxKernelsClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = rlx_kernels_finalize;
}

static void
rlx_kernels_init (RlxKernels *self)
{
  self->threads = g_ptr_array_new ();
  g_mutex_init (&self->call_lock);
  g_mutex_init (&self->lock);
  g_cond_init (&self->wake);
  g_cond_init (&self->done);
}

/* ── element loops, one copy per instruction set ────────────────────────── */

#define INLINE static inline __attribute__ ((always_inline))

INLINE gboolean
nonfinite_bits (guint32 b)
{
  return (b & 0x7f800000u) == 0x7f800000u;
}

INLINE guint32
bits_of (float x)
{
  guint32 b;

  memcpy (&b, &x, 4);
  return b;
}

/* dst = (src +) w · x; returns non-zero when some x is not finite. */
INLINE guint32
body_acc (float *restrict dst, const float *restrict src, const float *restrict x, gsize m,
          float w)
{
  guint32 bad = 0;

  if (src == NULL)
    for (gsize i = 0; i < m; i++)
      {
        bad |= nonfinite_bits (bits_of (x[i]));
        dst[i] = w * x[i];
      }
  else
    for (gsize i = 0; i < m; i++)
      {
        bad |= nonfinite_bits (bits_of (x[i]));
        dst[i] = src[i] + w * x[i];
      }
  return bad;
}

/* dst = sw · src + w · x; returns non-zero when some x is not finite. */
INLINE guint32
body_acc_w (float *restrict dst, const float *restrict src, const float *restrict x, gsize m,
            float sw, float w)
{
  guint32 bad = 0;

  for (gsize i = 0; i < m; i++)
    {
      bad |= nonfinite_bits (bits_of (x[i]));
      dst[i] = sw * src[i] + w * x[i];
    }
  return bad;
}

/* u = lr · (sum · inv) (+ r); returns non-zero when some u is not finite. */
INLINE guint32
body_u (float *restrict u, const float *restrict sum, const float *restrict r, gsize m,
        float lr, float inv)
{
  guint32 bad = 0;

  if (r == NULL)
    for (gsize i = 0; i < m; i++)
      {
        u[i] = lr * (sum[i] * inv);
        bad |= nonfinite_bits (bits_of (u[i]));
      }
  else
    for (gsize i = 0; i < m; i++)
      {
        u[i] = lr * (sum[i] * inv) + r[i];
        bad |= nonfinite_bits (bits_of (u[i]));
      }
  return bad;
}

/* residual = finite (u − d) or 0; params −= d; update = d (each optional). */
INLINE void
body_finish (const float *restrict u, const float *restrict d, float *restrict residual,
             float *restrict params, float *restrict update, gsize m)
{
  if (residual != NULL)
    for (gsize i = 0; i < m; i++)
      {
        float r = u[i] - d[i];
        residual[i] = nonfinite_bits (bits_of (r)) ? 0.0f : r;
      }
  if (params != NULL)
    for (gsize i = 0; i < m; i++)
      params[i] -= d[i];
  if (update != NULL && update != d)
    memcpy (update, d, m * sizeof (float));
}

/* Non-zero when some code among the 64-bit words @w[0..m) decodes to NaN or
 * ±Inf: in each word, @field masks every element's exponent field, @one is
 * the field's lowest bit, @top each element's top bit — (field + one) reaches
 * the top bit only when the field is all ones, and never carries into the
 * next element. */
INLINE guint64
body_codes_bad (const guint64 *restrict w, gsize m, guint64 field, guint64 one, guint64 top)
{
  guint64 acc = 0;

  for (gsize i = 0; i < m; i++)
    acc |= ((w[i] & field) + one) & top;
  return acc;
}

/* the largest |x| as f32 bits without the sign: ordered like |x| for
 * finite x, ≥ 0x7f800000 for NaN or ±Inf (integer max: vectorises) */
INLINE guint32
body_maxbits (const float *restrict x, gsize m)
{
  guint32 r = 0;

  for (gsize i = 0; i < m; i++)
    {
      guint32 b = bits_of (x[i]) & 0x7fffffffu;
      r = b > r ? b : r;
    }
  return r;
}

INLINE void
body_sub (float *restrict params, const float *restrict d, gsize m)
{
  for (gsize i = 0; i < m; i++)
    params[i] -= d[i];
}

typedef struct {
  const char *name;
  guint32 (*acc)    (float *restrict dst, const float *restrict src, const float *restrict x,
                     gsize m, float w);
  guint32 (*acc_w)  (float *restrict dst, const float *restrict src, const float *restrict x,
                     gsize m, float sw, float w);
  guint32 (*u)      (float *restrict u, const float *restrict sum, const float *restrict r,
                     gsize m, float lr, float inv);
  void    (*finish) (const float *restrict u, const float *restrict d, float *restrict residual,
                     float *restrict params, float *restrict update, gsize m);
  void    (*sub)    (float *restrict params, const float *restrict d, gsize m);
  guint32 (*maxbits) (const float *restrict x, gsize m);
  guint64 (*codes_bad) (const guint64 *restrict w, gsize m, guint64 field, guint64 one,
                        guint64 top);
} Loops;

#define DEFINE_LOOPS(SFX, ATTR)                                                          \
  ATTR static guint32 acc_##SFX (float *restrict dst, const float *restrict src,         \
                                 const float *restrict x, gsize m, float w)              \
  { return body_acc (dst, src, x, m, w); }                                               \
  ATTR static guint32 acc_w_##SFX (float *restrict dst, const float *restrict src,       \
                                   const float *restrict x, gsize m, float sw, float w)  \
  { return body_acc_w (dst, src, x, m, sw, w); }                                         \
  ATTR static guint32 u_##SFX (float *restrict u, const float *restrict sum,             \
                               const float *restrict r, gsize m, float lr, float inv)    \
  { return body_u (u, sum, r, m, lr, inv); }                                             \
  ATTR static void finish_##SFX (const float *restrict u, const float *restrict d,      \
                                 float *restrict residual, float *restrict params,       \
                                 float *restrict update, gsize m)                        \
  { body_finish (u, d, residual, params, update, m); }                                   \
  ATTR static void sub_##SFX (float *restrict params, const float *restrict d, gsize m)  \
  { body_sub (params, d, m); }                                                           \
  ATTR static guint32 maxbits_##SFX (const float *restrict x, gsize m)                   \
  { return body_maxbits (x, m); }                                                        \
  ATTR static guint64 codes_bad_##SFX (const guint64 *restrict w, gsize m, guint64 field,  \
                                       guint64 one, guint64 top)                         \
  { return body_codes_bad (w, m, field, one, top); }                                     \
  static const Loops loops_##SFX = { #SFX, acc_##SFX, acc_w_##SFX, u_##SFX, finish_##SFX,    \
                                     sub_##SFX, maxbits_##SFX, codes_bad_##SFX };

DEFINE_LOOPS (portable, )
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* No "fma" here: -ffp-contract=off already forbids contraction, and leaving
 * the instructions out makes sure of it. */
DEFINE_LOOPS (avx2, __attribute__ ((target ("avx2"))))
DEFINE_LOOPS (avx512, __attribute__ ((target ("avx512f,avx512vl,avx512bw,avx512dq,avx2"))))
#endif

/* The loops for the instruction set core/wire's kernels use (core/wire only
 * picks a set the CPU has). */
static const Loops *
loops (void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  const char *name = rlx_wire_kernels ()->name;

  if (g_str_has_prefix (name, "avx512"))
    return &loops_avx512;
  if (strcmp (name, "avx2") == 0)
    return &loops_avx2;
#endif
  return &loops_portable;
}

/* ── dequantising a block ───────────────────────────────────────────────── */

typedef struct {
  const RlxWireKernels *k;
  RlxPrecision          p;
  double                scale;
  double                inv;
  float                 lut[256];   /* f8 */
} Codec;

static void
codec_init (Codec *c, RlxPrecision p, double scale)
{
  c->k = rlx_wire_kernels ();
  c->p = p;
  c->scale = scale;
  /* As rlx_wire_dequantize: `1 / scale` in double. */
  c->inv = 1.0 / scale;
  if (p == RLX_PRECISION_F8E4M3 || p == RLX_PRECISION_F8E5M2)
    rlx_wire_f8_lut (p, c->inv, c->lut);
}

/* Elements [i, i + m) of @codes as floats: a pointer into the codes for
 * aligned f32, else dequantised into @tmp. */
static const float *
codec_block (const Codec *c, const void *codes, gsize i, gsize m, float *tmp)
{
  const guint8 *b = codes;

  switch (c->p)
    {
    case RLX_PRECISION_F32:
      if (((guintptr) b % G_ALIGNOF (float)) == 0 && G_BYTE_ORDER == G_LITTLE_ENDIAN)
        return (const float *) (b + 4 * i);
      memcpy (tmp, b + 4 * i, m * 4);
      return tmp;
    case RLX_PRECISION_F16:
      c->k->dequant_f16 (b + 2 * i, m, c->inv, tmp);
      return tmp;
    case RLX_PRECISION_F8E4M3:
    case RLX_PRECISION_F8E5M2:
    default:
      c->k->dequant_f8 (b + i, m, c->p, c->inv, c->lut, tmp);
      return tmp;
    }
}

static void
codec_quantize (const Codec *c, const float *u, gsize i, gsize m, guint8 *payload)
{
  switch (c->p)
    {
    case RLX_PRECISION_F32:
      memcpy (payload + 4 * i, u, m * 4);
      break;
    case RLX_PRECISION_F16:
      c->k->quant_f16 (u, m, c->scale, payload + 2 * i);
      break;
    case RLX_PRECISION_F8E4M3:
    case RLX_PRECISION_F8E5M2:
    default:
      c->k->quant_f8 (u, m, c->scale, c->p, payload + i);
      break;
    }
}

static gboolean
precision_ok (RlxPrecision p)
{
  return (guint) p < RLX_PRECISION_COUNT;
}

static gboolean
scale_ok (RlxPrecision p, double scale)
{
  return p == RLX_PRECISION_F32 || (isfinite (scale) && scale > 0 && isfinite (1.0 / scale));
}

/* Per-chunk results, combined in chunk order. */
typedef struct {
  guint64 stack[64];
  guint64 *v;
} ChunkSlots;

static guint64 *
chunk_slots_init (ChunkSlots *s, gsize n)
{
  /* the tree's chunks: never fewer than the work chunks */
  gsize m = MAX (MAX (rlx_params_hash_n_chunks (n), n_chunks_of (n)), 1);

  s->v = m <= G_N_ELEMENTS (s->stack) ? s->stack : g_new (guint64, m);
  memset (s->v, 0, m * sizeof (guint64));
  return s->v;
}

static void
chunk_slots_clear (ChunkSlots *s)
{
  if (s->v != s->stack)
    g_free (s->v);
}

#define NO_BAD G_MAXUINT64

static gsize
first_bad (const guint64 *slots, gsize n_chunks)
{
  for (gsize c = 0; c < n_chunks; c++)
    if (slots[c] != NO_BAD)
      return (gsize) slots[c];
  return G_MAXSIZE;
}

static void
set_nonfinite_error (GError **error, gsize index, float v, const char *what)
{
  g_set_error (error, RLX_KERNELS_ERROR, RLX_KERNELS_ERROR_NONFINITE,
               "%s value %" G_GSIZE_FORMAT " is %s", what, index,
               isnan (v) ? "NaN" : (v > 0 ? "+Inf" : "-Inf"));
}

/* ── accumulate ─────────────────────────────────────────────────────────── */

typedef struct {
  const Loops *l;
  Codec        codec;
  float       *dst;
  const float *src;
  const void  *codes;
  gsize        n;
  float        w;
  float        sw;       /* weight of src (1: src as it is) */
  guint64     *bad;      /* per chunk: first non-finite index or NO_BAD */
} AccJob;

static void
acc_chunk (gpointer data, gsize c)
{
  AccJob *j = data;
  float tmp[BLOCK];
  gsize end = MIN ((c + 1) * CHUNK, j->n);

  j->bad[c] = NO_BAD;
  for (gsize i = c * CHUNK; i < end; i += BLOCK)
    {
      gsize m = MIN (BLOCK, end - i);
      const float *x = codec_block (&j->codec, j->codes, i, m, tmp);

      guint32 nf = j->src != NULL && j->sw != 1.0f
                       ? j->l->acc_w (j->dst + i, j->src + i, x, m, j->sw, j->w)
                       : j->l->acc (j->dst + i, j->src ? j->src + i : NULL, x, m, j->w);

      if (nf && j->bad[c] == NO_BAD)
        for (gsize k = 0; k < m; k++)
          if (nonfinite_bits (bits_of (x[k])))
            {
              j->bad[c] = i + k;
              break;
            }
    }
}

gboolean
rlx_kernels_accumulate (RlxKernels *self, float *dst, const float *src, const void *codes,
                        gsize n, RlxPrecision p, double scale, float w, gsize *bad_index,
                        GError **error)
{
  return rlx_kernels_accumulate_weighted (self, dst, src, 1.0f, codes, n, p, scale, w, bad_index,
                                          error);
}

gboolean
rlx_kernels_accumulate_weighted (RlxKernels *self, float *dst, const float *src, float src_w,
                                 const void *codes, gsize n, RlxPrecision p, double scale,
                                 float w, gsize *bad_index, GError **error)
{
  AccJob j = { 0 };
  ChunkSlots slots;
  gsize bad;

  g_return_val_if_fail (RLX_IS_KERNELS (self), FALSE);
  g_return_val_if_fail ((dst != NULL && codes != NULL) || n == 0, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (bad_index)
    *bad_index = G_MAXSIZE;
  if (!precision_ok (p) || !scale_ok (p, scale))
    {
      g_set_error (error, RLX_KERNELS_ERROR, RLX_KERNELS_ERROR_INVALID,
                   "cannot accumulate a bucket at precision %d with scale %g", (int) p, scale);
      return FALSE;
    }
  if (n == 0)
    return TRUE;

  j.l = loops ();
  codec_init (&j.codec, p, scale);
  j.dst = dst;
  j.src = src;
  j.codes = codes;
  j.n = n;
  j.w = w;
  j.sw = src_w;
  j.bad = chunk_slots_init (&slots, n);
  parallel_for (self, n, acc_chunk, &j);
  bad = first_bad (j.bad, n_chunks_of (n));
  chunk_slots_clear (&slots);

  if (bad != G_MAXSIZE)
    {
      float v;

      if (bad_index)
        *bad_index = bad;
      rlx_wire_dequantize ((const guint8 *) codes + bad * rlx_precision_element_size (p), 1, p,
                           scale, &v);
      set_nonfinite_error (error, bad, v, "bucket");
      return FALSE;
    }
  return TRUE;
}

struct _RlxKernelsSum {
  gsize  n;
  float *buf[2];
  int    cur;      /* -1: empty */
  guint  count;
};

RlxKernelsSum *
rlx_kernels_sum_new (gsize n)
{
  RlxKernelsSum *s = g_new0 (RlxKernelsSum, 1);

  s->n = n;
  s->cur = -1;
  return s;
}

void
rlx_kernels_sum_free (RlxKernelsSum *sum)
{
  if (sum == NULL)
    return;
  g_free (sum->buf[0]);
  g_free (sum->buf[1]);
  g_free (sum);
}

void
rlx_kernels_sum_reset (RlxKernelsSum *sum)
{
  g_return_if_fail (sum != NULL);
  sum->cur = -1;
  sum->count = 0;
}

gboolean
rlx_kernels_sum_add (RlxKernels *kernels, RlxKernelsSum *sum, const void *codes, gsize n,
                     RlxPrecision p, double scale, float w, GError **error)
{
  int next;

  g_return_val_if_fail (sum != NULL, FALSE);

  if (n != sum->n)
    {
      g_set_error (error, RLX_KERNELS_ERROR, RLX_KERNELS_ERROR_INVALID,
                   "bucket of %" G_GSIZE_FORMAT " values, the sum holds %" G_GSIZE_FORMAT,
                   n, sum->n);
      return FALSE;
    }
  next = sum->cur == 0 ? 1 : 0;
  if (sum->buf[next] == NULL)
    sum->buf[next] = g_new (float, MAX (sum->n, 1));
  if (!rlx_kernels_accumulate (kernels, sum->buf[next], sum->cur < 0 ? NULL : sum->buf[sum->cur],
                               codes, n, p, scale, w, NULL, error))
    return FALSE;
  sum->cur = next;
  sum->count++;
  return TRUE;
}

const float *
rlx_kernels_sum_get (RlxKernelsSum *sum)
{
  g_return_val_if_fail (sum != NULL, NULL);
  return sum->cur < 0 ? NULL : sum->buf[sum->cur];
}

guint
rlx_kernels_sum_count (RlxKernelsSum *sum)
{
  g_return_val_if_fail (sum != NULL, 0);
  return sum->count;
}

gsize
rlx_kernels_sum_size (RlxKernelsSum *sum)
{
  g_return_val_if_fail (sum != NULL, 0);
  return sum->n;
}

/* ── encode the update ──────────────────────────────────────────────────── */

typedef struct {
  const Loops *l;
  Codec        codec;
  const float *sum;
  const float *r_in;
  float       *r_out;
  float       *params;
  float       *update;
  guint8      *payload;  /* NULL: the codes are only needed for d */
  gsize        n;
  float        lr, inv;
  guint64     *slot;     /* pass 1: max |u| bits or NO_BAD…; pass 2: chunk hashes */
  guint64     *bad;      /* pass 1: first non-finite index per chunk */
  gboolean     hash;
} UpdJob;

static void
upd_pass1 (gpointer data, gsize c)
{
  UpdJob *j = data;
  float u[BLOCK];
  gsize end = MIN ((c + 1) * CHUNK, j->n);
  float m = 0;

  j->bad[c] = NO_BAD;
  for (gsize i = c * CHUNK; i < end; i += BLOCK)
    {
      gsize b = MIN (BLOCK, end - i);

      if (j->l->u (u, j->sum + i, j->r_in ? j->r_in + i : NULL, b, j->lr, j->inv))
        {
          for (gsize k = 0; k < b; k++)
            if (nonfinite_bits (bits_of (u[k])))
              {
                j->bad[c] = i + k;
                break;
              }
          return;
        }
      if (j->codec.p != RLX_PRECISION_F32)
        {
          float t = j->codec.k->maxabs (u, b);
          m = MAX (m, t);
        }
    }
  j->slot[c] = bits_of (m);
}

static void
upd_pass2 (gpointer data, gsize c)
{
  UpdJob *j = data;
  float u[BLOCK], tmp[BLOCK];
  guint8 q[BLOCK * 4];
  gsize start = c * CHUNK, end = MIN ((c + 1) * CHUNK, j->n);

  for (gsize i = start; i < end; i += BLOCK)
    {
      gsize b = MIN (BLOCK, end - i);
      const float *d = u;

      j->l->u (u, j->sum + i, j->r_in ? j->r_in + i : NULL, b, j->lr, j->inv);
      /* What a receiver decodes (f32: u itself, and the residual is 0). */
      if (j->payload != NULL)
        {
          codec_quantize (&j->codec, u, i, b, j->payload);
          if (j->codec.p != RLX_PRECISION_F32)
            d = codec_block (&j->codec, j->payload, i, b, tmp);
        }
      else if (j->codec.p != RLX_PRECISION_F32)
        {
          /* the codes in a block of our own, read back at once */
          codec_quantize (&j->codec, u, 0, b, q);
          d = codec_block (&j->codec, q, 0, b, tmp);
        }
      j->l->finish (u, d, j->r_out ? j->r_out + i : NULL, j->params ? j->params + i : NULL,
                    j->update ? j->update + i : NULL, b);
    }
  if (j->hash)
    hash_work_chunk (j->params, j->n, c, j->slot);
}

static void
upd_job_init (UpdJob *j, const float *sum, gsize n, float lr, float inv, const float *r_in,
              float *r_out, RlxPrecision p, float *params)
{
  j->l = loops ();
  j->sum = sum;
  j->r_in = r_in;
  j->r_out = r_out;
  j->params = params;
  j->n = n;
  j->lr = lr;
  j->inv = inv;
  j->codec.p = p;
  j->codec.k = rlx_wire_kernels ();
}

/* Pass 1 of an update: its largest |u| (unless @known_max gives it), the
 * first non-finite u; then the scale as core/wire computes it. */
static gboolean
upd_scale (RlxKernels *self, UpdJob *j, RlxPrecision p, guint32 known_max, double *scale_out,
           gsize *bad_index, GError **error)
{
  ChunkSlots s1, s2;
  gsize n = j->n, n_chunks = n_chunks_of (n), bad;
  float maxabs = 0;
  double scale = 1.0;

  if (known_max != RLX_KERNELS_MAX_UNKNOWN)
    memcpy (&maxabs, &known_max, 4);
  else if (n > 0)
    {
      j->slot = chunk_slots_init (&s1, n);
      j->bad = chunk_slots_init (&s2, n);
      parallel_for (self, n, upd_pass1, j);
      bad = first_bad (j->bad, n_chunks);
      for (gsize c = 0; c < n_chunks && bad == G_MAXSIZE; c++)
        {
          float m;
          guint32 b = (guint32) j->slot[c];

          memcpy (&m, &b, 4);
          maxabs = MAX (maxabs, m);
        }
      chunk_slots_clear (&s1);
      chunk_slots_clear (&s2);
      j->slot = j->bad = NULL;
      if (bad != G_MAXSIZE)
        {
          float v = j->lr * (j->sum[bad] * j->inv) + (j->r_in ? j->r_in[bad] : 0.0f);

          if (bad_index)
            *bad_index = bad;
          set_nonfinite_error (error, bad, v, "update");
          return FALSE;
        }
    }
  /* The scale as core/wire computes it from the largest finite |u|. */
  if (p != RLX_PRECISION_F32 && maxabs > 0)
    scale = rlx_precision_target (p) / (double) maxabs;
  codec_init (&j->codec, p, scale);
  *scale_out = scale;
  return TRUE;
}

/* Pass 2: quantise, dequantise, residual, apply, hash. */
static void
upd_finish (RlxKernels *self, UpdJob *j, guint64 *hash_out)
{
  ChunkSlots s;

  j->hash = hash_out != NULL;
  j->slot = chunk_slots_init (&s, j->n);
  if (j->n > 0)
    parallel_for (self, j->n, upd_pass2, j);
  if (hash_out)
    *hash_out = rlx_params_hash_combine (j->slot, j->n);
  chunk_slots_clear (&s);
}

GBytes *
rlx_kernels_encode_update (RlxKernels *self, JsonObject *header, const char *field,
                           const float *sum, gsize n, float lr, guint64 samples, float *residual,
                           RlxPrecision p, float *params, float *update, guint64 *hash_out,
                           GError **error)
{
  UpdJob j = { 0 };
  gsize len = 0, off = 0;
  double scale = 1.0;
  guint8 *buf;

  g_return_val_if_fail (RLX_IS_KERNELS (self), NULL);
  g_return_val_if_fail (sum != NULL || n == 0, NULL);
  g_return_val_if_fail (hash_out == NULL || params != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!precision_ok (p) || samples == 0)
    {
      g_set_error (error, RLX_KERNELS_ERROR, RLX_KERNELS_ERROR_INVALID,
                   "cannot make an update at precision %d over %" G_GUINT64_FORMAT " samples",
                   (int) p, samples);
      return NULL;
    }
  upd_job_init (&j, sum, n, lr, (float) (1.0 / (double) samples), residual, residual, p, params);
  j.update = update;
  if (!upd_scale (self, &j, p, RLX_KERNELS_MAX_UNKNOWN, &scale, NULL, error))
    return NULL;
  buf = rlx_wire_frame_alloc (header, field ? field : "g", n, p, scale, &len, &off, error);
  if (buf == NULL)
    return NULL;
  j.payload = buf + off;
  upd_finish (self, &j, hash_out);
  return g_bytes_new_take (buf, len);
}

gboolean
rlx_kernels_make_update (RlxKernels *self, const float *sum, gsize n, float lr, float inv,
                         const float *r_in, float *r_out, RlxPrecision p, guint32 known_max,
                         void *codes, double *scale_out, float *params, guint64 *hash_out,
                         gsize *bad_index, GError **error)
{
  UpdJob j = { 0 };
  double scale = 1.0;

  g_return_val_if_fail (RLX_IS_KERNELS (self), FALSE);
  g_return_val_if_fail (sum != NULL || n == 0, FALSE);
  g_return_val_if_fail (hash_out == NULL || params != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (bad_index)
    *bad_index = G_MAXSIZE;
  if (!precision_ok (p))
    {
      g_set_error (error, RLX_KERNELS_ERROR, RLX_KERNELS_ERROR_INVALID,
                   "cannot make an update at precision %d", (int) p);
      return FALSE;
    }
  upd_job_init (&j, sum, n, lr, inv, r_in, r_out, p, params);
  j.payload = codes;
  if (!upd_scale (self, &j, p, known_max, &scale, bad_index, error))
    return FALSE;
  upd_finish (self, &j, hash_out);
  if (scale_out)
    *scale_out = scale;
  return TRUE;
}

/* ── apply, hash ────────────────────────────────────────────────────────── */

typedef struct {
  const Loops *l;
  Codec        codec;
  float       *params;
  const void  *codes;
  gsize        n;
  guint64     *hash;     /* per chunk, or NULL */
} ApplyJob;

static void
apply_chunk (gpointer data, gsize c)
{
  ApplyJob *j = data;
  float tmp[BLOCK];
  gsize end = MIN ((c + 1) * CHUNK, j->n);

  for (gsize i = c * CHUNK; i < end; i += BLOCK)
    {
      gsize m = MIN (BLOCK, end - i);

      j->l->sub (j->params + i, codec_block (&j->codec, j->codes, i, m, tmp), m);
    }
  if (j->hash)
    hash_work_chunk (j->params, j->n, c, j->hash);
}

void
rlx_kernels_apply (RlxKernels *self, float *params, const void *codes, gsize n, RlxPrecision p,
                   double scale, guint64 *hash_out)
{
  ApplyJob j = { 0 };
  ChunkSlots slots;

  g_return_if_fail (RLX_IS_KERNELS (self));
  g_return_if_fail ((params != NULL && codes != NULL) || n == 0);
  g_return_if_fail (precision_ok (p));
  g_return_if_fail (scale_ok (p, scale));

  j.l = loops ();
  codec_init (&j.codec, p, scale);
  j.params = params;
  j.codes = codes;
  j.n = n;
  j.hash = hash_out ? chunk_slots_init (&slots, n) : NULL;
  if (n > 0)
    parallel_for (self, n, apply_chunk, &j);
  if (hash_out)
    {
      *hash_out = rlx_params_hash_combine (j.hash, n);
      chunk_slots_clear (&slots);
    }
}

typedef struct {
  const Loops  *l;
  const guint8 *codes;
  gsize         n;
  RlxPrecision  p;
  guint64      *bad;     /* per chunk: first bad index or NO_BAD */
} CheckJob;

static void
check_chunk (gpointer data, gsize c)
{
  CheckJob *j = data;
  gsize es = rlx_precision_element_size (j->p);
  gsize from = c * CHUNK, to = MIN ((c + 1) * CHUNK, j->n);
  gsize bytes = (to - from) * es, words = bytes / 8;
  const guint8 *b = j->codes + from * es;
  const guint64 *swar = rlx_wire_code_masks (j->p);   /* core/wire's */
  guint64 acc = 0;

  j->bad[c] = NO_BAD;
  if (((guintptr) b % 8) == 0)
    acc = j->l->codes_bad ((const guint64 *) b, words, swar[0], swar[1],
                           swar[2]);
  else
    for (gsize w = 0; w < words; w++)
      {
        guint64 v;
        memcpy (&v, b + 8 * w, 8);
        acc |= ((v & swar[0]) + swar[1]) & swar[2];
      }
  if (acc == 0)
    {
      /* the tail: whole elements of less than a word */
      for (gsize i = from + words * 8 / es; i < to; i++)
        if (rlx_wire_code_bad (j->codes, i, j->p))
          {
            j->bad[c] = i;
            return;
          }
      return;
    }
  for (gsize i = from; i < to; i++)
    if (rlx_wire_code_bad (j->codes, i, j->p))
      {
        j->bad[c] = i;
        return;
      }
}

gssize
rlx_kernels_codes_check (RlxKernels *self, const void *codes, gsize n, RlxPrecision p)
{
  CheckJob j = { loops (), codes, n, p, NULL };
  ChunkSlots slots;
  gsize bad;

  g_return_val_if_fail (RLX_IS_KERNELS (self), -1);
  g_return_val_if_fail (codes != NULL || n == 0, -1);
  g_return_val_if_fail (precision_ok (p), -1);
  G_STATIC_ASSERT (G_BYTE_ORDER == G_LITTLE_ENDIAN);   /* the words are read as LE */

  j.bad = chunk_slots_init (&slots, n);
  if (n > 0)
    parallel_for (self, n, check_chunk, &j);
  bad = first_bad (j.bad, n_chunks_of (n));
  chunk_slots_clear (&slots);
  return bad == G_MAXSIZE ? -1 : (gssize) bad;
}

typedef struct {
  const Loops *l;
  const float *x;
  gsize        n;
  guint64     *slot;
} MaxJob;

static void
max_chunk (gpointer data, gsize c)
{
  MaxJob *j = data;
  gsize start = c * CHUNK, end = MIN ((c + 1) * CHUNK, j->n);

  j->slot[c] = j->l->maxbits (j->x + start, end - start);
}

guint32
rlx_kernels_max_abs_bits (RlxKernels *self, const float *x, gsize n)
{
  MaxJob j = { loops (), x, n, NULL };
  ChunkSlots slots;
  guint32 m = 0;

  g_return_val_if_fail (RLX_IS_KERNELS (self), 0);
  g_return_val_if_fail (x != NULL || n == 0, 0);

  j.slot = chunk_slots_init (&slots, n);
  if (n > 0)
    parallel_for (self, n, max_chunk, &j);
  for (gsize c = 0; c < n_chunks_of (n); c++)
    m = MAX (m, (guint32) j.slot[c]);
  chunk_slots_clear (&slots);
  return m;
}

typedef struct {
  const float *params;
  gsize        n;
  guint64     *hash;
} HashJob;

static void
hash_chunk (gpointer data, gsize c)
{
  HashJob *j = data;

  hash_work_chunk (j->params, j->n, c, j->hash);
}

guint64
rlx_kernels_hash (RlxKernels *self, const float *params, gsize n)
{
  HashJob j = { params, n, NULL };
  ChunkSlots slots;
  guint64 h;

  g_return_val_if_fail (RLX_IS_KERNELS (self), 0);
  g_return_val_if_fail (params != NULL || n == 0, 0);

  j.hash = chunk_slots_init (&slots, n);
  if (n > 0)
    parallel_for (self, n, hash_chunk, &j);
  h = rlx_params_hash_combine (j.hash, n);
  chunk_slots_clear (&slots);
  return h;
}

/* ── async ──────────────────────────────────────────────────────────────── */

typedef struct {
  RlxKernelsFunc func;
  gpointer       data;
  GDestroyNotify data_free;
} RunData;

static void
run_data_free (gpointer p)
{
  RunData *r = p;

  if (r->data_free)
    r->data_free (r->data);
  g_free (r);
}

static void
run_thread (GTask *task, gpointer source, gpointer task_data, GCancellable *cancellable)
{
  RunData *r = task_data;
  GError *error = NULL;
  RlxFpScope fp;
  gboolean ok;

  if (g_task_return_error_if_cancelled (task))
    return;
  fp = rlx_fp_scope_begin_exact ();   /* a GLib pool thread: any mode */
  ok = r->func (RLX_KERNELS (source), r->data, cancellable, &error);
  rlx_fp_scope_end (fp);
  if (ok)
    g_task_return_boolean (task, TRUE);
  else if (error != NULL)
    g_task_return_error (task, error);
  else
    g_task_return_new_error (task, RLX_KERNELS_ERROR, RLX_KERNELS_ERROR_INVALID,
                             "a kernel job failed without saying why");
}

void
rlx_kernels_run_async (RlxKernels *self, RlxKernelsFunc func, gpointer data,
                       GDestroyNotify data_free, GCancellable *cancellable,
                       GAsyncReadyCallback callback, gpointer user_data)
{
  g_autoptr(GTask) task = NULL;
  RunData *r;

  g_return_if_fail (RLX_IS_KERNELS (self));
  g_return_if_fail (func != NULL);

  r = g_new0 (RunData, 1);
  r->func = func;
  r->data = data;
  r->data_free = data_free;
  task = g_task_new (self, cancellable, callback, user_data);
  g_task_set_source_tag (task, rlx_kernels_run_async);
  g_task_set_name (task, "rlx-kernels job");
  g_task_set_task_data (task, r, run_data_free);
  /* The calling thread of the job is a GIO worker; the chunks go to the
   * pool's threads as with any synchronous call. */
  g_task_run_in_thread (task, run_thread);
}

gboolean
rlx_kernels_run_finish (RlxKernels *self, GAsyncResult *result, GError **error)
{
  g_return_val_if_fail (g_task_is_valid (result, self), FALSE);
  g_return_val_if_fail (g_task_get_source_tag (G_TASK (result)) == rlx_kernels_run_async, FALSE);
  return g_task_propagate_boolean (G_TASK (result), error);
}

typedef struct {
  float       *params;
  GBytes      *keep;
  const void  *codes;
  gsize        n;
  RlxPrecision p;
  double       scale;
  guint64      hash;
} ApplyAsync;

static void
apply_async_free (gpointer data)
{
  ApplyAsync *a = data;

  g_clear_pointer (&a->keep, g_bytes_unref);
  g_free (a);
}

static gboolean
apply_async_run (RlxKernels *self, gpointer data, GCancellable *cancellable, GError **error)
{
  ApplyAsync *a = data;

  rlx_kernels_apply (self, a->params, a->codes, a->n, a->p, a->scale, &a->hash);
  return TRUE;
}

void
rlx_kernels_apply_async (RlxKernels *self, float *params, GBytes *keep, const void *codes,
                         gsize n, RlxPrecision p, double scale, GCancellable *cancellable,
                         GAsyncReadyCallback callback, gpointer user_data)
{
  ApplyAsync *a;

  g_return_if_fail (RLX_IS_KERNELS (self));
  g_return_if_fail (precision_ok (p) && scale_ok (p, scale));

  a = g_new0 (ApplyAsync, 1);
  a->params = params;
  a->keep = keep ? g_bytes_ref (keep) : NULL;
  a->codes = codes;
  a->n = n;
  a->p = p;
  a->scale = scale;
  rlx_kernels_run_async (self, apply_async_run, a, apply_async_free, cancellable, callback,
                         user_data);
}

gboolean
rlx_kernels_apply_finish (RlxKernels *self, GAsyncResult *result, guint64 *hash_out,
                          GError **error)
{
  RunData *r;

  if (!rlx_kernels_run_finish (self, result, error))
    return FALSE;
  r = g_task_get_task_data (G_TASK (result));
  if (hash_out)
    *hash_out = ((ApplyAsync *) r->data)->hash;
  return TRUE;
}

/* ── references ─────────────────────────────────────────────────────────── */

gboolean
rlx_kernels_ref_accumulate (float *dst, const float *src, const void *codes, gsize n,
                            RlxPrecision p, double scale, float w, gsize *bad_index)
{
  g_autofree float *x = g_new (float, MAX (n, 1));
  gsize bad = G_MAXSIZE;
  RlxFpScope fp = rlx_fp_scope_begin_exact ();

  rlx_wire_dequantize (codes, n, p, scale, x);
  for (gsize i = 0; i < n; i++)
    {
      if (bad == G_MAXSIZE && !isfinite (x[i]))
        bad = i;
      dst[i] = src ? src[i] + w * x[i] : w * x[i];
    }
  rlx_fp_scope_end (fp);
  if (bad_index)
    *bad_index = bad;
  return bad == G_MAXSIZE;
}

void
rlx_kernels_ref_apply (float *params, const void *codes, gsize n, RlxPrecision p, double scale)
{
  g_autofree float *x = g_new (float, MAX (n, 1));
  RlxFpScope fp = rlx_fp_scope_begin_exact ();

  rlx_wire_dequantize (codes, n, p, scale, x);
  for (gsize i = 0; i < n; i++)
    params[i] -= x[i];
  rlx_fp_scope_end (fp);
}
