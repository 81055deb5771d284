/* test-event-log.c — the cohort's events in words, and which are urgent
 * (events are written here as the JSON lines --json prints, read back with
 * rlx_event_from_json) */
#include "node-test-utils.h"
#include "rlx-event-log.h"

#include <string.h>

static JsonObject *
parse (const char *json)
{
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(GError) error = NULL;

  json_parser_load_from_data (parser, json, -1, &error);
  g_assert_no_error (error);
  return json_object_ref (json_node_get_object (json_parser_get_root (parser)));
}

/* Log @json; returns the items it added. */
static GPtrArray *
add (RlxEventLog *log, const char *json)
{
  g_autoptr(JsonObject) o = parse (json);
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxEvent) e = rlx_event_from_json (o, &error);
  GPtrArray *added = NULL;

  g_assert_no_error (error);
  rlx_event_log_add_event (log, e, "me", &added);
  return added;
}

static void
assert_contains (const char *haystack, const char *needle)
{
  if (strstr (haystack, needle) == NULL)
    g_error ("“%s” does not contain “%s”", haystack, needle);
}

static void
test_fallback (void)
{
  g_autoptr(RlxEventLog) log = rlx_event_log_new ();
  g_autoptr(GPtrArray) a = NULL, b = NULL, c = NULL;
  RlxEventItem *item;

  a = add (log, "{\"event\":\"joined\",\"node\":\"me\",\"cohort\":\"default\",\"role\":\"leader\","
                "\"backend\":\"cpu\",\"device\":\"CPU, OpenBLAS\",\"precision\":\"f16\","
                "\"fallback\":\"vulkan: the only device is llvmpipe, a software rasterizer\"}");
  g_assert_cmpuint (a->len, ==, 2);
  item = g_ptr_array_index (a, 0);
  g_assert_cmpint (rlx_event_item_get_kind (item), ==, RLX_LOG_JOINED);
  g_assert_false (rlx_event_item_get_urgent (item));
  assert_contains (rlx_event_item_get_title (item), "default");
  assert_contains (rlx_event_item_get_detail (item), "f16");
  item = g_ptr_array_index (a, 1);
  g_assert_cmpint (rlx_event_item_get_kind (item), ==, RLX_LOG_FALLBACK);
  g_assert_true (rlx_event_item_get_urgent (item));
  assert_contains (rlx_event_item_get_title (item), "this node");
  assert_contains (rlx_event_item_get_title (item), "CPU");
  g_assert_cmpstr (rlx_event_item_get_detail (item), ==,
                   "vulkan: the only device is llvmpipe, a software rasterizer");

  /* a member with nothing passed over: no fallback item */
  b = add (log, "{\"event\":\"member-joined\",\"node\":\"n2\",\"host\":\"box\",\"backend\":\"vulkan\","
                "\"device\":\"NVIDIA H200\",\"fallback\":\"\",\"precision\":\"f32\",\"step\":3}");
  g_assert_cmpuint (b->len, ==, 1);
  assert_contains (rlx_event_item_get_title (g_ptr_array_index (b, 0)), "n2");
  assert_contains (rlx_event_item_get_title (g_ptr_array_index (b, 0)), "box");

  /* a member that fell back: named, with its reason */
  c = add (log, "{\"event\":\"member-joined\",\"node\":\"n3\",\"host\":\"laptop\",\"backend\":\"cpu\","
                "\"device\":\"CPU\",\"fallback\":\"vulkan: no Vulkan loader\",\"precision\":\"f32\"}");
  g_assert_cmpuint (c->len, ==, 2);
  item = g_ptr_array_index (c, 1);
  assert_contains (rlx_event_item_get_title (item), "n3");
  g_assert_cmpstr (rlx_event_item_get_detail (item), ==, "vulkan: no Vulkan loader");
  g_assert_cmpuint (g_list_model_get_n_items (G_LIST_MODEL (log)), ==, 5);
}

static void
test_left_refused_merged (void)
{
  g_autoptr(RlxEventLog) log = rlx_event_log_new ();
  g_autoptr(GPtrArray) a = NULL, b = NULL, c = NULL, d = NULL;
  RlxEventItem *item;

  a = add (log, "{\"event\":\"member-left\",\"node\":\"n2\",\"reason\":\"heartbeat timeout\",\"step\":41}");
  item = g_ptr_array_index (a, 0);
  g_assert_cmpint (rlx_event_item_get_kind (item), ==, RLX_LOG_LEFT);
  g_assert_true (rlx_event_item_get_urgent (item));
  assert_contains (rlx_event_item_get_detail (item), "heartbeat timeout");
  assert_contains (rlx_event_item_get_detail (item), "41");

  b = add (log, "{\"event\":\"refused\",\"node\":\"n9\",\"by\":\"me\",\"reason\":\"model mnist-cnn, the cohort trains mnist-mlp\"}");
  item = g_ptr_array_index (b, 0);
  g_assert_cmpint (rlx_event_item_get_kind (item), ==, RLX_LOG_REFUSED);
  g_assert_true (rlx_event_item_get_urgent (item));
  assert_contains (rlx_event_item_get_title (item), "Refused n9");
  assert_contains (rlx_event_item_get_detail (item), "mnist-cnn");

  c = add (log, "{\"event\":\"refused\",\"node\":\"me\",\"by\":\"n1\",\"reason\":\"protocol version 2\"}");
  assert_contains (rlx_event_item_get_title (g_ptr_array_index (c, 0)), "Refused by n1");

  d = add (log, "{\"event\":\"merged\",\"node\":\"n1\",\"discarded\":7,\"from_step\":100,\"to_step\":106,"
                "\"rule\":\"the older term wins\"}");
  item = g_ptr_array_index (d, 0);
  g_assert_cmpint (rlx_event_item_get_kind (item), ==, RLX_LOG_MERGED);
  g_assert_true (rlx_event_item_get_urgent (item));
  assert_contains (rlx_event_item_get_title (item), "7 steps discarded");
  assert_contains (rlx_event_item_get_detail (item), "100");
  assert_contains (rlx_event_item_get_detail (item), "106");
}

/* The first leader is not news; a change is; the same leader again is not. */
static void
test_leader_changes (void)
{
  g_autoptr(RlxEventLog) log = rlx_event_log_new ();
  g_autoptr(GPtrArray) a = NULL, b = NULL, c = NULL, d = NULL;

  a = add (log, "{\"event\":\"leader\",\"node\":\"n1\",\"term\":1,\"step\":0}");
  g_assert_false (rlx_event_item_get_urgent (g_ptr_array_index (a, 0)));
  b = add (log, "{\"event\":\"leader\",\"node\":\"n1\",\"term\":1,\"step\":5}");
  g_assert_false (rlx_event_item_get_urgent (g_ptr_array_index (b, 0)));
  c = add (log, "{\"event\":\"leader\",\"node\":\"me\",\"term\":2,\"step\":9}");
  g_assert_true (rlx_event_item_get_urgent (g_ptr_array_index (c, 0)));
  assert_contains (rlx_event_item_get_title (g_ptr_array_index (c, 0)), "This node");
  assert_contains (rlx_event_item_get_detail (g_ptr_array_index (c, 0)), "Term 2");
  rlx_event_log_clear (log);
  g_assert_cmpuint (g_list_model_get_n_items (G_LIST_MODEL (log)), ==, 0);
  /* after a clear the next leader is a first one again */
  d = add (log, "{\"event\":\"leader\",\"node\":\"n4\",\"term\":3,\"step\":0}");
  g_assert_false (rlx_event_item_get_urgent (g_ptr_array_index (d, 0)));
}

static void
test_routine_and_broken (void)
{
  g_autoptr(RlxEventLog) log = rlx_event_log_new ();
  g_autoptr(GPtrArray) a = NULL, b = NULL, c = NULL, d = NULL;

  a = add (log, "{\"event\":\"step\",\"step\":3,\"loss\":0.5}");
  g_assert_cmpuint (a->len, ==, 0);
  b = add (log, "{\"event\":\"checkpoint\",\"step\":100,\"path\":\"/x\"}");
  g_assert_cmpuint (b->len, ==, 0);
  g_assert_cmpuint (g_list_model_get_n_items (G_LIST_MODEL (log)), ==, 0);

  /* evaluations: one line that updates, never an item each */
  g_assert_null (rlx_event_log_get_accuracy_title (log));
  c = add (log, "{\"event\":\"evaluated\",\"step\":200,\"accuracy\":0.8421,\"test_loss\":0.45}");
  g_assert_cmpuint (c->len, ==, 0);
  assert_contains (rlx_event_log_get_accuracy_title (log), "84.2%");
  assert_contains (rlx_event_log_get_accuracy_title (log), "200");
  assert_contains (rlx_event_log_get_accuracy_detail (log), "0.4500");
  g_clear_pointer (&c, g_ptr_array_unref);
  c = add (log, "{\"event\":\"evaluated\",\"step\":300,\"accuracy\":0.9,\"test_loss\":0.3}");
  g_assert_cmpuint (c->len, ==, 0);
  assert_contains (rlx_event_log_get_accuracy_title (log), "90.0% at step 300");
  g_assert_cmpuint (g_list_model_get_n_items (G_LIST_MODEL (log)), ==, 0);

  /* missing members: words, never a crash (wrong types never get this
   * far: the reader refuses them, tests/event/test-event.c) */
  d = add (log, "{\"event\":\"member-left\"}");
  g_assert_cmpuint (d->len, ==, 1);
  g_assert_nonnull (rlx_event_item_get_title (g_ptr_array_index (d, 0)));
}

/* A slow rank's missed steps make one line that counts them. */
static void
test_late_coalesces (void)
{
  g_autoptr(RlxEventLog) log = rlx_event_log_new ();
  g_autoptr(GPtrArray) a = NULL, b = NULL, c = NULL, d = NULL;
  g_autoptr(RlxEventItem) first = NULL;

  a = add (log, "{\"event\":\"late\",\"node\":\"n2\",\"step\":10,\"reason\":\"missed the collect deadline\"}");
  g_assert_cmpuint (a->len, ==, 1);
  b = add (log, "{\"event\":\"late\",\"node\":\"n2\",\"step\":11,\"reason\":\"missed the collect deadline\"}");
  c = add (log, "{\"event\":\"late\",\"node\":\"n2\",\"step\":12,\"reason\":\"missed the collect deadline\"}");
  g_assert_cmpuint (b->len, ==, 0);
  g_assert_cmpuint (c->len, ==, 0);
  g_assert_cmpuint (g_list_model_get_n_items (G_LIST_MODEL (log)), ==, 1);
  first = g_list_model_get_item (G_LIST_MODEL (log), 0);
  assert_contains (rlx_event_item_get_title (first), "missed 3 steps");
  assert_contains (rlx_event_item_get_title (first), "12");
  /* another node, or something in between, starts a new line */
  d = add (log, "{\"event\":\"late\",\"node\":\"n3\",\"step\":12,\"reason\":\"x\"}");
  g_assert_cmpuint (d->len, ==, 1);
  g_assert_cmpuint (g_list_model_get_n_items (G_LIST_MODEL (log)), ==, 2);
}

/* What each filter keeps, and what the badge counts (warnings). */
static void
test_filters (void)
{
  g_autoptr(RlxEventLog) log = rlx_event_log_new ();
  g_autoptr(GPtrArray) a = NULL, b = NULL, c = NULL, d = NULL, e = NULL;
  RlxEventItem *joined, *leader, *rejected, *error, *invite;

  a = add (log, "{\"event\":\"member-joined\",\"node\":\"n2\",\"host\":\"h\",\"backend\":\"cpu\","
                "\"device\":\"CPU\",\"fallback\":\"\",\"precision\":\"f32\"}");
  b = add (log, "{\"event\":\"leader\",\"node\":\"n2\",\"term\":2,\"step\":5}");
  c = add (log, "{\"event\":\"rejected\",\"node\":\"n2\",\"step\":6,\"reason\":\"NaN\"}");
  d = add (log, "{\"event\":\"error\",\"node\":\"me\",\"reason\":\"disk full\"}");
  e = add (log, "{\"event\":\"invite\",\"invite\":\"rlx://h:1/c#k\",\"port\":1}");
  joined = g_ptr_array_index (a, 0);
  leader = g_ptr_array_index (b, 0);
  rejected = g_ptr_array_index (c, 0);
  error = g_ptr_array_index (d, 0);
  invite = g_ptr_array_index (e, 0);
  for (guint i = 0; i < 5; i++)
    g_assert_true (rlx_event_item_in_filter (((RlxEventItem *[]) { joined, leader, rejected, error,
                                                                   invite })[i],
                                             RLX_LOG_FILTER_ALL));
  g_assert_true (rlx_event_item_in_filter (joined, RLX_LOG_FILTER_MEMBERSHIP));
  g_assert_true (rlx_event_item_in_filter (leader, RLX_LOG_FILTER_MEMBERSHIP));
  g_assert_false (rlx_event_item_in_filter (rejected, RLX_LOG_FILTER_MEMBERSHIP));
  g_assert_false (rlx_event_item_in_filter (invite, RLX_LOG_FILTER_MEMBERSHIP));
  g_assert_false (rlx_event_item_in_filter (joined, RLX_LOG_FILTER_WARNINGS));
  g_assert_false (rlx_event_item_in_filter (leader, RLX_LOG_FILTER_WARNINGS));
  g_assert_true (rlx_event_item_in_filter (rejected, RLX_LOG_FILTER_WARNINGS));
  g_assert_true (rlx_event_item_in_filter (error, RLX_LOG_FILTER_WARNINGS));
  g_assert_false (rlx_event_item_in_filter (invite, RLX_LOG_FILTER_WARNINGS));
  g_assert_false (rlx_event_item_is_warning (joined));
  g_assert_true (rlx_event_item_is_warning (error));
}

typedef struct { int n; } Count;

static void
on_items_changed (GListModel *model, guint pos, guint removed, guint added, Count *c)
{
  c->n += (int) added - (int) removed;
  g_assert_cmpint (c->n, ==, (int) g_list_model_get_n_items (model));
}

/* The log keeps the newest RLX_EVENT_LOG_MAX items and says so to views. */
static void
test_cap (void)
{
  g_autoptr(RlxEventLog) log = rlx_event_log_new ();
  g_autoptr(RlxEventItem) first = NULL;
  Count c = { 0 };

  g_signal_connect (log, "items-changed", G_CALLBACK (on_items_changed), &c);
  for (guint i = 0; i < RLX_EVENT_LOG_MAX + 10; i++)
    {
      g_autofree char *title = g_strdup_printf ("item %u", i);
      rlx_event_log_add (log, RLX_LOG_INFO, FALSE, title, NULL);
    }
  g_assert_cmpuint (g_list_model_get_n_items (G_LIST_MODEL (log)), ==, RLX_EVENT_LOG_MAX);
  g_assert_cmpint (c.n, ==, RLX_EVENT_LOG_MAX);
  first = g_list_model_get_item (G_LIST_MODEL (log), 0);
  g_assert_cmpstr (rlx_event_item_get_title (first), ==, "item 10");
  g_assert_null (g_list_model_get_item (G_LIST_MODEL (log), RLX_EVENT_LOG_MAX));
}

int
main (int argc, char **argv)
{
  int status;

  node_test_init ();
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/app/event-log/fallback", test_fallback);
  g_test_add_func ("/app/event-log/left-refused-merged", test_left_refused_merged);
  g_test_add_func ("/app/event-log/leader-changes", test_leader_changes);
  g_test_add_func ("/app/event-log/routine-and-broken", test_routine_and_broken);
  g_test_add_func ("/app/event-log/late-coalesces", test_late_coalesces);
  g_test_add_func ("/app/event-log/cap", test_cap);
  g_test_add_func ("/app/event-log/filters", test_filters);
  status = g_test_run ();
  node_test_cleanup ();
  return status;
}
