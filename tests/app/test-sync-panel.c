/* test-sync-panel.c — the dashboard's synchronisation view (app/rlx-sync-panel.h)
 * from the events a node emits: the mode and H and why, the links' measured
 * figures, the outer round's progress between commits, bytes per sample. */
#include "rlx-config.h"
#include "rlx-sync-panel.h"
#include "rlx-preferences-window.h"
#include "core/cohort/rlx-sync-policy.h"

#include <adwaita.h>
#include <string.h>

/* The event a JSON line describes, as a node's --json prints it. */
static RlxEvent *
parse (const char *json)
{
  g_autoptr(JsonParser) p = json_parser_new ();
  g_autoptr(GError) error = NULL;
  RlxEvent *e;

  g_assert_true (json_parser_load_from_data (p, json, -1, &error));
  g_assert_no_error (error);
  e = rlx_event_from_json (json_node_get_object (json_parser_get_root (p)), &error);
  g_assert_no_error (error);
  return e;
}

static void
add (RlxSyncPanel *panel, gint64 now_us, const char *fmt, ...)
{
  va_list ap;
  g_autofree char *json = NULL;
  RlxEvent *e;

  va_start (ap, fmt);
  json = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  e = parse (json);
  rlx_sync_panel_add_event (panel, e, now_us);
  rlx_event_unref (e);
}

static void
test_outer (void)
{
  RlxSyncPanel *panel = RLX_SYNC_PANEL (g_object_ref_sink (rlx_sync_panel_new ()));
  gboolean visible = TRUE;
  const gint64 s = G_USEC_PER_SEC;

  g_assert_cmpstr (rlx_sync_panel_get_mode_text (panel), ==, "Every step");
  rlx_sync_panel_get_progress (panel, &visible);
  g_assert_false (visible);
  /* nothing shown (no room taken) until the node says how it synchronises */
  g_assert_false (gtk_widget_get_visible (GTK_WIDGET (panel)));

  add (panel, 0, "{\"event\": \"sync\", \"mode\": \"outer\", \"h\": 40, \"requested\": \"auto\", "
                 "\"reason\": \"outer every 40 steps: link to host-b 24 MB/s, 51 ms; the 672 ms "
                 "exchange hides behind 40 steps of 30 ms (auto)\"}");
  g_assert_cmpstr (rlx_sync_panel_get_mode_text (panel), ==, "Automatic: outer every 40 steps");
  g_assert_true (gtk_widget_get_visible (GTK_WIDGET (panel)));
  g_assert_nonnull (strstr (rlx_sync_panel_get_reason_text (panel), "link to host-b 24 MB/s, 51 ms"));
  rlx_sync_panel_get_progress (panel, &visible);
  g_assert_true (visible);

  add (panel, 0, "{\"event\": \"links\", \"text\": \"host-b 24 MB/s, 51 ms\", \"remote\": 1, \"local\": 0}");
  g_assert_cmpstr (rlx_sync_panel_get_links_text (panel), ==, "Links: host-b 24 MB/s, 51 ms");

  /* rounds of 2 × 40 × 256 samples, 20480 bytes each, one every 2 s */
  for (guint i = 0; i < 3; i++)
    add (panel, (gint64) i * 2 * s, "{\"event\": \"step\", \"step\": %u, \"sync\": \"outer\", "
                                    "\"h\": 40, \"samples\": 20480, \"bytes_tx\": %u, "
                                    "\"bytes_rx\": %u}", i + 1, 10240 * (i + 1), 10240 * (i + 1));
  /* bytes per sample are written on the UI tick, not per step event */
  g_assert_cmpstr (rlx_sync_panel_get_bytes_text (panel), ==, "—");
  rlx_sync_panel_tick (panel, 4 * s);
  g_assert_cmpstr (rlx_sync_panel_get_bytes_text (panel), ==, "1 bytes per sample");
  g_assert_cmpfloat (rlx_sync_panel_get_progress (panel, NULL), ==, 0.0);
  rlx_sync_panel_tick (panel, 5 * s);               /* 1 s into a 2 s round */
  g_assert_cmpfloat_with_epsilon (rlx_sync_panel_get_progress (panel, NULL), 0.5, 1e-9);
  rlx_sync_panel_tick (panel, 9 * s);               /* late: full, not over */
  g_assert_cmpfloat (rlx_sync_panel_get_progress (panel, NULL), ==, 1.0);
  g_assert_cmpstr (rlx_sync_panel_get_round_text (panel), ==, "Outer round 4 · 40 inner steps");

  /* the leader names the inner steps' rate (two ranks: --lr 0.05 × √2) */
  add (panel, 9 * s, "{\"event\": \"sync\", \"mode\": \"outer\", \"h\": 40, \"requested\": \"auto\", "
                     "\"outer_lr\": 0.7, \"outer_momentum\": 0.9, \"inner_lr\": 0.070710678, "
                     "\"fragments\": 1, \"reason\": \"outer every 40 steps (auto)\"}");
  g_assert_cmpstr (rlx_sync_panel_get_round_text (panel), ==,
                   "Outer round 4 · 40 inner steps at lr 0.0707");
  /* a new rate alone keeps the round's time: still late, still full */
  rlx_sync_panel_tick (panel, 9 * s);
  g_assert_cmpfloat (rlx_sync_panel_get_progress (panel, NULL), ==, 1.0);

  /* the leader goes back to the step mode: no round to show */
  add (panel, 9 * s, "{\"event\": \"sync\", \"mode\": \"step\", \"h\": 0, \"requested\": \"auto\", "
                     "\"reason\": \"step: every link stays on this host (auto)\"}");
  g_assert_cmpstr (rlx_sync_panel_get_mode_text (panel), ==, "Automatic: every step");
  rlx_sync_panel_get_progress (panel, &visible);
  g_assert_false (visible);

  rlx_sync_panel_reset (panel);
  g_assert_cmpstr (rlx_sync_panel_get_links_text (panel), ==, "");
  g_assert_cmpstr (rlx_sync_panel_get_bytes_text (panel), ==, "—");
  g_object_unref (panel);
}

static void
test_fixed_step (void)
{
  RlxSyncPanel *panel = RLX_SYNC_PANEL (g_object_ref_sink (rlx_sync_panel_new ()));
  gboolean visible = TRUE;

  add (panel, 0, "{\"event\": \"sync\", \"mode\": \"step\", \"h\": 0, \"requested\": \"step\", "
                 "\"reason\": \"step: asked for (--sync step)\"}");
  g_assert_cmpstr (rlx_sync_panel_get_mode_text (panel), ==, "Every step");
  /* step-mode commits: bytes per sample, no round */
  add (panel, 0, "{\"event\": \"step\", \"step\": 1, \"samples\": 64, \"bytes_tx\": 0, \"bytes_rx\": 0}");
  add (panel, 1, "{\"event\": \"step\", \"step\": 2, \"samples\": 64, \"bytes_tx\": 6400, \"bytes_rx\": 0}");
  rlx_sync_panel_tick (panel, 1);
  g_assert_cmpstr (rlx_sync_panel_get_bytes_text (panel), ==, "100 bytes per sample");
  rlx_sync_panel_get_progress (panel, &visible);
  g_assert_false (visible);
  /* events it does not show change nothing */
  add (panel, 2, "{\"event\": \"leader\", \"node\": \"x\"}");
  g_assert_cmpstr (rlx_sync_panel_get_mode_text (panel), ==, "Every step");
  g_object_unref (panel);
}

/* Preferences → Synchronisation as `--sync` takes it (the app's node and its
 * local ranks get this), and the H row only in the outer mode. */
static void
test_preferences (void)
{
  g_autoptr(GSettings) settings = g_settings_new ("io.github.rlx.Cluster");
  g_autofree char *def = rlx_preferences_sync_request (settings);
  g_autofree char *outer = NULL, *step = NULL;
  RlxSyncRequest r;
  GtkWidget *win;

  g_assert_cmpstr (def, ==, "auto");                  /* the default */
  g_settings_set_string (settings, "sync", "outer");
  g_settings_set_uint (settings, "sync-h", 40);
  outer = rlx_preferences_sync_request (settings);
  g_assert_cmpstr (outer, ==, "outer:40");
  g_assert_true (rlx_sync_parse (outer, &r, NULL));
  g_assert_cmpint (r.mode, ==, RLX_SYNC_OUTER);
  g_assert_cmpuint (r.h, ==, 40);
  g_settings_set_string (settings, "sync", "step");
  step = rlx_preferences_sync_request (settings);
  g_assert_cmpstr (step, ==, "step");
  /* the window builds with the rows bound (their template is valid) */
  win = rlx_preferences_window_new (settings, FALSE);
  g_assert_nonnull (win);
  gtk_window_destroy (GTK_WINDOW (win));
  g_settings_reset (settings, "sync");
  g_settings_reset (settings, "sync-h");
}

int
main (int argc, char **argv)
{
  gtk_test_init (&argc, &argv, NULL);
  g_test_add_func ("/sync-panel/outer", test_outer);
  g_test_add_func ("/sync-panel/fixed-step", test_fixed_step);
  g_test_add_func ("/sync-panel/preferences", test_preferences);
  return g_test_run ();
}
