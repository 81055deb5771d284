/* rlx-backend-faults.h — the backend's test fault, for the coordinator's
 * fault plan (core/cohort/rlx-fault-plan.h) and the backend's tests
 *
 * Private to core/ and its tests: no rank sets it unless a test's fault
 * plan asks (core/rlx-coordinator-faults.h).
 *
 * Threads: as rlx-backend.h (the thread that owns the backend: the rank's
 * compute worker).
 */
#pragma once

#include "rlx-backend.h"

G_BEGIN_DECLS

/* The next rlx_backend_grads_wire overwrites element @index of its gradient
 * (before error feedback and quantisation) with @value, e.g. NAN or
 * INFINITY, then forgets the poison. */
void rlx_backend_poison_gradient (RlxBackend *self, gsize index, float value);

G_END_DECLS
