/* rlx-roster.h — the cohort's ranks as a GListModel of RlxRosterEntry
 *
 * The coordinator describes the cohort as it sees it with rlx_roster_sync
 * (rows in seniority order); the roster keeps one RlxRosterEntry per node id
 * for as long as the node is in the cohort, changes its properties in place
 * (notifying only those that changed) and reports the smallest
 * ::items-changed that turns the old list into the new one, so a list view
 * bound to it keeps its rows, selection and scroll position.
 *
 * RlxRosterEntry's type and getters are public (rlx-roster-entry.h); this
 * header is the cohort engine's side of it.
 *
 * Threads: one thread, the one whose context runs its user: the
 * coordinator's on the node's thread; the app's mirror of it
 * (rlx-node-thread.h, synced from snapshots) on the UI thread.
 */
#pragma once

#include <gio/gio.h>
#include "core/cohort/rlx-roster-entry.h"

G_BEGIN_DECLS

/* What the coordinator knows about one rank. Strings are copied. */
typedef struct {
  const char *node_id;
  const char *host, *backend, *device, *fallback, *precision;
  const char *state;        /* "computing", "waiting", "stalled", "rejoining", "leaving" */
  double      speed;
  guint64     bytes_tx, bytes_rx;
  gboolean    is_leader, is_self;
  const char *link;         /* this node's link to it as measured ("25 MB/s, 53 ms",
                             * "local"); NULL: none (its own row, or not measured) */
} RlxRosterRow;

#define RLX_TYPE_ROSTER (rlx_roster_get_type ())
G_DECLARE_FINAL_TYPE (RlxRoster, rlx_roster, RLX, ROSTER, GObject)

RlxRoster *rlx_roster_new  (void);
/* Make the list @rows[0..n) (ranks = positions). */
void       rlx_roster_sync (RlxRoster *self, const RlxRosterRow *rows, guint n);
/* Change one entry's speed / bytes in place (no-op for unknown ids). */
void       rlx_roster_set_speed (RlxRoster *self, const char *node_id, double speed);
void       rlx_roster_set_bytes (RlxRoster *self, const char *node_id, guint64 tx, guint64 rx);
void       rlx_roster_set_state (RlxRoster *self, const char *node_id, const char *state);

G_END_DECLS
