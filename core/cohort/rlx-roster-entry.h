/* rlx-roster-entry.h — one rank of the cohort as this node sees it: a row of
 * the roster (rlx_coordinator_get_roster, rlx_node_thread_get_roster)
 *
 * Public: the app binds its roster view to these properties. The entries
 * are made and changed by the roster (rlx-roster.h, the cohort engine's
 * side); nobody else writes them.
 *
 * Threads: one thread, the roster's: the coordinator's on the node's
 * thread, or the UI thread for the app's mirror (rlx-node-thread.h).
 */
#pragma once

#include <glib-object.h>

G_BEGIN_DECLS

#define RLX_TYPE_ROSTER_ENTRY (rlx_roster_entry_get_type ())
G_DECLARE_FINAL_TYPE (RlxRosterEntry, rlx_roster_entry, RLX, ROSTER_ENTRY, GObject)

/* One rank of the cohort as this node sees it. The roster is a GListModel of
 * these in seniority order (the leader first); rows are added and removed as
 * ranks join and leave, and an entry's properties change in place.
 *
 * Read-only properties (notify on change):
 *   "node-id"    string   the rank's node id
 *   "rank"       uint     its position in seniority order (0: the most senior)
 *   "host"       string   host name it reported
 *   "backend"    string   "cpu" or "vulkan"
 *   "device"     string   what it computes on ("NVIDIA H200", "CPU, OpenBLAS, …")
 *   "fallback"   string   why a faster backend was passed over ("" if none)
 *   "precision"  string   its wire precision now ("f32", "f16", "f8e4m3", "f8e5m2")
 *   "speed"      double   samples/s of compute, measured
 *   "state"      string   "computing", "waiting", "stalled", "rejoining", "leaving"
 *   "bytes-tx"   uint64   wire bytes the rank has sent (as it last reported)
 *   "bytes-rx"   uint64   wire bytes the rank has received (as it last reported)
 *   "is-leader"  boolean
 *   "is-self"    boolean  this node's own row
 *   "link"       string   this node's link to the rank as --sync auto measures it
 *                         ("25 MB/s, 53 ms", "local"; "" for its own row) */
const char *rlx_roster_entry_get_node_id   (RlxRosterEntry *self);
const char *rlx_roster_entry_get_host      (RlxRosterEntry *self);
const char *rlx_roster_entry_get_backend   (RlxRosterEntry *self);
const char *rlx_roster_entry_get_device    (RlxRosterEntry *self);
const char *rlx_roster_entry_get_fallback  (RlxRosterEntry *self);
const char *rlx_roster_entry_get_precision (RlxRosterEntry *self);
double      rlx_roster_entry_get_speed     (RlxRosterEntry *self);
gboolean    rlx_roster_entry_get_is_leader (RlxRosterEntry *self);
gboolean    rlx_roster_entry_get_is_self   (RlxRosterEntry *self);
guint       rlx_roster_entry_get_rank      (RlxRosterEntry *self);
const char *rlx_roster_entry_get_state     (RlxRosterEntry *self);
guint64     rlx_roster_entry_get_bytes_tx  (RlxRosterEntry *self);
guint64     rlx_roster_entry_get_bytes_rx  (RlxRosterEntry *self);
const char *rlx_roster_entry_get_link      (RlxRosterEntry *self);

G_END_DECLS
