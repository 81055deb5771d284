/* rlx-benchmark.c — the app measuring itself (see the header) */
#include "rlx-config.h"
#include "rlx-benchmark.h"
#include "rlx-window-private.h"

#include <math.h>
#include <stdio.h>
#include <sys/resource.h>
#include <time.h>

#define SETUP_TIMEOUT_US  (180 * G_USEC_PER_SEC)
#define WARMUP_STEPS      20
#define CHART_POINTS      100000
#define CHART_REDRAWS     200

static gboolean failed;

gboolean
rlx_benchmark_failed (void)
{
  return failed;
}

static double
thread_cpu_s (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double
process_cpu_s (void)
{
  struct rusage ru;

  getrusage (RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
         ru.ru_stime.tv_usec / 1e6;
}

static int
cmp_i64 (gconstpointer a, gconstpointer b)
{
  gint64 x = *(const gint64 *) a, y = *(const gint64 *) b;
  return x < y ? -1 : x > y;
}

/* The @p quantile (0..1) of @values, in ms; sorts @values. */
static double
quantile_ms (GArray *values, double p)
{
  guint i;

  if (values->len == 0)
    return NAN;
  g_array_sort (values, cmp_i64);
  i = (guint) ceil (p * values->len);
  i = i == 0 ? 0 : i - 1;
  return g_array_index (values, gint64, MIN (i, values->len - 1)) / 1000.0;
}

static void
print_json (JsonBuilder *b)
{
  g_autoptr(JsonGenerator) gen = json_generator_new ();
  g_autoptr(JsonNode) root = json_builder_get_root (b);
  g_autofree char *text = NULL;

  json_generator_set_root (gen, root);
  json_generator_set_pretty (gen, TRUE);
  text = json_generator_to_data (gen, NULL);
  printf ("%s\n", text);
  fflush (stdout);
}

/* ── frame timings ─────────────────────────────────────────────────────── */

typedef struct {
  GArray  *work_us;       /* before-paint → end of after-paint, wall clock */
  GArray  *cpu_us;        /* the same span in this thread's CPU time */
  GArray  *interval_us;   /* frame start → next frame start */
  gint64   last_frame;
  gint64   started;       /* this frame's before-paint, 0 outside a frame */
  double   started_cpu;
} Frames;

static void
frames_init (Frames *f)
{
  f->work_us = g_array_new (FALSE, FALSE, sizeof (gint64));
  f->cpu_us = g_array_new (FALSE, FALSE, sizeof (gint64));
  f->interval_us = g_array_new (FALSE, FALSE, sizeof (gint64));
  f->last_frame = 0;
}

static void
frames_clear (Frames *f)
{
  g_clear_pointer (&f->work_us, g_array_unref);
  g_clear_pointer (&f->cpu_us, g_array_unref);
  g_clear_pointer (&f->interval_us, g_array_unref);
}

/* The frame clock's own frame time is smoothed to the refresh cycle (it can
 * lie a whole interval before the frame really began), so the frame's work
 * is timed from its before-paint signal to its after-paint signal. */
static void
frames_before_paint (Frames *f, GdkFrameClock *clock)
{
  f->started = g_get_monotonic_time ();
  f->started_cpu = thread_cpu_s ();
}

static void
frames_after_paint (Frames *f, GdkFrameClock *clock)
{
  gint64 work;

  if (f->started == 0)
    return;
  work = g_get_monotonic_time () - f->started;
  g_array_append_val (f->work_us, work);
  work = (gint64) ((thread_cpu_s () - f->started_cpu) * 1e6);
  g_array_append_val (f->cpu_us, work);
  if (f->last_frame)
    {
      gint64 interval = f->started - f->last_frame;
      g_array_append_val (f->interval_us, interval);
    }
  f->last_frame = f->started;
  f->started = 0;
}

static void
frames_add_json (Frames *f, JsonBuilder *b, const char *prefix)
{
  g_autofree char *k_n = g_strdup_printf ("%s_frames", prefix);
  g_autofree char *k_50 = g_strdup_printf ("%s_frame_ms_p50", prefix);
  g_autofree char *k_99 = g_strdup_printf ("%s_frame_ms_p99", prefix);
  g_autofree char *k_max = g_strdup_printf ("%s_frame_ms_max", prefix);
  g_autofree char *k_i50 = g_strdup_printf ("%s_interval_ms_p50", prefix);
  g_autofree char *k_i99 = g_strdup_printf ("%s_interval_ms_p99", prefix);
  g_autofree char *k_c50 = g_strdup_printf ("%s_frame_cpu_ms_p50", prefix);
  g_autofree char *k_c99 = g_strdup_printf ("%s_frame_cpu_ms_p99", prefix);
  g_autofree char *k_sum = g_strdup_printf ("%s_frames_cpu_ms_total", prefix);
  gint64 total = 0;

  for (guint i = 0; i < f->cpu_us->len; i++)
    total += g_array_index (f->cpu_us, gint64, i);

  json_builder_set_member_name (b, k_n);
  json_builder_add_int_value (b, f->work_us->len);
  json_builder_set_member_name (b, k_50);
  json_builder_add_double_value (b, quantile_ms (f->work_us, 0.50));
  json_builder_set_member_name (b, k_99);
  json_builder_add_double_value (b, quantile_ms (f->work_us, 0.99));
  json_builder_set_member_name (b, k_max);
  json_builder_add_double_value (b, quantile_ms (f->work_us, 1.0));
  json_builder_set_member_name (b, k_i50);
  json_builder_add_double_value (b, quantile_ms (f->interval_us, 0.50));
  json_builder_set_member_name (b, k_i99);
  json_builder_add_double_value (b, quantile_ms (f->interval_us, 0.99));
  json_builder_set_member_name (b, k_sum);
  json_builder_add_double_value (b, total / 1000.0);
  json_builder_set_member_name (b, k_c50);
  json_builder_add_double_value (b, quantile_ms (f->cpu_us, 0.50));
  json_builder_set_member_name (b, k_c99);
  json_builder_add_double_value (b, quantile_ms (f->cpu_us, 0.99));
}

/* ── UI under load ─────────────────────────────────────────────────────── */

typedef enum { PHASE_SETUP, PHASE_WATCH, PHASE_HOVER } Phase;

typedef struct {
  RlxWindow     *window;
  guint          seconds;
  guint          ranks;
  guint          spawned;
  gint64         setup_start;
  guint64        ready_step;       /* step when every rank was in */
  guint          poll_id;
  guint          timer_id;
  guint          tick_id;
  GdkFrameClock *clock;
  gulong         paint_id, before_id;
  Phase          phase;
  Frames         frames;
  gint64         t0;
  double         thread0, proc0, node0;
  guint64        step0;
  int            readout;
  JsonBuilder   *json;
} UiBench;

/* Start measuring a phase. */
static void
phase_begin (UiBench *ub, Phase phase)
{
  RlxNodeThread *node = rlx_window_get_node (ub->window);

  ub->phase = phase;
  frames_clear (&ub->frames);
  frames_init (&ub->frames);
  ub->t0 = g_get_monotonic_time ();
  ub->thread0 = thread_cpu_s ();
  ub->proc0 = process_cpu_s ();
  ub->node0 = node ? rlx_node_thread_get_cpu_seconds (node) : 0;
  ub->step0 = node ? rlx_node_thread_get_step (node) : 0;
}

/* Write the phase's figures, prefixed "watch_" or "hover_". */
static void
phase_end (UiBench *ub)
{
  RlxNodeThread *node = rlx_window_get_node (ub->window);
  const char *prefix = ub->phase == PHASE_WATCH ? "watch" : "hover";
  double wall = (g_get_monotonic_time () - ub->t0) / 1e6;
  double thread = thread_cpu_s () - ub->thread0;
  double proc = process_cpu_s () - ub->proc0;
  double node_cpu = node ? rlx_node_thread_get_cpu_seconds (node) - ub->node0 : 0;
  guint64 steps = node ? rlx_node_thread_get_step (node) - ub->step0 : 0;
  g_autofree char *k_cpu = g_strdup_printf ("%s_ui_thread_cpu_percent", prefix);
  g_autofree char *k_proc = g_strdup_printf ("%s_process_cpu_percent", prefix);
  g_autofree char *k_node = g_strdup_printf ("%s_node_thread_cpu_percent", prefix);
  g_autofree char *k_steps = g_strdup_printf ("%s_steps_per_s", prefix);
  g_autofree char *k_fps = g_strdup_printf ("%s_frames_per_s", prefix);

  frames_add_json (&ub->frames, ub->json, prefix);
  json_builder_set_member_name (ub->json, k_fps);
  json_builder_add_double_value (ub->json, ub->frames.work_us->len / wall);
  json_builder_set_member_name (ub->json, k_cpu);
  json_builder_add_double_value (ub->json, 100.0 * thread / wall);
  json_builder_set_member_name (ub->json, k_proc);
  json_builder_add_double_value (ub->json, 100.0 * proc / wall);
  /* the node's protocol, on its own thread (not in the UI thread's figure) */
  json_builder_set_member_name (ub->json, k_node);
  json_builder_add_double_value (ub->json, 100.0 * node_cpu / wall);
  json_builder_set_member_name (ub->json, k_steps);
  json_builder_add_double_value (ub->json, steps / wall);
}

static void
ui_bench_finish (UiBench *ub, const char *error)
{
  g_autoptr(JsonBuilder) b = g_steal_pointer (&ub->json);
  RlxLossChart *chart = rlx_window_get_chart (ub->window);

  g_clear_handle_id (&ub->poll_id, g_source_remove);
  g_clear_handle_id (&ub->timer_id, g_source_remove);
  if (ub->tick_id)
    gtk_widget_remove_tick_callback (GTK_WIDGET (ub->window), ub->tick_id);
  if (ub->clock && ub->paint_id)
    g_signal_handler_disconnect (ub->clock, ub->paint_id);
  if (ub->clock && ub->before_id)
    g_signal_handler_disconnect (ub->clock, ub->before_id);

  if (error)
    {
      json_builder_set_member_name (b, "error");
      json_builder_add_string_value (b, error);
      failed = TRUE;
    }
  else
    {
      json_builder_set_member_name (b, "seconds");
      json_builder_add_double_value (b, ub->seconds);
      json_builder_set_member_name (b, "ranks");
      json_builder_add_int_value (b, ub->ranks + 1);
      json_builder_set_member_name (b, "chart_points");
      json_builder_add_int_value (b, rlx_chart_series_get_n_points (rlx_loss_chart_get_loss (chart)));
    }
  json_builder_end_object (b);
  print_json (b);
  frames_clear (&ub->frames);
  gtk_window_close (GTK_WINDOW (ub->window));
  g_object_unref (ub->window);
  g_free (ub);
}

static void
on_ui_before_paint (GdkFrameClock *clock, UiBench *ub)
{
  frames_before_paint (&ub->frames, clock);
}

static void
on_ui_after_paint (GdkFrameClock *clock, UiBench *ub)
{
  frames_after_paint (&ub->frames, clock);
}

/* hover: every frame moves the readout, as a pointer over the chart would */
static gboolean
on_ui_tick (GtkWidget *widget, GdkFrameClock *clock, gpointer user_data)
{
  UiBench *ub = user_data;
  RlxLossChart *chart = rlx_window_get_chart (ub->window);
  int n = (int) rlx_chart_series_get_n_points (rlx_loss_chart_get_loss (chart));

  if (n > 0)
    {
      ub->readout = (ub->readout + 7) % n;
      rlx_loss_chart_set_readout (chart, ub->readout);
    }
  return G_SOURCE_CONTINUE;
}

static gboolean
on_phase_over (gpointer user_data)
{
  UiBench *ub = user_data;

  ub->timer_id = 0;
  phase_end (ub);
  if (ub->phase == PHASE_WATCH)
    {
      phase_begin (ub, PHASE_HOVER);
      ub->tick_id = gtk_widget_add_tick_callback (GTK_WIDGET (ub->window), on_ui_tick, ub, NULL);
      ub->timer_id = g_timeout_add_seconds (ub->seconds, on_phase_over, ub);
      return G_SOURCE_REMOVE;
    }
  gtk_widget_remove_tick_callback (GTK_WIDGET (ub->window), ub->tick_id);
  ub->tick_id = 0;
  rlx_loss_chart_set_readout (rlx_window_get_chart (ub->window), -1);
  ui_bench_finish (ub, NULL);
  return G_SOURCE_REMOVE;
}

static gboolean
on_ui_poll (gpointer user_data)
{
  UiBench *ub = user_data;
  RlxNodeThread *node = rlx_window_get_node (ub->window);
  const char *state = rlx_window_get_state (ub->window);
  guint members;

  if (g_get_monotonic_time () - ub->setup_start > SETUP_TIMEOUT_US)
    {
      ub->poll_id = 0;
      ui_bench_finish (ub, "the local ranks did not all join and train within 180 s");
      return G_SOURCE_REMOVE;
    }
  if (g_str_equal (state, "idle") && ub->spawned == 0)
    {
      rlx_window_join (ub->window);
      return G_SOURCE_CONTINUE;
    }
  if (!g_str_equal (state, "joined") || node == NULL)
    return G_SOURCE_CONTINUE;
  while (ub->spawned < ub->ranks)
    {
      rlx_window_add_local_rank (ub->window);
      ub->spawned++;
    }
  members = g_list_model_get_n_items (rlx_node_thread_get_roster (node));
  if (members < ub->ranks + 1)
    return G_SOURCE_CONTINUE;
  if (ub->ready_step == 0)
    {
      ub->ready_step = rlx_node_thread_get_step (node) + 1;
      return G_SOURCE_CONTINUE;
    }
  if (rlx_node_thread_get_step (node) < ub->ready_step + WARMUP_STEPS)
    return G_SOURCE_CONTINUE;

  /* everyone trains: measure, first watching, then hovering */
  ub->poll_id = 0;
  ub->clock = gtk_widget_get_frame_clock (GTK_WIDGET (ub->window));
  ub->before_id = g_signal_connect (ub->clock, "before-paint", G_CALLBACK (on_ui_before_paint), ub);
  ub->paint_id = g_signal_connect (ub->clock, "after-paint", G_CALLBACK (on_ui_after_paint), ub);
  phase_begin (ub, PHASE_WATCH);
  ub->timer_id = g_timeout_add_seconds (ub->seconds, on_phase_over, ub);
  return G_SOURCE_REMOVE;
}

void
rlx_benchmark_ui (RlxWindow *window, guint seconds, guint ranks)
{
  UiBench *ub = g_new0 (UiBench, 1);

  ub->window = g_object_ref (window);
  ub->seconds = MAX (1u, seconds);
  ub->ranks = ranks;
  ub->setup_start = g_get_monotonic_time ();
  ub->json = json_builder_new ();
  json_builder_begin_object (ub->json);
  json_builder_set_member_name (ub->json, "benchmark");
  json_builder_add_string_value (ub->json, "ui");
  frames_init (&ub->frames);
  ub->poll_id = g_timeout_add (100, on_ui_poll, ub);
}

/* ── the chart with 100,000 points ─────────────────────────────────────── */

typedef struct {
  GtkWindow     *window;
  RlxLossChart  *chart;
  GRand         *rand;
  guint          next_x;
  Frames         frames;
  GdkFrameClock *clock;
  gulong         paint_id, before_id;
  GArray        *snapshot_us;
  GArray        *snapshot_cpu_us;
  guint          frames_left;
  RlxWindow     *app_window;
} ChartBench;

static void
chart_append (ChartBench *cb)
{
  double i = cb->next_x++;
  double loss = 0.3 + 2.0 * exp (-i / 20000.0) + 0.15 * g_rand_double (cb->rand);

  rlx_chart_series_append (rlx_loss_chart_get_loss (cb->chart), i, loss,
                           (gint64) (i * 2000));
  if (cb->next_x % 1000 == 0)
    rlx_chart_series_append (rlx_loss_chart_get_accuracy (cb->chart), i,
                             0.9 - 0.5 * exp (-i / 20000.0), (gint64) (i * 2000));
}

static void
chart_bench_finish (ChartBench *cb)
{
  g_autoptr(JsonBuilder) b = json_builder_new ();
  RlxLossChartStats stats;

  rlx_loss_chart_get_stats (cb->chart, &stats);
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "benchmark");
  json_builder_add_string_value (b, "chart");
  json_builder_set_member_name (b, "points");
  json_builder_add_int_value (b, rlx_chart_series_get_n_points (rlx_loss_chart_get_loss (cb->chart)));
  json_builder_set_member_name (b, "width");
  json_builder_add_int_value (b, gtk_widget_get_width (GTK_WIDGET (cb->chart)));
  json_builder_set_member_name (b, "height");
  json_builder_add_int_value (b, gtk_widget_get_height (GTK_WIDGET (cb->chart)));
  json_builder_set_member_name (b, "columns");
  json_builder_add_int_value (b, stats.n_columns);
  json_builder_set_member_name (b, "points_visited");
  json_builder_add_int_value (b, stats.n_visited);
  json_builder_set_member_name (b, "snapshot_ms_p50");
  json_builder_add_double_value (b, quantile_ms (cb->snapshot_us, 0.5));
  json_builder_set_member_name (b, "snapshot_ms_p99");
  json_builder_add_double_value (b, quantile_ms (cb->snapshot_us, 0.99));
  json_builder_set_member_name (b, "snapshot_cpu_ms_p50");
  json_builder_add_double_value (b, quantile_ms (cb->snapshot_cpu_us, 0.5));
  json_builder_set_member_name (b, "snapshot_cpu_ms_p99");
  json_builder_add_double_value (b, quantile_ms (cb->snapshot_cpu_us, 0.99));
  frames_add_json (&cb->frames, b, "redraw");
  json_builder_end_object (b);
  print_json (b);

  g_signal_handler_disconnect (cb->clock, cb->paint_id);
  g_signal_handler_disconnect (cb->clock, cb->before_id);
  frames_clear (&cb->frames);
  g_array_unref (cb->snapshot_us);
  g_array_unref (cb->snapshot_cpu_us);
  g_rand_free (cb->rand);
  gtk_window_destroy (cb->window);
  gtk_window_close (GTK_WINDOW (cb->app_window));
  g_object_unref (cb->app_window);
  g_free (cb);
}

static void
on_chart_before_paint (GdkFrameClock *clock, ChartBench *cb)
{
  frames_before_paint (&cb->frames, clock);
}

static void
on_chart_after_paint (GdkFrameClock *clock, ChartBench *cb)
{
  if (cb->frames_left == 0)
    return;
  frames_after_paint (&cb->frames, clock);
  if (--cb->frames_left == 0)
    g_idle_add_once ((GSourceOnceFunc) chart_bench_finish, cb);
}

/* (a) the plot alone, rebuilt after each new point */
static void
time_snapshots (ChartBench *cb, int w, int h)
{
  for (guint k = 0; k < CHART_REDRAWS; k++)
    {
      g_autoptr(GtkSnapshot) snapshot = gtk_snapshot_new ();
      g_autoptr(GskRenderNode) node = NULL;
      gint64 t0, dt;
      double c0;

      chart_append (cb);
      t0 = g_get_monotonic_time ();
      c0 = thread_cpu_s ();
      rlx_loss_chart_draw (cb->chart, snapshot, w, h);
      node = gtk_snapshot_free_to_node (g_steal_pointer (&snapshot));
      dt = g_get_monotonic_time () - t0;
      g_array_append_val (cb->snapshot_us, dt);
      dt = (gint64) ((thread_cpu_s () - c0) * 1e6);
      g_array_append_val (cb->snapshot_cpu_us, dt);
    }
}

/* Once the chart has its size: (a), then (b) real frames, each after one
 * more point, so every frame rebuilds the plot. */
static gboolean
on_chart_tick (GtkWidget *widget, GdkFrameClock *clock, gpointer user_data)
{
  ChartBench *cb = user_data;
  int w = gtk_widget_get_width (widget), h = gtk_widget_get_height (widget);

  if (cb->clock == NULL)
    {
      if (w <= 0 || h <= 0)
        return G_SOURCE_CONTINUE;
      time_snapshots (cb, w, h);
      cb->frames_left = CHART_REDRAWS;
      cb->clock = clock;
      cb->before_id = g_signal_connect (clock, "before-paint", G_CALLBACK (on_chart_before_paint), cb);
      cb->paint_id = g_signal_connect (clock, "after-paint", G_CALLBACK (on_chart_after_paint), cb);
    }
  if (cb->frames_left == 0)
    return G_SOURCE_REMOVE;
  chart_append (cb);
  gtk_widget_queue_draw (widget);
  return G_SOURCE_CONTINUE;
}

void
rlx_benchmark_chart (RlxWindow *window)
{
  ChartBench *cb = g_new0 (ChartBench, 1);

  cb->app_window = g_object_ref (window);
  cb->rand = g_rand_new_with_seed (42);
  cb->snapshot_us = g_array_new (FALSE, FALSE, sizeof (gint64));
  cb->snapshot_cpu_us = g_array_new (FALSE, FALSE, sizeof (gint64));
  frames_init (&cb->frames);
  cb->window = GTK_WINDOW (gtk_window_new ());
  gtk_window_set_title (cb->window, "RLX Cluster chart benchmark");
  gtk_window_set_default_size (cb->window, 1200, 400);
  cb->chart = RLX_LOSS_CHART (rlx_loss_chart_new ());
  rlx_loss_chart_set_min_redraw_ms (cb->chart, 0);
  gtk_window_set_child (cb->window, GTK_WIDGET (cb->chart));
  while (cb->next_x < CHART_POINTS)
    chart_append (cb);
  gtk_widget_add_tick_callback (GTK_WIDGET (cb->chart), on_chart_tick, cb, NULL);
  gtk_window_present (cb->window);
}
