/* rlx-fp-mode.c — the GTask trampoline of rlx-fp-mode.h */
#include "rlx-config.h"
#include "core/util/rlx-fp-mode.h"

static G_DEFINE_QUARK (rlx-fp-task-func, func)

static void
fast_thread (GTask *task, gpointer source, gpointer task_data, GCancellable *cancellable)
{
  GTaskThreadFunc func = (GTaskThreadFunc) g_object_get_qdata (G_OBJECT (task), func_quark ());
  RlxFpScope s = rlx_fp_scope_begin_fast ();

  func (task, source, task_data, cancellable);
  rlx_fp_scope_end (s);
}

void
rlx_fp_task_run_in_thread (GTask *task, GTaskThreadFunc func)
{
  g_return_if_fail (G_IS_TASK (task));
  g_return_if_fail (func != NULL);

  g_object_set_qdata (G_OBJECT (task), func_quark (), (gpointer) func);
  g_task_run_in_thread (task, fast_thread);
}
