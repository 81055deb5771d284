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

G_END_DECLS
