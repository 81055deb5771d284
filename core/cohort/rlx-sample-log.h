/* rlx-sample-log.h — which samples each rank was handed, for the tests
 *
 * With RLX_TEST_SAMPLE_LOG=DIR in the environment, every slice of the
 * sample stream a rank takes as its own (a member's slot of a step frame,
 * the leader's own slot of a round it assigned) is appended to
 * DIR/samples-PID.tsv as one line: node, term, step, the frame's epoch, the
 * slot's start and count, then the indices, space-separated. The line is
 * written and flushed at once, so a process killed keeps what it took.
 * tests/cohort/test-outer-epochs.c reads the files of a cohort to check
 * that every epoch's samples were each taken once. Without the variable a
 * call is one test of a flag.
 *
 * Threads: the main context (each process writes its own file).
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

void rlx_sample_log (const char *node, guint64 term, guint64 step, guint epoch, guint64 start,
                     guint count, const guint32 *indices);

G_END_DECLS
