/* rlx-backend-private.h — test hooks of the backend (not for the rank)
 *
 * Threads: as rlx-backend.h (the thread that owns the backend).
 */
#pragma once

#include "rlx-backend.h"
#include "rlx-backend-policy.h"   /* the claims, for tests */

G_BEGIN_DECLS

/* Fault injection for tests: the next rlx_backend_grads_wire overwrites
 * element @index of its gradient (before error feedback and quantisation)
 * with @value, e.g. NAN or INFINITY, then forgets the poison. */
void rlx_backend_poison_gradient (RlxBackend *self, gsize index, float value);

/* The Vulkan trainer behind a vulkan backend (NULL for cpu): for tests of
 * its wire arithmetic at sizes other than a model's. */
struct _RlxVkTrainer *rlx_backend_vk_trainer (RlxBackend *self);

/* Parameter-sized bytes the backend (and its trainer) copied on the host
 * since it was made: updates and buckets in, codes out, loads and reads —
 * for benchmarks and for tests that a call moved no more than it should. */
guint64 rlx_backend_host_bytes (RlxBackend *self);
/* Own gradients a round took from behind the last finish (computed while
 * the host handled that finish), since the backend was made. */
guint64 rlx_backend_ahead_taken (RlxBackend *self);
/* On a GPU, the device's own time (timestamps) for the last round's finish
 * (its hash included) and the last gradient: FALSE (both 0) elsewhere. */
gboolean rlx_backend_device_round_us (RlxBackend *self, double *finish_us, double *grad_us);
/* Steps the check mode (RLX_BACKEND_CHECK, rlx-backend-check.h) compared
 * with the CPU since the backend was made (0 without it). */
guint64 rlx_backend_checked_steps (RlxBackend *self);

G_END_DECLS
