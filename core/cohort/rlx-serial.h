/* rlx-serial.h — bulk work off the main loop, one job at a time, in order
 *
 * The cohort's arithmetic on parameter-sized buffers (applying an update,
 * hashing, summing buckets, quantising the update) must not run on the main
 * loop, and jobs on one buffer must not overlap. An RlxSerial runs the jobs
 * pushed to it one after the other on GTask's thread pool; each job's @done
 * runs on the main context that was current at rlx_serial_new, in order.
 *
 * rlx_serial_cancel drops the queued jobs and makes sure no @done of a job
 * pushed before it runs (the job already running finishes on its thread;
 * its data is freed). rlx_serial_free cancels and waits until the running
 * job's @run has returned (so the owner may free the buffers it worked on
 * right after); that job's @done never runs.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef struct _RlxSerial RlxSerial;

/* Runs on a pool thread. */
typedef void (*RlxSerialRunFunc)  (gpointer data);
/* Runs on the main context after @run, unless cancelled. */
typedef void (*RlxSerialDoneFunc) (gpointer data, gpointer user_data);

RlxSerial *rlx_serial_new    (void);
void       rlx_serial_free   (RlxSerial *self);
/* Queue a job; @free_data (nullable) frees @data after @done (or when the
 * job is dropped). */
void       rlx_serial_push   (RlxSerial *self, RlxSerialRunFunc run, RlxSerialDoneFunc done,
                              gpointer data, GDestroyNotify free_data, gpointer user_data);
/* A job is queued or running. */
gboolean   rlx_serial_busy   (RlxSerial *self);
guint      rlx_serial_queued (RlxSerial *self);
void       rlx_serial_cancel (RlxSerial *self);
/* Cancel, and wait until the running job's @run has returned (its @done
 * never runs): the owner may then reuse what the jobs worked on. Blocks
 * for at most one job. */
void       rlx_serial_drain  (RlxSerial *self);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxSerial, rlx_serial_free)

G_END_DECLS
