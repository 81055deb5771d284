/* remote-test.h — waiting on events in the remote tests
 *
 * WAIT_FOR (cond, timeout_ms, what) iterates the default main context until
 * @cond holds, and fails the test saying what it waited for when
 * @timeout_ms pass first. Every wait of these tests has a deadline; none
 * sleeps to let something happen.
 */
#pragma once

#include <glib.h>

static inline gboolean
remote_test_expired_cb (gpointer user_data)
{
  *(gboolean *) user_data = TRUE;
  return G_SOURCE_REMOVE;
}

#define WAIT_FOR(cond, timeout_ms, what) \
  G_STMT_START { \
    gboolean expired_ = FALSE; \
    guint id_ = g_timeout_add ((timeout_ms), remote_test_expired_cb, &expired_); \
    while (!(cond) && !expired_) \
      g_main_context_iteration (NULL, TRUE); \
    if (expired_) \
      g_error ("timed out after %u ms waiting for %s", (guint) (timeout_ms), (what)); \
    g_source_remove (id_); \
  } G_STMT_END
