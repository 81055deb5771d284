/* rlx-backend-policy.h — which backend a rank takes, and why (no device opened)
 *
 * rlx_backend_resolve (rlx-backend.h) is this policy plus the devices:
 *   1. rlx_backend_candidates (rlx-backend.h): what may train the model for
 *      the request, best first, from device descriptions alone, with a
 *      reason for every device passed over;
 *   2. rlx_backend_claim_order: the first Vulkan device no other local rank
 *      holds goes first, its lock held (one GPU per local rank);
 *   3. rlx_backend_choose: opens the candidates in that order through the
 *      caller's function until one starts — an explicit vulkan request that
 *      fails to start is refused, `auto` moves on and says why — and joins
 *      the reasons into the fallback text (passed over, failed to start, the
 *      claim's note, the opened backend's own note, in that order).
 * Tests drive each step with hand-made devices, a temporary lock folder and
 * a fake opener (tests/core/test-resolve.c).
 *
 * Threads: any thread. Nothing here keeps state: a claim is an flock'ed
 * file, held by the descriptor the caller is given.
 */
#pragma once

#include <glib.h>
#include "core/rlx-backend.h"

G_BEGIN_DECLS

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

/* Opens candidate @candidate (an index into the devices, or
 * RLX_BACKEND_CPU_CANDIDATE): what it opened, or NULL with @error set (an
 * RLX_BACKEND_ERROR code is kept in the refusal of an explicit request).
 * *@note (NULL to start with) may say why what it opened is slower than it
 * could be; it ends the fallback text. */
typedef gpointer (*RlxBackendOpenFunc) (guint candidate, gpointer user_data, char **note,
                                        GError **error);

typedef struct {
  gpointer opened;     /* what the open function returned */
  guint    candidate;  /* for which candidate */
  int      lock_fd;    /* the claim on its GPU, to hold while it runs; or -1 */
  char    *fallback;   /* the reasons, "; "-joined, "" when none (the caller's to free) */
} RlxBackendChoice;

/* Steps 1–3 above for @request at @compute. @devices, @vulkan_error: as for
 * rlx_backend_candidates. @lock_dir: where claims are made (NULL: none).
 * FALSE with @error when the request cannot be met (as
 * rlx_backend_candidates refuses it, or an explicit vulkan device failed to
 * start, or — auto — every candidate failed). */
gboolean rlx_backend_choose (const char *request, RlxVkCompute compute, const RlxModel *model,
                             guint max_batch,
                             GPtrArray *devices, const char *vulkan_error, const char *lock_dir,
                             RlxBackendOpenFunc open, gpointer user_data,
                             RlxBackendChoice *choice, GError **error);

G_END_DECLS
