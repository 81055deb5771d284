/* node-test-utils.h — helpers for the tests that run nodes and ranks
 * (tests/core's node tests, tests/app)
 *
 * Every test program gets its own temporary XDG_RUNTIME_DIR, XDG_DATA_HOME
 * and XDG_STATE_HOME (node_test_init, before anything reads them), so its
 * cohorts never meet another test's. Waits spin the default main context
 * until a condition holds, with a timeout: never a sleep.
 */
#pragma once

#include <glib.h>
#include <json-glib/json-glib.h>

G_BEGIN_DECLS

/* Call first in main (before g_test_init and gtk_init). Returns the temp dir. */
const char *node_test_init        (void);
/* Remove the temp dir (call at the end of main). */
void        node_test_cleanup     (void);

typedef gboolean (*NodeTestPred) (gpointer data);
/* Iterate the default main context until @pred (data) or @timeout_ms;
 * @pred is also looked at every 20 ms (for files and processes). */
gboolean    node_test_wait        (NodeTestPred pred, gpointer data, guint timeout_ms);
/* Iterate for about @ms of wall time (lets events in; never an assertion). */
void        node_test_spin        (guint ms);

/* Events (JsonObject*, as a node or rank emitted them, in order): the index
 * of the first named @name whose integer @key is at least @min (@key NULL:
 * any), or -1. */
int         node_test_event_index (GPtrArray *events, const char *name, const char *key,
                                  gint64 min);
typedef const char *(*NodeTestDescribe) (gpointer data);
/* Wait up to @timeout_ms for that event and return it. Otherwise print the
 * events seen so far and abort, with @describe (data) (e.g. a node's state;
 * NULL: nothing) in the message. */
JsonObject *node_test_wait_event  (GPtrArray *events, const char *name, const char *key,
                                  gint64 min, guint timeout_ms,
                                  NodeTestDescribe describe, gpointer data);

/* The first event named @name in the JSON-lines file at @path (a rank's
 * log) whose "step" is at least @min_step (0: any), or NULL (no such
 * event yet, or no file). Lines that do not parse are skipped. */
JsonObject *node_test_log_find   (const char *path, const char *name, gint64 min_step);

/* A cohort name unique to this process and @tag. */
char       *node_test_cohort_name (const char *tag);

G_END_DECLS
