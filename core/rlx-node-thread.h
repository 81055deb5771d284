/* rlx-node-thread.h — an RlxNode on a thread of its own, mirrored to the
 * thread that owns it
 *
 * The desktop app's node does its protocol work (the coordinator's
 * handlers, routing every link frame, building events) at the pace of the
 * cohort: hundreds of steps a second with a few local ranks. On the UI
 * thread that work competed with GTK's frames and took most of the UI
 * thread's time. RlxNodeThread moves all of it to a dedicated thread, with
 * its own GMainContext (pushed as thread-default) and GMainLoop, where the
 * RlxNode is created, started, left and dropped; RlxNode's contract (one
 * thread whose thread-default context runs) holds there. The owner thread
 * (the one that creates this object; the UI thread in the app) only gets
 * the results, batched:
 *
 *   ::event, ::link-added, ::finished, "state", start/leave completion and
 *   the roster are queued in order under a mutex on the node thread and
 *   delivered on the owner's thread-default context by one source at a
 *   time, at most every FLUSH_INTERVAL_MS (50 ms): 480 events a second
 *   cost the owner twenty wakeups, not 480. Events are deep copies made on
 *   the node thread, handed over and never touched there again.
 *
 *   The roster (rlx_node_thread_get_roster) is a GListModel of
 *   RlxRosterEntry owned by the owner thread, synced from snapshots the
 *   node thread takes whenever the coordinator syncs its own roster (at
 *   most four times a second while it steps, at once on joins, leaves and
 *   role changes): rows keep their objects by node id and change in place,
 *   so bound labels just get notify; joins and leaves insert and remove.
 *
 *   Byte counters are stored under the mutex on every change and can be
 *   read from any thread.
 *
 *   set_precision runs on the node thread (at once if the node runs, or
 *   when its coordinator appears).
 *
 * Nothing here calls into the coordinator or the links from the owner
 * thread. Leave (or the node finishing by itself) ends the node thread's
 * loop; the thread drops the node, destroys its context and exits, and the
 * owner joins it when the last item arrives ("stopped"), so leave_finish
 * comes after the thread is gone. Dispose while running drops the node on
 * its thread (links closed, as when a process goes away) and joins the
 * thread; no callback reaches a disposed owner.
 *
 * No GTK here: the headless tests cover it. `rlx-rank join` keeps a plain
 * RlxNode on its main thread (it has no UI to keep free).
 *
 * Threads: create and use on one thread whose thread-default main context
 * runs (the owner); signals, notifications and callbacks come back there.
 */
#pragma once

#include <gio/gio.h>
#include <json-glib/json-glib.h>
#include "core/rlx-node.h"

G_BEGIN_DECLS

#define RLX_TYPE_NODE_THREAD (rlx_node_thread_get_type ())
G_DECLARE_FINAL_TYPE (RlxNodeThread, rlx_node_thread, RLX, NODE_THREAD, GObject)

/* Signals (on the owner thread, in the order they happened):
 *   ::event (RlxEvent *event)   the node's ::event (the same read-only event:
 *       its reference count is atomic, nothing in it is shared otherwise)
 *   ::link-added (const char *peer_id)   the node got a link to @peer_id
 *       (the link itself stays on the node thread)
 *   ::finished (gboolean success, const char *message)   the node's ::finished
 * Properties (notify on the owner thread):
 *   "state"   string  the node's: "idle", "starting", "running", "leaving",
 *                     "stopped" ("stopped" once the thread is gone, too)
 *   "cohort", "node-id"  string, read-only */

/* Checks @config as rlx_node_new does (the same errors), and fixes the node
 * id (a fresh one when @config has none) so the owner knows it at once.
 * @config is copied (strings too); nothing starts yet. */
RlxNodeThread  *rlx_node_thread_new          (const RlxNodeConfig *config, GError **error);

/* Start the node thread and, on it, the node (rlx_node_start_async).
 * Completes on the owner thread once the node runs, with the node's error
 * otherwise. Once only. */
void            rlx_node_thread_start_async  (RlxNodeThread      *self,
                                              GCancellable       *cancellable,
                                              GAsyncReadyCallback callback,
                                              gpointer            user_data);
gboolean        rlx_node_thread_start_finish (RlxNodeThread *self,
                                              GAsyncResult  *result,
                                              GError       **error);

/* Leave (rlx_node_leave_async on the node thread). Completes on the owner
 * thread once the node stopped and its thread was joined; at once if it
 * never started or is gone already. */
void            rlx_node_thread_leave_async  (RlxNodeThread      *self,
                                              const char         *reason,
                                              GAsyncReadyCallback callback,
                                              gpointer            user_data);
gboolean        rlx_node_thread_leave_finish (RlxNodeThread *self,
                                              GAsyncResult  *result,
                                              GError       **error);

const char     *rlx_node_thread_get_state    (RlxNodeThread *self);
const char     *rlx_node_thread_get_cohort   (RlxNodeThread *self);
const char     *rlx_node_thread_get_node_id  (RlxNodeThread *self);
/* rlx_node_dup_invite as the node thread last saw it (when the state
 * changed, and on "joined" and "invite" events); any thread. */
char           *rlx_node_thread_dup_invite   (RlxNodeThread *self);

/* The roster mirror (owner thread): a GListModel of RlxRosterEntry, the
 * same object for the node's whole life; empty until the node runs. */
GListModel     *rlx_node_thread_get_roster   (RlxNodeThread *self);
/* From the latest roster snapshot delivered: the coordinator's "role"
 * ("alone" before any) and "members". */
const char     *rlx_node_thread_get_role     (RlxNodeThread *self);
guint           rlx_node_thread_get_members  (RlxNodeThread *self);
/* The step of the latest "step" event delivered to the owner (0: none). */
guint64         rlx_node_thread_get_step     (RlxNodeThread *self);

/* This node's wire precision from now on (its next message), applied on
 * the node thread. get: the precision asked for last (or the config's). */
void            rlx_node_thread_set_precision (RlxNodeThread *self, RlxPrecision precision);
RlxPrecision    rlx_node_thread_get_precision (RlxNodeThread *self);

/* The coordinator's byte counters as last stored by the node thread (0
 * before it runs; the last figures after it stopped). Any thread. */
void            rlx_node_thread_get_bytes    (RlxNodeThread *self,
                                              guint64       *tx,
                                              guint64       *rx,
                                              guint64       *f32);

/* CPU time the node thread has used, in seconds (its own thread only: not
 * the compute worker's or the links' I/O threads); 0 before it starts, the
 * final figure after it stopped. Any thread. */
double          rlx_node_thread_get_cpu_seconds (RlxNodeThread *self);

/* For tests and tools: @hook runs on the node thread with the RlxNode just
 * after it is made, before it starts (connect to its signals there; they
 * are emitted on the node thread). Set before start. */
typedef void (*RlxNodeThreadHook) (RlxNode *node, gpointer user_data);
void            rlx_node_thread_set_node_hook (RlxNodeThread    *self,
                                               RlxNodeThreadHook hook,
                                               gpointer          user_data);

G_END_DECLS
