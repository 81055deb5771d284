/* test-event.c — typed events (core/event/rlx-event.h): the JSON that
 * `rlx-rank join --json` prints is exactly what it was (names, order,
 * types, members left out), and the reader gives back the same event.
 */
#include "rlx-config.h"
#include "core/event/rlx-event.h"

/* The line today's consumers (tests, scripts, benchmarks) read, member by
 * member: a "step" with every field set. */
static void
test_step_line (void)
{
  g_autoptr(RlxEvent) e = rlx_event_new (RLX_EVENT_STEP);
  g_autofree char *line = NULL;
  RlxEventStep *s = &e->u.step;

  s->step = 7;
  s->loss = 0.5;
  s->leader = g_strdup ("a");
  s->term = 2;
  s->members = 3;
  s->samples = 96;
  s->assigned = 32;
  s->hash = 0xabcdef0123;
  s->bytes_tx = 10;
  s->bytes_rx = 20;
  s->bytes_f32 = 60;
  s->contributed = TRUE;
  s->contributors = 3;
  s->late = 1;
  s->rejected = 0;
  s->time_us = 123456789;
  line = rlx_event_to_json_line (e);
  g_assert_cmpstr (line, ==,
                   "{\"event\":\"step\",\"step\":7,\"loss\":0.5,\"leader\":\"a\",\"term\":2,"
                   "\"members\":3,\"samples\":96,\"assigned\":32,\"hash\":\"000000abcdef0123\","
                   "\"bytes_tx\":10,\"bytes_rx\":20,\"bytes_f32\":60,\"contributed\":true,"
                   "\"contributors\":3,\"late\":1,\"rejected\":0,\"time_us\":123456789}");
}

/* Members that are there only sometimes: a join says where the rank
 * computes, a departure why; a NULL string is null unless optional. */
static void
test_optional_members (void)
{
  g_autoptr(RlxEvent) left = rlx_event_new (RLX_EVENT_MEMBER_LEFT);
  g_autoptr(RlxEvent) joined = rlx_event_new (RLX_EVENT_MEMBER_JOINED);
  g_autoptr(RlxEvent) room = rlx_event_new (RLX_EVENT_SIGNALLING);
  g_autoptr(RlxEvent) err = rlx_event_note_new (RLX_EVENT_ERROR, "b", NULL);
  g_autoptr(RlxEvent) rej = rlx_event_new (RLX_EVENT_REJECTED);
  g_autofree char *l1 = NULL, *l2 = NULL, *l3 = NULL, *l4 = NULL, *l5 = NULL;

  left->u.member.node = g_strdup ("b");
  left->u.member.reason = g_strdup ("interrupted");
  left->u.member.step = 5;
  l1 = rlx_event_to_json_line (left);
  g_assert_cmpstr (l1, ==,
                   "{\"event\":\"member-left\",\"node\":\"b\",\"reason\":\"interrupted\","
                   "\"step\":5}");

  joined->u.member.node = g_strdup ("c");
  joined->u.member.has_peer = TRUE;
  joined->u.member.host = g_strdup ("h");
  joined->u.member.backend = g_strdup ("cpu");
  joined->u.member.device = g_strdup ("OpenBLAS");
  joined->u.member.precision = g_strdup ("bf16");   /* fallback stays NULL: null */
  l2 = rlx_event_to_json_line (joined);
  g_assert_cmpstr (l2, ==,
                   "{\"event\":\"member-joined\",\"node\":\"c\",\"host\":\"h\",\"backend\":\"cpu\","
                   "\"device\":\"OpenBLAS\",\"fallback\":null,\"precision\":\"bf16\",\"step\":0}");

  room->u.signalling.state = g_strdup ("joined");
  room->u.signalling.server = g_strdup ("x:1");
  room->u.signalling.has_room = TRUE;
  room->u.signalling.peers = 2;
  l3 = rlx_event_to_json_line (room);
  g_assert_cmpstr (l3, ==,
                   "{\"event\":\"signalling\",\"state\":\"joined\",\"server\":\"x:1\","
                   "\"peers\":2,\"hosted\":false}");

  l4 = rlx_event_to_json_line (err);
  g_assert_cmpstr (l4, ==, "{\"event\":\"error\",\"node\":\"b\"}");

  /* a message a remote node refused: no step, nobody "by" */
  rej->u.rejected.node = g_strdup ("d");
  rej->u.rejected.reason = g_strdup ("bad signature");
  l5 = rlx_event_to_json_line (rej);
  g_assert_cmpstr (l5, ==, "{\"event\":\"rejected\",\"node\":\"d\",\"reason\":\"bad signature\"}");
}

/* "done": the statistics groups appear only when measured. */
static void
test_done_groups (void)
{
  g_autoptr(RlxEvent) e = rlx_event_new (RLX_EVENT_DONE);
  g_autoptr(JsonObject) bare = NULL;
  g_autoptr(JsonObject) full = NULL;

  bare = rlx_event_to_json (e);
  g_assert_false (json_object_has_member (bare, "rounds_measured"));
  g_assert_false (json_object_has_member (bare, "cpu_ms"));
  g_assert_false (json_object_has_member (bare, "steps_measured"));
  g_assert_true (json_object_has_member (bare, "bytes_f32"));
  e->u.done.has_rounds = TRUE;
  e->u.done.rounds_measured = 4;
  e->u.done.round_ms = 2.5;
  e->u.done.has_backend = TRUE;
  e->u.done.device_grad_ms = 0.25;
  full = rlx_event_to_json (e);
  g_assert_cmpint (json_object_get_int_member (full, "rounds_measured"), ==, 4);
  g_assert_cmpfloat (json_object_get_double_member (full, "round_ms"), ==, 2.5);
  g_assert_cmpfloat (json_object_get_double_member (full, "device_grad_ms"), ==, 0.25);
  g_assert_false (json_object_has_member (full, "cpu_ms"));
}

/* A value for every member of @o that is not "event", unlike the zero the
 * writer put there. */
static void
fill (JsonObject *o)
{
  GList *names = json_object_get_members (o);
  guint i = 0;

  for (GList *m = names; m; m = m->next, i++)
    {
      const char *k = m->data;
      JsonNode *n = json_object_get_member (o, k);

      if (g_str_equal (k, "event"))
        continue;
      if (JSON_NODE_HOLDS_NULL (n))
        json_object_set_string_member (o, k, k);
      else if (json_node_get_value_type (n) == G_TYPE_INT64)
        json_object_set_int_member (o, k, 1000 + i);
      else if (json_node_get_value_type (n) == G_TYPE_DOUBLE)
        json_object_set_double_member (o, k, 0.25 + i);
      else if (json_node_get_value_type (n) == G_TYPE_BOOLEAN)
        json_object_set_boolean_member (o, k, TRUE);
      else   /* a hash: the only string the writer makes from nothing */
        json_object_set_string_member (o, k, "0123456789abcdef");
    }
  g_list_free (names);
}

static char *
line_of (JsonObject *o)
{
  g_autoptr(JsonNode) n = json_node_init_object (json_node_alloc (), o);

  return json_to_string (n, FALSE);
}

/* Every kind: named, and written then read back to the same event. */
static void
test_round_trip (void)
{
  for (guint k = 0; k < RLX_EVENT_N_KINDS; k++)
    {
      g_autoptr(RlxEvent) blank = rlx_event_new (k);
      g_autoptr(JsonObject) o = rlx_event_to_json (blank);
      g_autoptr(RlxEvent) back = NULL;
      g_autoptr(JsonObject) again = NULL;
      g_autoptr(GError) error = NULL;
      g_autofree char *want = NULL, *got = NULL;
      RlxEventKind kind;

      g_assert_nonnull (rlx_event_kind_name (k));
      g_assert_true (rlx_event_kind_from_name (rlx_event_kind_name (k), &kind));
      g_assert_cmpint (kind, ==, k);
      g_assert_cmpstr (json_object_get_string_member (o, "event"), ==, rlx_event_kind_name (k));
      fill (o);
      back = rlx_event_from_json (o, &error);
      g_assert_no_error (error);
      g_assert_cmpint (back->kind, ==, k);
      again = rlx_event_to_json (back);
      want = line_of (o);
      got = line_of (again);
      g_assert_cmpstr (got, ==, want);
    }
  /* the groups that are sometimes there come back too */
  {
    g_autoptr(RlxEvent) e = rlx_event_new (RLX_EVENT_MEMBER_JOINED);
    g_autoptr(JsonObject) o = NULL;
    g_autoptr(RlxEvent) back = NULL;

    e->u.member.has_peer = TRUE;
    e->u.member.host = g_strdup ("h");
    o = rlx_event_to_json (e);
    back = rlx_event_from_json (o, NULL);
    g_assert_true (back->u.member.has_peer);
    g_assert_cmpstr (back->u.member.host, ==, "h");
    g_assert_null (back->u.member.backend);
  }
  /* "joined" says where training stands; a log from before has not that
   * group, and reads back without it */
  {
    g_autoptr(RlxEvent) e = rlx_event_new (RLX_EVENT_JOINED);
    g_autoptr(JsonObject) o = NULL, bare = NULL;
    g_autoptr(RlxEvent) back = NULL, old = NULL;

    bare = rlx_event_to_json (e);
    g_assert_false (json_object_has_member (bare, "train"));
    old = rlx_event_from_json (bare, NULL);
    g_assert_false (old->u.joined.has_data);
    e->u.joined.has_data = TRUE;
    e->u.joined.train = 60000;
    e->u.joined.pos = 128;
    e->u.joined.steps = 900;
    o = rlx_event_to_json (e);
    back = rlx_event_from_json (o, NULL);
    g_assert_true (back->u.joined.has_data);
    g_assert_cmpuint (back->u.joined.train, ==, 60000);
    g_assert_cmpuint (back->u.joined.pos, ==, 128);
    g_assert_cmpuint (back->u.joined.steps, ==, 900);
  }
}

static void
expect_error (const char *json, const char *says)
{
  g_autoptr(JsonNode) n = json_from_string (json, NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(RlxEvent) e = rlx_event_from_json (json_node_get_object (n), &error);

  g_assert_null (e);
  g_assert_error (error, RLX_EVENT_READ_ERROR, 0);
  g_assert_nonnull (strstr (error->message, says));
}

/* What is not an event is refused with what was wrong. */
static void
test_reader_refuses (void)
{
  expect_error ("{\"step\":1}", "no \"event\" member");
  expect_error ("{\"event\":\"nonsense\"}", "unknown event \"nonsense\"");
  expect_error ("{\"event\":\"step\",\"step\":\"7\"}", "member \"step\" should be a non-negative integer");
  expect_error ("{\"event\":\"step\",\"step\":-1}", "member \"step\"");
  expect_error ("{\"event\":\"step\",\"hash\":\"xyz\"}", "member \"hash\" should be 16 hex digits");
  expect_error ("{\"event\":\"leader\",\"node\":3}", "member \"node\" should be a string");
  expect_error ("{\"event\":\"merged\",\"exact\":1}", "member \"exact\" should be true or false");
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/event/step-line", test_step_line);
  g_test_add_func ("/event/optional-members", test_optional_members);
  g_test_add_func ("/event/done-groups", test_done_groups);
  g_test_add_func ("/event/round-trip", test_round_trip);
  g_test_add_func ("/event/reader-refuses", test_reader_refuses);
  return g_test_run ();
}
