/* rlx-backend-private.h — test hooks of the backend (not for the rank) */
#pragma once

#include "rlx-backend.h"

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

/* One GPU per local rank (rlx_backend_resolve does this with the real
 * folder, rlx_backend_gpu_lock_dir): the candidates of rlx_backend_candidates
 * reordered so that the first Vulkan device no other process holds comes
 * first, its lock (an flock'ed file in @lock_dir) then held in *@lock_fd;
 * when every one is held the order stays, *@lock_fd is -1 and *@note says
 * which device is shared. Test with hand-made devices and a temporary
 * folder. */
GArray  *rlx_backend_claim_order (GArray *candidates, GPtrArray *devices, const char *lock_dir,
                                  int *lock_fd, char **note);
char    *rlx_backend_gpu_lock_dir (void);

G_END_DECLS
