/* rlx-local-ranks.h — the headless ranks "Add local rank" starts beside the app
 *
 * Each local rank is a `rlx-rank join --local --json --node ID …` process in
 * the app's cohort. Its JSON event stream (stdout) goes to a log file,
 * LOG_DIR/ID.jsonl, so a person (or a test) can read what the rank itself
 * reported; its stderr is read to explain an exit.
 *
 * Children run at a lower CPU priority (nice 5): the desktop and the app's
 * own node come first when both want a core.
 *
 * Children never outlive the app: stop sends SIGTERM (the rank says bye and
 * leaves cleanly) and SIGKILL after a grace period; each child also asks the
 * kernel for SIGTERM when the app dies (PR_SET_PDEATHSIG), so a killed app
 * leaves nothing behind either. Dropping the object sends SIGTERM to every
 * child still running.
 *
 * Threads: main thread only; spawning is a fork/exec, no waiting.
 */
#pragma once

#include <gio/gio.h>

G_BEGIN_DECLS

#define RLX_TYPE_LOCAL_RANKS (rlx_local_ranks_get_type ())
G_DECLARE_FINAL_TYPE (RlxLocalRanks, rlx_local_ranks, RLX, LOCAL_RANKS, GObject)

/* Signals:
 *   ::exited (const char *node_id, gboolean expected, const char *message)
 *       a child is gone. @expected: it was stopped (or finished with status
 *       0); otherwise @message says why it stopped (its last line on stderr,
 *       or its exit status).
 * Properties:
 *   "n-running"  uint  children alive
 */

/* @rlx_rank: the rlx-rank executable; @log_dir: where the JSON logs go
 * (created, 0700). */
RlxLocalRanks *rlx_local_ranks_new          (const char *rlx_rank, const char *log_dir);
/* Each log is bounded: past this many bytes ID.jsonl becomes ID.jsonl.1
 * (the one before is dropped) and a new ID.jsonl goes on (rlx-rank join
 * --log-max-bytes). Set before spawning (tests: small). */
#define RLX_LOCAL_RANKS_LOG_MAX_BYTES (32u << 20)
void           rlx_local_ranks_set_log_max_bytes (RlxLocalRanks *self, guint max_bytes);

/* Start `rlx-rank join --local --json --cohort COHORT --node ID OPTIONS…`.
 * Returns the new rank's node id, or NULL with an error that says what
 * failed (the executable missing, the log file unwritable). */
char          *rlx_local_ranks_spawn        (RlxLocalRanks      *self,
                                             const char         *cohort,
                                             const char * const *options,
                                             GError            **error);

/* The same, joining the cohort of @invite (rlx://…; NULL: the local one):
 * the child gets `--invite -` and reads the invite from a pipe, so the key
 * never appears in its arguments. */
char          *rlx_local_ranks_spawn_with_invite (RlxLocalRanks      *self,
                                                  const char         *cohort,
                                                  const char         *invite,
                                                  const char * const *options,
                                                  GError            **error);

/* Tell every running child to use wire precision @precision ("f16", …)
 * from its next message (a line on its stdin: rlx-rank join
 * --control-stdin); ranks started later get it with their options. */
void           rlx_local_ranks_set_precision (RlxLocalRanks *self, const char *precision);

/* Stop every child: SIGTERM, SIGKILL after @grace_ms. Completes when all
 * have exited (at once when none runs). */
void           rlx_local_ranks_stop_async   (RlxLocalRanks      *self,
                                             guint               grace_ms,
                                             GAsyncReadyCallback callback,
                                             gpointer            user_data);
gboolean       rlx_local_ranks_stop_finish  (RlxLocalRanks *self,
                                             GAsyncResult  *result,
                                             GError       **error);

guint          rlx_local_ranks_get_n_running (RlxLocalRanks *self);
/* Process ids of the children alive (tests). */
GArray        *rlx_local_ranks_dup_pids     (RlxLocalRanks *self);
const char    *rlx_local_ranks_get_log_dir  (RlxLocalRanks *self);
/* Node ids of the children alive, in start order (NULL-terminated). */
char         **rlx_local_ranks_dup_node_ids (RlxLocalRanks *self);

/* $RLX_RANK if set; else tools/rlx-rank of the build tree this executable
 * runs from; else the installed BINDIR/rlx-rank; else rlx-rank on PATH. */
char          *rlx_local_ranks_find_rlx_rank (void);

G_END_DECLS
