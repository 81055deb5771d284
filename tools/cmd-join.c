/* cmd-join.c — rlx-rank join (one node of a cohort) and rlx-rank export
 *
 *   join    runs one node (an RlxNode, as the app does) of the cohort NAME:
 *           the local bus (Unix sockets under $XDG_RUNTIME_DIR/rlx-cluster/
 *           NAME), the compute worker, the coordinator, and for a cohort
 *           across machines the remote side (--host, INVITE; cmd-remote.h).
 *           SIGINT/SIGTERM leave cleanly (bye); SIGUSR1 switches the wire
 *           precision to the next one (f32 → f16 → f8e4m3 → f8e5m2 → f32), as
 *           the app's precision menu does (scripts/chaos.py uses it).
 *           Exit status 0 once step N is committed (--steps N) or after a
 *           clean leave; 1 when the node cannot go on (refused, cut off,
 *           unusable checkpoint); 2 for a usage error.
 *           With --json, one JSON object per line, each with an "event" key:
 *             joined        node (this node), cohort, role, step, hash, backend,
 *                           fallback, precision
 *             leader        node, term, step
 *             step          step, loss, leader, term, members, samples, hash,
 *                           bytes_tx, bytes_rx (wire frames sent/received by
 *                           this node), bytes_f32 (what the same frames would
 *                           be at f32), contributed (this node's gradient is in
 *                           it), contributors, late, rejected
 *             member-joined node, host, backend, fallback, precision, step
 *             member-left   node, reason, step
 *             refused       node, reason, by (who refused)
 *             rejected      node, step, reason (a bucket thrown away)
 *             snapshot      from or to, step, hash, reason
 *             checkpoint    step, path;   resumed  step, hash, path
 *             late          node, reason; error  node, reason
 *             evaluated     accuracy, test_loss, step (with --evaluate)
 *             done          success, message, step, hash, loss, late, rejected,
 *                           byte counters; the leader adds per-round timings
 *   export  writes the cohort's checkpoint as a .safetensors file.
 */
#include "rlx-config.h"
#include "rlx-cli.h"
#include "core/cohort/rlx-outer.h"
#include "cmd-remote.h"
#include "core/rlx-backend.h"
#include "core/rlx-coordinator.h"
#include "core/rlx-node.h"
#include "core/rlx-node-faults.h"
#include "core/rlx-safetensors.h"
#include "core/p2p/rlx-invite.h"
#include "core/p2p/rlx-local-bus.h"
#include "core/vision/rlx-dataset.h"
#include "core/vision/rlx-model.h"
#include "core/wire/rlx-wire.h"

#include <errno.h>
#include <gio/gunixinputstream.h>
#include <glib-unix.h>
#include <malloc.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct {
  GMainLoop      *loop;
  RlxNode        *node;
  const char     *node_id;
  gboolean        json;
  gboolean        show_invite;   /* print the invite with its key */
  const char     *invite_out;    /* and/or write it to this file (0600) */
  int             status;
  gboolean        running;      /* started; from then on ::finished ends it */
  gboolean        leaving;
  /* test switch --fault-partition FILE */
  const char     *partition_file;
  char          **partition_group;   /* our line of FILE while it exists, else NULL */
  guint           partition_id;
  char          **unlinked;          /* test switch --fault-unlinked IDS: never linked to */
  /* --control-stdin: commands from the app that started this rank */
  GDataInputStream *control;
  GCancellable     *control_cancel;
} JoinState;

/* A string field for a person: "?" when there is none. */
static const char *
or_unknown (const char *s)
{
  return s ? s : "?";
}

/* Bytes for a person: 12.3 MB. */
static char *
human_bytes (double b)
{
  return g_format_size_full ((guint64) b, G_FORMAT_SIZE_DEFAULT);
}

static char *
hash_text (guint64 hash)
{
  return g_strdup_printf ("%016" G_GINT64_MODIFIER "x", hash);
}

/* One line a person can read; NULL for events without a phrasing of their
 * own (they are printed as key=value pairs). */
static char *
format_event (const RlxEvent *e)
{
  switch (e->kind)
    {
    case RLX_EVENT_STEP:
      {
        const RlxEventStep *s = &e->u.step;
        g_autofree char *tx = human_bytes (s->bytes_tx);
        g_autofree char *rx = human_bytes (s->bytes_rx);
        g_autofree char *hash = hash_text (s->hash);
        double wire = (double) s->bytes_tx + (double) s->bytes_rx;
        return g_strdup_printf ("step %-6" G_GUINT64_FORMAT " loss %.4f  members %" G_GUINT64_FORMAT
                                "  samples %" G_GUINT64_FORMAT "  "
                                "wire tx %s rx %s (%.0f%% of f32)  hash %.8s",
                                s->step, s->loss, s->members, s->samples, tx, rx,
                                s->bytes_f32 > 0 ? 100.0 * wire / (double) s->bytes_f32 : 100.0,
                                hash);
      }
    case RLX_EVENT_JOINED:
      {
        const RlxEventJoined *j = &e->u.joined;
        gboolean why = j->fallback && *j->fallback;
        return g_strdup_printf ("joined cohort %s as %s (%s), backend %s, wire %s%s%s",
                                or_unknown (j->cohort), or_unknown (j->node), or_unknown (j->role),
                                or_unknown (j->backend), or_unknown (j->precision),
                                why ? "\n  why not faster: " : "", why ? j->fallback : "");
      }
    case RLX_EVENT_LEADER:
      return g_strdup_printf ("leader is %s (term %" G_GUINT64_FORMAT ")",
                              or_unknown (e->u.leader.node), e->u.leader.term);
    case RLX_EVENT_MEMBER_JOINED:
      return g_strdup_printf ("+ %s joined from %s: backend %s, wire %s",
                              or_unknown (e->u.member.node), or_unknown (e->u.member.host),
                              or_unknown (e->u.member.backend), or_unknown (e->u.member.precision));
    case RLX_EVENT_MEMBER_LEFT:
      return g_strdup_printf ("- %s left: %s", or_unknown (e->u.member.node),
                              or_unknown (e->u.member.reason));
    case RLX_EVENT_REFUSED:
      return g_strdup_printf ("refused: %s", or_unknown (e->u.refused.reason));
    case RLX_EVENT_CHECKPOINT:
      return g_strdup_printf ("checkpoint at step %" G_GUINT64_FORMAT ": %s", e->u.checkpoint.step,
                              or_unknown (e->u.checkpoint.path));
    case RLX_EVENT_EVALUATED:
      return g_strdup_printf ("test accuracy %.2f%% at step %" G_GUINT64_FORMAT " (test loss %.4f)",
                              100.0 * e->u.evaluated.accuracy, e->u.evaluated.step,
                              e->u.evaluated.test_loss);
    case RLX_EVENT_INVITE:
      return g_strdup_printf ("invite: %s%s\n  on other machines: rlx-rank join --invite-file FILE "
                              "(the invite in a file only you may read), or --invite - (paste it)",
                              or_unknown (e->u.invite.invite),
                              strstr (or_unknown (e->u.invite.invite), "#…")
                                ? " (the key is hidden: --show-invite prints it, --invite-out FILE "
                                  "writes it)" : "");
    case RLX_EVENT_DONE:
      {
        g_autofree char *hash = hash_text (e->u.done.hash);

        /* (a run that failed before it trained has no loss or hash to tell) */
        if (!e->u.done.success && e->u.done.step == 0)
          return g_strdup_printf ("stopped before the first step: %s",
                                  or_unknown (e->u.done.message));
        return g_strdup_printf ("%s at step %" G_GUINT64_FORMAT ": %s; loss %.4f, hash %.8s",
                                e->u.done.success ? "done" : "stopped", e->u.done.step,
                                or_unknown (e->u.done.message), e->u.done.loss, hash);
      }
    default:
      return NULL;
    }
}

static void
print_event (JoinState *st, const RlxEvent *event)
{
  g_autofree char *human = NULL;

  if (st->json)
    {
      g_autoptr(JsonObject) o = rlx_event_to_json (event);
      rlx_cli_print_json (o);
    }
  else if ((human = format_event (event)) != NULL)
    {
      puts (human);
    }
  else
    {
      g_autoptr(JsonObject) o = rlx_event_to_json (event);
      g_autoptr(GString) s = g_string_new (rlx_event_name (event));
      JsonObjectIter iter;
      const char *key;
      JsonNode *value;

      json_object_iter_init (&iter, o);
      while (json_object_iter_next (&iter, &key, &value))
        {
          g_autofree char *v = NULL;
          if (strcmp (key, "event") == 0)
            continue;
          if (JSON_NODE_HOLDS_VALUE (value) && json_node_get_value_type (value) == G_TYPE_STRING)
            v = g_strdup (json_node_get_string (value));
          else if (JSON_NODE_HOLDS_VALUE (value) &&
                   json_node_get_value_type (value) == G_TYPE_DOUBLE)
            {
              /* as a person reads it: 0.9, not JSON's round trip 0.90000000000000002 */
              char buf[G_ASCII_DTOSTR_BUF_SIZE];
              v = g_strdup (g_ascii_formatd (buf, sizeof buf, "%.6g", json_node_get_double (value)));
            }
          else
            v = json_to_string (value, FALSE);
          g_string_append_printf (s, " %s=%s", key, v);
        }
      puts (s->str);
    }
  fflush (stdout);
}

/* The invite event holds the whole invite; what is printed (a log, often)
 * shows its key only with --show-invite. --invite-out writes it 0600. */
static void
on_invite_event (JoinState *st, const RlxEvent *event)
{
  const RlxEventInvite *inv = &event->u.invite;
  g_autoptr(RlxEvent) shown = NULL;
  g_autoptr(GError) error = NULL;

  if (st->invite_out && !rlx_write_invite_file (st->invite_out, or_unknown (inv->invite), &error))
    g_printerr ("rlx-rank join: --invite-out: %s\n", error->message);
  if (st->show_invite)
    {
      print_event (st, event);
      return;
    }
  shown = rlx_event_new (RLX_EVENT_INVITE);
  shown->u.invite.invite = rlx_invite_redact (or_unknown (inv->invite));
  shown->u.invite.cohort = g_strdup (inv->cohort);
  shown->u.invite.port = inv->port;
  shown->u.invite.fingerprint = g_strdup (inv->fingerprint);
  print_event (st, shown);
}

static void
on_event (RlxNode *node, RlxEvent *event, gpointer user_data)
{
  JoinState *st = user_data;

  if (event->kind == RLX_EVENT_INVITE)
    on_invite_event (st, event);
  else
    print_event (st, event);
}

/* The node stopped (after its links closed): steps done, refused, left. */
static void
on_finished (RlxNode *node, gboolean success, const char *message, gpointer user_data)
{
  JoinState *st = user_data;

  /* a start that failed is reported by on_started */
  if (!st->running)
    return;
  st->status = success ? RLX_EXIT_OK : RLX_EXIT_FAILURE;
  if (!success)
    g_printerr ("rlx-rank join: %s\n", message);
  g_main_loop_quit (st->loop);
}

static void
on_started (GObject *source, GAsyncResult *result, gpointer user_data)
{
  JoinState *st = user_data;
  g_autoptr(GError) error = NULL;

  if (rlx_node_start_finish (RLX_NODE (source), result, &error))
    {
      st->running = TRUE;
      return;
    }
  if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
    st->status = RLX_EXIT_OK;   /* interrupted while starting */
  else if (error->domain == RLX_DATASET_ERROR)
    st->status = rlx_cli_fail ("join", g_error_matches (error, RLX_DATASET_ERROR,
                                                        RLX_DATASET_ERROR_UNKNOWN)
                                       ? RLX_EXIT_USAGE : RLX_EXIT_FAILURE,
                               "--dataset: %s", error->message);
  else if (error->domain == RLX_BACKEND_ERROR)
    st->status = rlx_cli_fail ("join", g_error_matches (error, RLX_BACKEND_ERROR,
                                                        RLX_BACKEND_ERROR_UNKNOWN)
                                       ? RLX_EXIT_USAGE : RLX_EXIT_FAILURE,
                               "--backend: %s", error->message);
  else
    st->status = rlx_cli_fail ("join", RLX_EXIT_FAILURE, "%s", error->message);
  g_main_loop_quit (st->loop);
}

static gboolean
on_signal (gpointer user_data)
{
  JoinState *st = user_data;

  if (!st->leaving)
    {
      st->leaving = TRUE;
      rlx_node_leave_async (st->node, "interrupted", NULL, NULL);
    }
  return G_SOURCE_CONTINUE;
}

/* SIGUSR1: the next wire precision (a "precision" event reports it). */
static gboolean
on_precision_signal (gpointer user_data)
{
  JoinState *st = user_data;
  RlxCoordinator *c = rlx_node_get_coordinator (st->node);

  if (c != NULL)
    rlx_coordinator_set_precision (c, (rlx_coordinator_get_precision (c) + 1) % RLX_PRECISION_COUNT);
  return G_SOURCE_CONTINUE;
}

/* --control-stdin (the app's local ranks): one command a line on standard
 * input, from the app that started this rank and follows its wire
 * precision: "precision P" (f32, f16, f8e4m3, f8e5m2). The parent is the
 * only writer; end of input ends the commands, not the rank. */
static void read_control (JoinState *st);

static void
on_control_line (GObject *source, GAsyncResult *result, gpointer user_data)
{
  JoinState *st = user_data;
  g_autoptr(GError) error = NULL;
  g_autofree char *line = g_data_input_stream_read_line_finish_utf8 (G_DATA_INPUT_STREAM (source),
                                                                    result, NULL, &error);
  RlxPrecision p;

  if (line == NULL)
    return;   /* end of input, cancelled, or not text */
  g_strstrip (line);
  if (g_str_has_prefix (line, "precision ") &&
      rlx_precision_from_string (line + strlen ("precision "), &p, NULL))
    {
      RlxCoordinator *c = rlx_node_get_coordinator (st->node);
      if (c != NULL)
        rlx_coordinator_set_precision (c, p);   /* a "precision" event reports it */
    }
  else if (*line != '\0')
    g_printerr ("rlx-rank join: --control-stdin: unknown command \"%.60s\" "
                "(expected: precision f32|f16|f8e4m3|f8e5m2)\n", line);
  read_control (st);
}

static void
read_control (JoinState *st)
{
  g_data_input_stream_read_line_async (st->control, G_PRIORITY_DEFAULT, st->control_cancel,
                                       on_control_line, st);
}

/* Test switch --fault-partition FILE: while FILE exists, each of its lines
 * is a group of node ids that can reach each other; links to a node of
 * another group are closed (or refused as they come), as if the network
 * between the groups were cut. A line "ID: ids…" is ID's alone (the ids it
 * reaches; others take the first plain line that names them, or reach
 * everyone), so one link can be cut and no other: "m: m s" cuts m from a
 * while a and s reach everyone. When FILE goes away the node looks for its
 * peers again. */
static gboolean
partitioned_from (JoinState *st, const char *peer_id)
{
  return st->partition_group != NULL && !g_strv_contains ((const char * const *) st->partition_group,
                                                          peer_id);
}

static gboolean
partition_admits (const char *peer_id, gpointer user_data)
{
  JoinState *st = user_data;

  if (st->unlinked && peer_id && g_strv_contains ((const char * const *) st->unlinked, peer_id))
    return FALSE;
  return !partitioned_from (st, peer_id);
}

static gboolean
on_partition_check (gpointer user_data)
{
  JoinState *st = user_data;
  RlxLocalBus *bus = rlx_node_get_local_bus (st->node);
  g_autofree char *text = NULL;
  gboolean was = st->partition_group != NULL;

  g_clear_pointer (&st->partition_group, g_strfreev);
  if (g_file_get_contents (st->partition_file, &text, NULL, NULL))
    {
      g_auto(GStrv) lines = g_strsplit (text, "\n", -1);
      g_autofree char *own = g_strdup_printf ("%s:", st->node_id);

      for (guint pass = 0; pass < 2 && st->partition_group == NULL; pass++)
        for (guint i = 0; lines[i] && st->partition_group == NULL; i++)
          {
            char *line = g_strstrip (lines[i]);
            const char *colon = strchr (line, ':');
            g_auto(GStrv) ids = NULL;

            if (pass == 0 && g_str_has_prefix (line, own))
              ids = g_strsplit_set (line + strlen (own), " \t", -1);
            else if (pass == 1 && colon == NULL)
              ids = g_strsplit_set (line, " \t", -1);
            if (ids && (pass == 0 || g_strv_contains ((const char * const *) ids, st->node_id)))
              st->partition_group = g_steal_pointer (&ids);
          }
    }
  if (bus == NULL)
    return G_SOURCE_CONTINUE;
  if (st->partition_group)
    {
      g_auto(GStrv) peers = rlx_local_bus_dup_peer_ids (bus);
      for (guint i = 0; peers && peers[i]; i++)
        if (partitioned_from (st, peers[i]))
          {
            RlxLink *link = rlx_local_bus_get_link (bus, peers[i]);
            if (link)
              rlx_link_close (link);
          }
    }
  else if (was)
    rlx_local_bus_rescan (bus);
  return G_SOURCE_CONTINUE;
}

int
rlx_cmd_join (int argc, char **argv)
{
  const char *sub = "join";
  gboolean local = FALSE, no_ef = FALSE, json = FALSE, evaluate_flag = FALSE;
  g_autofree char *cohort = NULL, *model_s = NULL, *dataset_s = NULL, *backend_s = NULL;
  g_autofree char *compute_s = NULL;
  RlxVkCompute compute = RLX_VK_COMPUTE_F32;
  g_autofree char *precision_s = NULL, *batch_s = NULL, *lr_s = NULL, *steps_s = NULL;
  g_autofree char *node_s = NULL, *seed_s = NULL, *wait_s = NULL, *ckpt_s = NULL;
  g_autofree char *fault_s = NULL, *deadline_s = NULL, *hb_s = NULL, *threads_s = NULL;
  g_autofree char *eval_ms_s = NULL;
  g_autofree char *inner_s = NULL;
  g_autofree char *slow_s = NULL, *inf_s = NULL, *hash_s = NULL, *eval_s = NULL;
  g_autofree char *eval_threads_s = NULL;
  g_autofree char *stall_s = NULL, *die_s = NULL, *partition_s = NULL, *log_max_s = NULL;
  g_autofree char *unlinked_s = NULL;
  gboolean fixed_inner_lr = FALSE;
  g_autofree char *sync_s = NULL, *outer_lr_s = NULL, *outer_mom_s = NULL, *mom_s = NULL;
  gboolean join_only = FALSE, show_invite = FALSE, control_stdin = FALSE, claim_fast = FALSE;
  g_autofree char *invite_out = NULL, *claim_members_s = NULL, *claim_step_s = NULL;
  g_autofree char *huge_s = NULL, *norm_ratio_s = NULL, *claim_follows = NULL;
  GOptionEntry entries[] = {
    { "local", 0, 0, G_OPTION_ARG_NONE, &local, "the cohort on this machine (the local bus; the default)", NULL },
    { "cohort", 0, 0, G_OPTION_ARG_STRING, &cohort, "cohort name (default: default)", "NAME" },
    { "model", 0, 0, G_OPTION_ARG_STRING, &model_s, "mnist-mlp (default), mnist-mlp-xl or mnist-cnn", "M" },
    { "dataset", 0, 0, G_OPTION_ARG_STRING, &dataset_s, "synthetic (default) or fashion-mnist", "D" },
    { "backend", 0, 0, G_OPTION_ARG_STRING, &backend_s, "auto (default), cpu, vulkan or vulkan:NAME", "B" },
    { "compute", 0, 0, G_OPTION_ARG_STRING, &compute_s, "f32 (default), or f16: matrix products on tensor cores (a Vulkan device with cooperative matrices); the wire and hashes are the same", "C" },
    { "precision", 0, 0, G_OPTION_ARG_STRING, &precision_s, "wire precision: f32 (default), f16, f8e4m3, f8e5m2", "P" },
    { "batch", 0, 0, G_OPTION_ARG_STRING, &batch_s, "this node's share of the global batch (default 32)", "B" },
    { "lr", 0, 0, G_OPTION_ARG_STRING, &lr_s, "learning rate (default 0.05)", "LR" },
    { "max-grad-norm-ratio", 0, 0, G_OPTION_ARG_STRING, &norm_ratio_s, "as the leader, refuse (and report) a member's gradient whose norm is over R times the median of the recent ones (default 100; 0: never)", "R" },
    { "steps", 0, 0, G_OPTION_ARG_STRING, &steps_s, "exit once step N is committed (default: run until interrupted)", "N" },
    { "no-error-feedback", 0, 0, G_OPTION_ARG_NONE, &no_ef, "do not carry the quantisation residual", NULL },
    { "sync", 0, 0, G_OPTION_ARG_STRING, &sync_s, "how the cohort averages (its leader's choice counts): step (every step, the default), outer:H (H local steps, then outer averaging) or auto (chosen from the measured links)", "MODE" },
    { "outer-lr", 0, 0, G_OPTION_ARG_STRING, &outer_lr_s, "outer mode: the outer Nesterov step's learning rate (default 0.7)", "LR" },
    { "outer-momentum", 0, 0, G_OPTION_ARG_STRING, &outer_mom_s, "outer mode: the outer Nesterov momentum (default 0.9)", "M" },
    { "fixed-inner-lr", 0, 0, G_OPTION_ARG_NONE, &fixed_inner_lr, "outer mode: every round's inner steps at --lr (default: --lr × √k for a round of k ranks, k up to 4; the leader's choice counts)", NULL },
    { "json", 0, 0, G_OPTION_ARG_NONE, &json, "one JSON object per line per event", NULL },
    { "node", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &node_s, "node id", "ID" },
    { "seed", 0, 0, G_OPTION_ARG_STRING, &seed_s, "initialisation, permutation and synthetic data (default 0; the cohort must agree)", "S" },
    { "wait-members", 0, 0, G_OPTION_ARG_STRING, &wait_s, "a founder waits for N members before the first step (default 1)", "N" },
    { "checkpoint-every", 0, 0, G_OPTION_ARG_STRING, &ckpt_s, "the leader checkpoints every K steps (default 100; 0: only at the end)", "K" },
    { "threads", 0, 0, G_OPTION_ARG_STRING, &threads_s, "BLAS threads of this rank's CPU backend", "N" },
    { "control-stdin", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_NONE, &control_stdin, "read commands (\"precision P\") from standard input, after an invite given with --invite - (the app's local ranks)", NULL },
    { "log-max-bytes", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &log_max_s, "with --json into a file: past N bytes it becomes FILE.1 and a new FILE starts (the app's local ranks)", "N" },
    { "evaluate", 0, 0, G_OPTION_ARG_NONE, &evaluate_flag, "print the test accuracy when done", NULL },
    { "evaluate-every", 0, 0, G_OPTION_ARG_STRING, &eval_s, "measure the test accuracy every K committed steps (off the main loop; one due while --evaluate-threads of them run is skipped)", "K" },
    { "evaluate-threads", 0, 0, G_OPTION_ARG_STRING, &eval_threads_s, "with --evaluate-every: up to N evaluations at once, each on a thread of its own (default 1), so that none is skipped when one takes longer than the steps between them", "N" },
    { "join-only", 0, 0, G_OPTION_ARG_NONE, &join_only, "never found a cohort: wait until one is reachable and join it", NULL },
    { "show-invite", 0, 0, G_OPTION_ARG_NONE, &show_invite, "with --host: print the invite with its key (hidden otherwise)", NULL },
    { "invite-out", 0, 0, G_OPTION_ARG_FILENAME, &invite_out, "with --host: write the invite, key included, to FILE (mode 0600) for --invite-file", "FILE" },
    { "fault-nan", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &fault_s, "test switch: NaN gradients from step N", "N" },
    { "fault-inf", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &inf_s, "test switch: +Inf and -Inf in every gradient from step N", "N" },
    { "fault-hash", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &hash_s, "test switch: after committing step N this node's parameters differ by one bit", "N" },
    { "fault-momentum", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &mom_s, "test switch: in the outer mode, after committing step N this node's outer momentum differs (its first value +1)", "N" },
    { "fault-stall", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &stall_s, "test switch: the gradient of step N takes MS longer", "N:MS" },
    { "fault-die-at", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &die_s, "test switch: as the leader, send step N's commit to all but the next leader, then die", "N" },
    { "fault-partition", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_FILENAME, &partition_s, "test switch: while FILE exists, only the node ids on our line of it are reachable", "FILE" },
    { "fault-unlinked", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &unlinked_s, "test switch: never link to these node ids (comma-separated), although they are in the cohort", "IDS" },
    { "fault-claim-follows", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &claim_follows, "test switch: as a member, every heartbeat says it follows node ID (a member its leader should not count)", "ID" },
    { "fault-claim-fast", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_NONE, &claim_fast, "test switch: every gradient claims it took 1 µs (a member lying about its speed)", NULL },
    { "fault-huge", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &huge_s, "test switch: from step N every gradient has one value of 1e20 (an absurd norm)", "N" },
    { "fault-claim-members", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &claim_members_s, "test switch: as a leader, every hello claims N members (a leader lying to win a merge)", "N" },
    { "fault-claim-step", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &claim_step_s, "test switch: as a leader, every hello claims step N committed", "N" },
    { "fault-slow-ms", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &slow_s, "test switch: every gradient takes MS longer (on the compute thread)", "MS" },
    { "fault-inner-ms", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &inner_s, "test switch: every inner step of an outer round but its last takes MS longer (on the compute thread)", "MS" },
    { "fault-eval-ms", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &eval_ms_s, "test switch: every test-accuracy evaluation passes over the test split until it ran MS (a leave still stops it)", "MS" },
    { "deadline-floor-ms", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &deadline_s, "shortest collect deadline", "MS" },
    { "heartbeat-timeout-ms", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &hb_s, "silence that removes a peer", "MS" },
    { NULL }
  };
  g_autoptr(GOptionContext) ctx = g_option_context_new ("[--local | --host [ADDR:]PORT | INVITE] — run one node of a cohort");
  g_autoptr(RlxJoinRemote) remote = rlx_join_remote_new ();
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxNode) node = NULL;
  g_autoptr(GMainLoop) loop = NULL;
  g_autofree char *node_id = NULL;
  RlxNodeConfig cfg = { 0 };
  RlxNodeTestSwitches switches = { 0 };
  JoinState st = { 0 };
  guint64 batch = 32, steps = 0, seed = 0, wait = 1, ckpt = 100, fault = 0, deadline = 0, hb = 0;
  guint64 mom_at = 0;
  guint64 slow_ms = 0, inner_ms = 0, inf_from = 0, hash_at = 0, eval_every = 0, stall_step = 0, stall_ms = 0;
  guint64 eval_threads = 0;
  guint64 die_at = 0, log_max = 0, eval_ms = 0, claim_members = 0, claim_step = 0, huge_from = 0;
  guint64 threads = 0;
  double lr = 0.05;
  guint sigint_id, sigterm_id, sigusr1_id;
  g_auto(GStrv) args_copy = NULL;
  g_autofree char **pargv = NULL;

  /* Every round moves a few parameter-sized buffers (frames in and out).
   * Above glibc's mmap threshold each would be a fresh mapping whose pages
   * fault in on first touch; in the heap they are reused, at the price that
   * a link's receive buffer growing as a frame arrives may be copied by
   * realloc instead of moved by mremap. Measured (BENCHMARKS.md, "The
   * engine of issue 9"), two ranks of mnist-mlp-xl: the heap costs the least
   * CPU per sample — 1 MiB (frames mmap'ed, mremap growth) costs 23 % more at
   * f32, glibc's moving default 2 % more. */
  mallopt (M_MMAP_THRESHOLD, 256 << 20);
  mallopt (M_TRIM_THRESHOLD, 512 << 20);

  /* An invite or a TURN password among the arguments is parsed from a copy;
   * the secret in the process's own arguments (what /proc/PID/cmdline
   * shows) is blanked. */
  args_copy = g_strdupv (argv);
  pargv = g_memdup2 (args_copy, sizeof (char *) * ((gsize) argc + 1));
  rlx_cli_hide_secrets (argc, argv);
  argv = pargv;

  g_option_context_add_main_entries (ctx, entries, NULL);
  g_option_context_add_group (ctx, rlx_join_remote_options (remote));
  g_option_context_set_summary (ctx,
    "Runs one node of the cohort NAME on this machine: it joins the cohort found\n"
    "under $XDG_RUNTIME_DIR/rlx-cluster/NAME (or founds it, resuming its\n"
    "checkpoint from $XDG_DATA_HOME/rlx-cluster/NAME), computes gradients on its\n"
    "slice of every step, and applies the leader's updates.\n\n"
    "Example:\n"
    "  for i in 1 2 3; do rlx-rank join --local --cohort demo --steps 200 --json & done");
  if (!rlx_cli_parse (ctx, sub, &argc, &argv))
    return RLX_EXIT_USAGE;
  if (!rlx_join_remote_configure (remote, argc, argv, local, &cohort, &cfg, &error))
    return rlx_cli_fail (sub, RLX_EXIT_USAGE, "%s (see rlx-rank join --help)", error->message);

  if (!rlx_cli_uint (sub, "--batch", batch_s, 1, 65536, &batch) ||
      !rlx_cli_uint (sub, "--steps", steps_s, 0, G_MAXINT64, &steps) ||
      !rlx_cli_uint (sub, "--seed", seed_s, 0, G_MAXUINT64, &seed) ||
      !rlx_cli_uint (sub, "--wait-members", wait_s, 1, 4096, &wait) ||
      !rlx_cli_uint (sub, "--checkpoint-every", ckpt_s, 0, G_MAXUINT32, &ckpt) ||
      !rlx_cli_uint (sub, "--threads", threads_s, 1, 1024, &threads) ||
      !rlx_cli_uint (sub, "--fault-nan", fault_s, 1, G_MAXINT64, &fault) ||
      !rlx_cli_uint (sub, "--fault-slow-ms", slow_s, 0, 600000, &slow_ms) ||
      !rlx_cli_uint (sub, "--fault-inner-ms", inner_s, 0, 600000, &inner_ms) ||
      !rlx_cli_uint (sub, "--fault-eval-ms", eval_ms_s, 0, 3600000, &eval_ms) ||
      !rlx_cli_uint (sub, "--fault-inf", inf_s, 1, G_MAXINT64, &inf_from) ||
      !rlx_cli_uint (sub, "--fault-hash", hash_s, 1, G_MAXINT64, &hash_at) ||
      !rlx_cli_uint (sub, "--fault-momentum", mom_s, 1, G_MAXINT64, &mom_at) ||
      !rlx_cli_uint (sub, "--evaluate-every", eval_s, 1, G_MAXUINT32, &eval_every) ||
      !rlx_cli_uint (sub, "--evaluate-threads", eval_threads_s, 1, RLX_EVALUATE_THREADS_MAX,
                     &eval_threads) ||
      !rlx_cli_uint (sub, "--fault-die-at", die_s, 1, G_MAXINT64, &die_at) ||
      !rlx_cli_uint (sub, "--fault-huge", huge_s, 1, G_MAXINT64, &huge_from) ||
      !rlx_cli_uint (sub, "--fault-claim-members", claim_members_s, 1, G_MAXUINT32, &claim_members) ||
      !rlx_cli_uint (sub, "--fault-claim-step", claim_step_s, 1, G_MAXINT64, &claim_step) ||
      !rlx_cli_uint (sub, "--deadline-floor-ms", deadline_s, 1, 600000, &deadline) ||
      !rlx_cli_uint (sub, "--heartbeat-timeout-ms", hb_s, 100, 600000, &hb) ||
      !rlx_cli_uint (sub, "--log-max-bytes", log_max_s, 4096, G_MAXINT64, &log_max))
    return RLX_EXIT_USAGE;
  if (log_max && !rlx_cli_limit_stdout (log_max, &error))
    return rlx_cli_fail (sub, RLX_EXIT_USAGE, "%s", error->message);
  if (stall_s)
    {
      g_auto(GStrv) parts = g_strsplit (stall_s, ":", 2);
      if (parts[1] == NULL ||
          !rlx_cli_uint (sub, "--fault-stall (step)", parts[0], 1, G_MAXINT64, &stall_step) ||
          !rlx_cli_uint (sub, "--fault-stall (ms)", parts[1], 1, 600000, &stall_ms))
        return parts[1] == NULL ? rlx_cli_fail (sub, RLX_EXIT_USAGE,
                                                "--fault-stall: '%s' is not STEP:MS", stall_s)
                                : RLX_EXIT_USAGE;
    }
  if (!rlx_cli_positive (sub, "--lr", lr_s, &lr))
    return RLX_EXIT_USAGE;
  if (eval_threads_s && !eval_s)
    return rlx_cli_fail (sub, RLX_EXIT_USAGE,
                         "--evaluate-threads says how many evaluations --evaluate-every may "
                         "run at once: give --evaluate-every K as well");
  if (norm_ratio_s)
    {
      char *end = NULL;
      double r;

      errno = 0;
      r = g_ascii_strtod (norm_ratio_s, &end);
      if (end == norm_ratio_s || *end != '\0' || errno != 0 || !isfinite (r) ||
          !(r == 0 || (r >= 2 && r <= 1e12)))
        return rlx_cli_fail (sub, RLX_EXIT_USAGE,
                             "--max-grad-norm-ratio: '%s' is not 0 (never refuse) or a number "
                             "from 2 to 1e12", norm_ratio_s);
      cfg.max_grad_norm_ratio = r == 0 ? -1 : r;
    }
  if (!rlx_sync_parse (sync_s ? sync_s : "step", &cfg.sync, &error))
    return rlx_cli_fail (sub, RLX_EXIT_USAGE, "%s%s",
                         g_str_has_prefix (error->message, "--sync") ? "" : "--sync: ",
                         error->message);
  {
    double olr = RLX_OUTER_DEFAULT_LR, omom = RLX_OUTER_DEFAULT_MOMENTUM;

    if (!rlx_cli_positive (sub, "--outer-lr", outer_lr_s, &olr))
      return RLX_EXIT_USAGE;
    if (outer_mom_s)
      {
        char *end = NULL;

        errno = 0;
        omom = g_ascii_strtod (outer_mom_s, &end);
        if (end == outer_mom_s || *end != '\0' || errno != 0 || !isfinite (omom))
          return rlx_cli_fail (sub, RLX_EXIT_USAGE,
                               "--outer-momentum: '%s' is not a number from 0 to below 1 "
                               "(see rlx-rank join --help)", outer_mom_s);
      }
    if (!rlx_outer_check_settings (olr, omom, &error))
      return rlx_cli_fail (sub, RLX_EXIT_USAGE, "%s: %s",
                           outer_lr_s && !(olr > 0 && olr <= 10) ? "--outer-lr"
                           : outer_mom_s ? "--outer-momentum" : "--outer-lr",
                           error->message);
    cfg.outer_lr = olr;
    cfg.outer_momentum = omom;
    cfg.inner_lr_fixed = fixed_inner_lr;
  }
  if (!rlx_precision_from_string (precision_s ? precision_s : "f32", &cfg.precision, &error))
    return rlx_cli_fail (sub, RLX_EXIT_USAGE, "--precision: %s", error->message);
  if (cohort == NULL)
    cohort = g_strdup ("default");
  if (!rlx_local_bus_name_is_valid (cohort))
    return rlx_cli_fail (sub, RLX_EXIT_USAGE,
                         "--cohort: '%s' is not a usable name (1 to 64 of A-Z a-z 0-9 . _ -)", cohort);
  node_id = node_s ? g_strdup (node_s) : g_strdup_printf ("n%d-%08x", (int) getpid (), g_random_int ());
  if (!rlx_local_bus_name_is_valid (node_id))
    return rlx_cli_fail (sub, RLX_EXIT_USAGE,
                         "--node: '%s' is not a usable id (1 to 64 of A-Z a-z 0-9 . _ -)", node_id);

  if (rlx_model_lookup (model_s ? model_s : "mnist-mlp", &error) == NULL)
    return rlx_cli_fail (sub, RLX_EXIT_USAGE, "--model: %s", error->message);

  cfg.cohort = cohort;
  cfg.node_id = node_id;
  cfg.model = model_s ? model_s : "mnist-mlp";
  cfg.dataset = dataset_s ? dataset_s : "synthetic";
  cfg.backend = backend_s ? backend_s : "auto";
  if (compute_s != NULL && !rlx_vk_compute_parse (compute_s, &compute))
    return rlx_cli_fail (sub, RLX_EXIT_USAGE, "--compute: '%s' is not f32, f16 or bf16", compute_s);
  cfg.compute = compute;
  cfg.no_error_feedback = no_ef;
  cfg.batch = (guint) batch;
  cfg.lr = lr;
  cfg.seed = seed;
  cfg.steps = steps;
  cfg.threads = (guint) threads;
  cfg.wait_members = (guint) wait;
  cfg.checkpoint_every = (guint) ckpt;
  cfg.evaluate_every = (guint) eval_every;
  cfg.evaluate_threads = (guint) eval_threads;
  cfg.evaluate_at_end = evaluate_flag;
  cfg.join_only = join_only;
  switches.deadline_floor_ms = (guint) deadline;
  switches.heartbeat_timeout_ms = (guint) hb;
  switches.slow_ms = (guint) slow_ms;
  switches.inner_ms = (guint) inner_ms;
  switches.faults.nan_from = fault;
  switches.faults.inf_from = inf_from;
  switches.faults.hash_at = hash_at;
  switches.faults.momentum_at = mom_at;
  switches.faults.stall_step = stall_step;
  switches.faults.stall_ms = (guint) stall_ms;
  switches.faults.die_at = die_at;
  switches.faults.claim_fast = claim_fast;
  if (claim_follows && (*claim_follows == '\0' || strlen (claim_follows) > 64))
    return rlx_cli_fail (sub, RLX_EXIT_USAGE, "--fault-claim-follows: a node id of 1 to %d "
                         "bytes, not '%s'", 64, claim_follows);
  if (claim_follows)
    g_strlcpy (switches.faults.claim_follows, claim_follows, sizeof switches.faults.claim_follows);
  switches.faults.eval_ms = (guint) eval_ms;
  switches.faults.claim_members = (guint) claim_members;
  switches.faults.huge_from = huge_from;
  switches.faults.claim_step = claim_step;
  node = rlx_node_new (&cfg, &error);
  if (node == NULL)
    return rlx_cli_fail (sub, RLX_EXIT_USAGE, "%s (see rlx-rank join --help)", error->message);
  rlx_node_set_test_switches (node, &switches);

  loop = g_main_loop_new (NULL, FALSE);
  st.loop = loop;
  st.node = node;
  st.node_id = node_id;
  st.json = json;
  st.show_invite = show_invite;
  st.invite_out = invite_out;
  st.status = RLX_EXIT_OK;
  g_signal_connect (node, "event", G_CALLBACK (on_event), &st);
  g_signal_connect (node, "finished", G_CALLBACK (on_finished), &st);
  st.partition_file = partition_s;
  if (unlinked_s)
    st.unlinked = g_strsplit (unlinked_s, ",", -1);
  if (partition_s)
    {
      on_partition_check (&st);
      st.partition_id = g_timeout_add (100, on_partition_check, &st);
    }
  if (partition_s || unlinked_s)
    rlx_node_set_link_filter (node, partition_admits, &st);
  sigint_id = g_unix_signal_add (SIGINT, on_signal, &st);
  sigterm_id = g_unix_signal_add (SIGTERM, on_signal, &st);
  sigusr1_id = g_unix_signal_add (SIGUSR1, on_precision_signal, &st);
  signal (SIGPIPE, SIG_IGN);

  if (control_stdin)
    {
      g_autoptr(GInputStream) in = g_unix_input_stream_new (STDIN_FILENO, FALSE);
      st.control = g_data_input_stream_new (in);
      st.control_cancel = g_cancellable_new ();
      read_control (&st);
    }

  rlx_node_start_async (node, NULL, on_started, &st);
  g_main_loop_run (loop);

  if (st.control_cancel)
    g_cancellable_cancel (st.control_cancel);
  g_clear_object (&st.control);
  g_clear_object (&st.control_cancel);
  g_source_remove (sigint_id);
  g_source_remove (sigterm_id);
  g_source_remove (sigusr1_id);
  g_signal_handlers_disconnect_by_data (node, &st);
  g_clear_handle_id (&st.partition_id, g_source_remove);
  g_clear_pointer (&st.partition_group, g_strfreev);
  g_clear_pointer (&st.unlinked, g_strfreev);
  return st.status;
}

/* ── export ─────────────────────────────────────────────────────────────── */

int
rlx_cmd_export (int argc, char **argv)
{
  const char *sub = "export";
  g_autofree char *cohort = NULL, *format = NULL, *out = NULL, *from = NULL;
  gboolean json = FALSE;
  GOptionEntry entries[] = {
    { "cohort", 0, 0, G_OPTION_ARG_STRING, &cohort, "the cohort whose checkpoint to export (default: default)", "NAME" },
    { "checkpoint", 0, 0, G_OPTION_ARG_FILENAME, &from, "a checkpoint file instead of the cohort's", "FILE" },
    { "format", 0, 0, G_OPTION_ARG_STRING, &format, "safetensors (the only format)", "F" },
    { "out", 'o', 0, G_OPTION_ARG_FILENAME, &out, "the file to write", "FILE" },
    { "output", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_FILENAME, &out, "the file to write", "FILE" },
    { "json", 0, 0, G_OPTION_ARG_NONE, &json, "report as one JSON object", NULL },
    { NULL }
  };
  g_autoptr(GOptionContext) ctx = g_option_context_new ("— export a cohort's checkpoint");
  g_autoptr(GError) error = NULL;
  g_autoptr(GHashTable) md = NULL;
  g_autofree float *params = NULL;
  g_autofree char *path = NULL;
  const char *slug;
  const RlxModel *model;

  g_option_context_add_main_entries (ctx, entries, NULL);
  g_option_context_set_summary (ctx,
    "Writes the parameters of a cohort's latest checkpoint as a .safetensors file\n"
    "(tensor names and shapes of PyTorch's nn.Sequential, dtype F32) that\n"
    "safetensors.torch.load_file reads.\n\n"
    "Example:\n"
    "  rlx-rank export --cohort demo --format safetensors --out demo.safetensors");
  if (!rlx_cli_parse (ctx, sub, &argc, &argv))
    return RLX_EXIT_USAGE;
  if (!rlx_cli_no_extra_args (sub, argc, argv))
    return RLX_EXIT_USAGE;
  if (format && strcmp (format, "safetensors") != 0)
    return rlx_cli_fail (sub, RLX_EXIT_USAGE, "--format: '%s' is not supported; use safetensors", format);
  if (out == NULL)
    return rlx_cli_fail (sub, RLX_EXIT_USAGE, "--out FILE is required (see rlx-rank export --help)");
  if (from && cohort)
    return rlx_cli_fail (sub, RLX_EXIT_USAGE, "give --cohort or --checkpoint, not both");
  if (from)
    path = g_strdup (from);
  else
    {
      if (cohort == NULL)
        cohort = g_strdup ("default");
      if (!rlx_local_bus_name_is_valid (cohort))
        return rlx_cli_fail (sub, RLX_EXIT_USAGE, "--cohort: '%s' is not a usable name", cohort);
      path = rlx_checkpoint_path_for_cohort (cohort);
    }

  md = rlx_safetensors_read_metadata (path, &error);
  if (md == NULL)
    {
      if (g_error_matches (error, RLX_SAFETENSORS_ERROR, RLX_SAFETENSORS_ERROR_NOT_FOUND))
        return rlx_cli_fail (sub, RLX_EXIT_FAILURE,
                             "no checkpoint at %s: run the cohort first (rlx-rank join --cohort %s)",
                             path, cohort ? cohort : "NAME");
      return rlx_cli_fail (sub, RLX_EXIT_FAILURE, "%s", error->message);
    }
  slug = g_hash_table_lookup (md, "model");
  if (slug == NULL)
    return rlx_cli_fail (sub, RLX_EXIT_FAILURE, "%s does not say which model it holds (no \"model\" in its metadata)", path);
  model = rlx_model_lookup (slug, &error);
  if (model == NULL)
    return rlx_cli_fail (sub, RLX_EXIT_FAILURE, "%s: %s", path, error->message);
  params = rlx_safetensors_read (path, model, NULL, &error);
  if (params == NULL)
    return rlx_cli_fail (sub, RLX_EXIT_FAILURE, "%s", error->message);
  if (rlx_cli_out_is_special (out))
    {
      g_autoptr(GBytes) bytes = rlx_safetensors_build (model, params, md);

      if (!rlx_cli_write_special (out, g_bytes_get_data (bytes, NULL), g_bytes_get_size (bytes), &error))
        return rlx_cli_fail (sub, RLX_EXIT_FAILURE, "--out: %s", error->message);
    }
  else if (!rlx_safetensors_write (out, model, params, md, &error))
    return rlx_cli_fail (sub, RLX_EXIT_FAILURE, "%s", error->message);

  if (json)
    {
      g_autoptr(JsonObject) o = json_object_new ();

      json_object_set_string_member (o, "event", "exported");
      json_object_set_string_member (o, "path", out);
      json_object_set_string_member (o, "model", model->slug);
      json_object_set_string_member (o, "step", g_hash_table_lookup (md, "step") ? g_hash_table_lookup (md, "step") : "");
      json_object_set_string_member (o, "hash", g_hash_table_lookup (md, "hash") ? g_hash_table_lookup (md, "hash") : "");
      rlx_cli_print_json (o);
    }
  else
    printf ("wrote %s: %s, %zu parameters, step %s\n", out, model->slug, model->n_params,
            (char *) (g_hash_table_lookup (md, "step") ? g_hash_table_lookup (md, "step") : "?"));
  return RLX_EXIT_OK;
}
