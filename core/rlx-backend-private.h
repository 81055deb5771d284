/* rlx-backend-private.h — test hooks of the backend (not for the rank)
 *
 * Private to core/'s backend files and their tests; the statistics the
 * coordinator reads are in rlx-backend.h, the fault it injects in
 * rlx-backend-faults.h.
 *
 * Threads: as rlx-backend.h (the thread that owns the backend).
 */
#pragma once

#include "rlx-backend.h"
#include "rlx-backend-policy.h"   /* the claims, for tests */
#include "rlx-backend-faults.h"   /* the gradient poison, for tests */

G_BEGIN_DECLS

/* The Vulkan trainer behind a vulkan backend (NULL for cpu): for tests of
 * its wire arithmetic at sizes other than a model's. */
struct _RlxVkTrainer *rlx_backend_vk_trainer (RlxBackend *self);

G_END_DECLS
