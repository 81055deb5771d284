/* rlx-cpu.h — the CPU reference forward/backward, SGD and evaluation
 *
 * Dense layers and the convolutions (as im2col) go through cblas_sgemm.
 * Loss is softmax cross-entropy, mean over the batch, so shard gradients
 * average (weighted by sample count) to the full-batch gradient.
 * A trainer owns scratch memory for up to @max_batch samples; it is used by
 * one thread at a time.
 */
#pragma once

#include <gio/gio.h>
#include "rlx-model.h"
#include "rlx-dataset.h"

G_BEGIN_DECLS

typedef struct _RlxCpuTrainer RlxCpuTrainer;

RlxCpuTrainer *rlx_cpu_trainer_new  (const RlxModel *model, guint max_batch);
void           rlx_cpu_trainer_free (RlxCpuTrainer *self);

/* --compute f16's arithmetic on the CPU, the reference of its check: the
 * dense GEMMs (M×N×K) for which @rule says TRUE read their operands
 * rounded to f16 (round to nearest even), the backward's gradient operand
 * multiplied by @scale (n) before it is rounded and divided by it after —
 * what gpu/shaders/gemm_cm.comp reads; sums stay f32. @rule NULL: f32
 * again. The MLPs only (mnist-cnn: no effect; none of its GEMMs qualify
 * on the GPU). */
typedef gboolean (*RlxCpuF16Rule)  (guint M, guint N, guint K);
typedef float    (*RlxCpuF16Scale) (guint n);
void           rlx_cpu_trainer_set_f16 (RlxCpuTrainer *self, RlxCpuF16Rule rule,
                                        RlxCpuF16Scale scale);
const RlxModel *rlx_cpu_trainer_model (const RlxCpuTrainer *self);

/* Mean loss over the @n samples of @x ([n][784]) and @labels, and its
 * gradient with respect to @params (flat, model->n_params) into @grads.
 * 1 <= n <= max_batch. @grads may be NULL (forward only). Returns the loss. */
float rlx_cpu_trainer_grads (RlxCpuTrainer *self, const float *params,
                             const float *x, const guint8 *labels, guint n,
                             float *grads);

/* Logits ([n][10]) for @n inputs. */
void  rlx_cpu_trainer_forward (RlxCpuTrainer *self, const float *params,
                               const float *x, guint n, float *logits);

/* params -= lr * grads, element-wise in f32 (the one update every replica
 * applies, so replicas given the same update stay bit-identical). */
void  rlx_sgd_step (float *params, const float *grads, gsize n, float lr);

/* Fraction of @split classified correctly, and the mean loss into @loss_out
 * (may be NULL). */
double rlx_cpu_evaluate (RlxCpuTrainer *self, const float *params,
                         const RlxDataset *dataset, RlxSplit split,
                         double *loss_out);
/* The same, stopping between chunks of samples once @cancellable (may be
 * NULL) is cancelled: FALSE then, and nothing is written. An evaluation on
 * a thread of its own uses this, so that whoever stops it waits one chunk
 * (a few ms), not a whole pass over the split. */
gboolean rlx_cpu_evaluate_cancellable (RlxCpuTrainer *self, const float *params,
                                       const RlxDataset *dataset, RlxSplit split,
                                       GCancellable *cancellable, double *accuracy_out,
                                       double *loss_out);

/* CPU threads a trainer may use (process-wide; 0: one per core, the
 * default). Dense layers hand them to BLAS; the CNN runs its two chunk
 * lanes on two threads when 2 or more are allowed. Results do not depend on
 * this setting for the CNN; for dense layers they depend on how the BLAS
 * splits its work. Takes effect for trainers made afterwards (the CNN) or
 * at the next step (dense). rlx_cpu_threads returns the number in force. */
void  rlx_cpu_set_threads (guint n);
guint rlx_cpu_threads     (void);
/* "OpenBLAS 0.3.21 …": what computes the GEMMs. */
const char *rlx_cpu_blas_name (void);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxCpuTrainer, rlx_cpu_trainer_free)

G_END_DECLS
