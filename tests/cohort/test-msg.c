/* test-msg.c — the members of every message kind, as rlx-msg.c's field
 * table reads them: which are required (each one left out is refused with
 * "member NAME is missing", each optional one is not), the bounds and types
 * of each (refused with the message a peer's log shows), what an absent
 * optional member reads as, and what building writes and leaves out. The lists here are written out independently
 * of the table, so a table entry with the wrong name, flag or bound fails.
 */
#include "rlx-config.h"
#include "core/cohort/rlx-msg.h"
#include "core/p2p/rlx-link.h"
#include "core/p2p/rlx-unix-link.h"

#include <math.h>
#include <string.h>

typedef struct {
  const char *json;       /* a valid header of the kind */
  const char *required;   /* the members it must have, space-separated */
} Kind;

static const Kind kinds[] = {
  { "{\"t\":\"hello\",\"node\":\"a\",\"v\":3,\"cohort\":\"c\",\"seed\":\"1\",\"model\":\"m\","
    "\"dataset\":\"d\",\"backend\":\"cpu\",\"device\":\"x\",\"fallback\":\"\",\"host\":\"h\","
    "\"precision\":\"f16\",\"batch\":8,\"max_batch\":8,\"role\":\"member\",\"leader\":\"b\","
    "\"term\":1,\"step\":2,\"members\":2,\"checkpoint\":0,\"join_only\":false}",
    "node v cohort seed model dataset backend device fallback host precision batch max_batch "
    "role term step members" },
  { "{\"t\":\"refuse\",\"node\":\"a\",\"reason\":\"no\"}", "node reason" },
  { "{\"t\":\"leader\",\"node\":\"a\",\"leader\":\"b\",\"term\":2,\"step\":3}", "node leader term step" },
  { "{\"t\":\"join\",\"node\":\"a\",\"reason\":\"join\",\"step\":3,\"hash\":\"0123456789abcdef\","
    "\"merge\":true}", "node reason step hash" },
  { "{\"t\":\"snapshot\",\"node\":\"a\",\"term\":1,\"leader\":\"a\",\"step\":3,"
    "\"hash\":\"0123456789abcdef\",\"seed\":\"1\",\"epoch\":0,\"pos\":16,\"loss\":2.5,"
    "\"members\":[\"a\",\"b\"],\"hashes_from\":2,\"hashes\":[\"0123456789abcdef\"]}",
    "node term leader step hash seed epoch pos loss members" },
  { "{\"t\":\"step\",\"node\":\"a\",\"term\":1,\"step\":4,\"commit\":3,\"base\":\"0123456789abcdef\","
    "\"loss\":2.5,\"samples\":16,\"contributors\":[\"a\"],\"late\":0,\"rejected\":0,\"lr\":0.05,"
    "\"epoch\":0,\"pos\":32,\"count\":16,\"members\":[\"a\",\"b\"],\"assign\":{\"a\":[32,8],"
    "\"b\":[40,8]},\"final\":false}",
    "node term step commit base loss samples contributors late rejected lr epoch pos count "
    "members assign" },
  { "{\"t\":\"grad\",\"node\":\"b\",\"term\":1,\"step\":4,\"samples\":8,\"loss\":2.5,"
    "\"loss_finite\":true,\"compute_us\":120,\"inner_us\":30}", "node term step samples loss" },
  { "{\"t\":\"ack\",\"node\":\"b\",\"term\":1,\"step\":3,\"hash\":\"0123456789abcdef\","
    "\"ohash\":\"fedcba9876543210\"}",
    "node term step hash" },
  { "{\"t\":\"reject\",\"node\":\"a\",\"step\":3,\"reason\":\"late\"}", "node step reason" },
  { "{\"t\":\"heartbeat\",\"node\":\"a\",\"term\":1,\"step\":3,\"clock\":5,\"echo\":4,\"age\":1}",
    "node term step" },
  { "{\"t\":\"bye\",\"node\":\"a\",\"reason\":\"done\"}", "node" },
};

/* The frame of header @h, with the array its kind carries. */
static GBytes *
frame_of (JsonObject *h)
{
  static const float values[3] = { 0.5f, -1.0f, 2.0f };
  const char *t = json_object_get_string_member (h, "t");
  const char *array = g_str_equal (t, "snapshot") ? "params"
                    : g_str_equal (t, "step") ? "avg"
                    : g_str_equal (t, "grad") ? "g" : NULL;
  g_autoptr(GError) error = NULL;
  GBytes *frame;

  frame = rlx_wire_encode (h, array ? values : NULL, array ? 3 : 0, RLX_PRECISION_F32, array,
                           &error);
  g_assert_no_error (error);
  return frame;
}

static JsonObject *
header (const char *json)
{
  g_autoptr(GError) error = NULL;
  JsonObject *h = rlx_wire_header_parse (json, -1, &error);

  g_assert_no_error (error);
  return h;
}

/* Parse @h; NULL when it parsed, else the error's message (freed by the
 * caller). */
static char *
parse (JsonObject *h, RlxMsg *out)
{
  g_autoptr(GBytes) frame = frame_of (h);
  g_autoptr(GError) error = NULL;
  RlxMsg m;

  if (rlx_msg_parse (frame, NULL, &m, &error))
    {
      if (out)
        rlx_msg_steal (out, &m);
      else
        rlx_msg_clear (&m);
      return NULL;
    }
  g_assert_true (error->domain == RLX_MSG_ERROR);
  g_assert_null (m.node);
  return g_strdup (error->message);
}

/* Every member of every kind left out in turn: a required one is refused by
 * name, an optional one is not. */
static void
test_required (void)
{
  for (guint k = 0; k < G_N_ELEMENTS (kinds); k++)
    {
      g_autoptr(JsonObject) h = header (kinds[k].json);
      g_auto(GStrv) required = g_strsplit (kinds[k].required, " ", -1);
      g_autoptr(GList) names = json_object_get_members (h);
      g_autofree char *ok = parse (h, NULL);
      const char *t = json_object_get_string_member (h, "t");

      g_assert_null (ok);
      for (GList *l = names; l; l = l->next)
        {
          const char *name = l->data;
          g_autoptr(JsonObject) without = NULL;
          g_autofree char *msg = NULL;

          if (g_str_equal (name, "t"))
            continue;
          without = header (kinds[k].json);
          json_object_remove_member (without, name);
          msg = parse (without, NULL);
          if (g_strv_contains ((const char *const *) required, name))
            {
              g_autofree char *want = g_strdup_printf ("%s message: member \"%s\" is missing",
                                                       t, name);
              if (msg == NULL || !g_str_equal (msg, want))
                g_error ("%s without %s: got '%s', want '%s'", t, name, msg ? msg : "(parsed)", want);
            }
          else if (msg != NULL)
            g_error ("%s without the optional %s is refused: %s", t, name, msg);
        }
      /* and nothing required is missing from the list above */
      for (guint i = 0; required[i]; i++)
        g_assert_true (json_object_has_member (h, required[i]));
    }
}

static const char *
kind_json (const char *t)
{
  for (guint k = 0; k < G_N_ELEMENTS (kinds); k++)
    if (strstr (kinds[k].json, t) == kinds[k].json + 6)
      return kinds[k].json;
  g_assert_not_reached ();
}

/* A JSON array of @n strings made by @fmt from 0..n-1. */
static char *
array_json (guint n, const char *fmt)
{
  GString *s = g_string_new ("[");

  for (guint i = 0; i < n; i++)
    {
      if (i > 0)
        g_string_append_c (s, ',');
      g_string_append_c (s, '"');
      g_string_append_printf (s, fmt, i);
      g_string_append_c (s, '"');
    }
  g_string_append_c (s, ']');
  return g_string_free (s, FALSE);
}

static char *
string_json (gsize n)
{
  g_autofree char *s = g_strnfill (n, 'x');

  return g_strdup_printf ("\"%s\"", s);
}

/* Bounds and types, with the message a peer gets for each. */
static void
test_bounds (void)
{
  g_autofree char *ids_1025 = array_json (1025, "n%u");
  g_autofree char *ids_1024 = array_json (1024, "n%u");
  g_autofree char *hashes_513 = array_json (513, "%016x");
  g_autofree char *hashes_512 = array_json (512, "%016x");
  g_autofree char *s33 = string_json (33), *s32 = string_json (32);
  g_autofree char *s64 = string_json (64), *s65 = string_json (65);
  g_autofree char *s2048 = string_json (2048), *s2049 = string_json (2049);
  const struct { const char *t, *member, *value, *message; } cases[] = {
    { "hello", "v", "\"3\"", "member \"v\" is not an integer" },
    { "hello", "batch", "16777216", NULL },
    { "hello", "batch", "16777217", "member \"batch\" = 16777217 is outside 0..16777216" },
    { "hello", "max_batch", "-1", "member \"max_batch\" = -1 is outside 0..16777216" },
    { "hello", "members", "1024", NULL },
    { "hello", "members", "1025", "member \"members\" = 1025 is outside 0..1024" },
    { "hello", "term", "1099511627776", NULL },
    { "hello", "term", "-1", "member \"term\" = -1 is outside 0..9223372036854775807" },
    { "hello", "checkpoint", "1.5", "member \"checkpoint\" is not an integer" },
    { "hello", "seed", s32, NULL },
    { "hello", "seed", s33, "member \"seed\" is longer than 32 bytes or not UTF-8" },
    { "hello", "cohort", s64, NULL },
    { "hello", "cohort", s65, "member \"cohort\" is longer than 64 bytes or not UTF-8" },
    { "hello", "cohort", "\"\"", "member \"cohort\" is empty" },
    { "hello", "model", "\"a\\u0001\"", "member \"model\" holds a control character" },
    { "hello", "backend", s64, NULL },
    { "hello", "backend", s65, "member \"backend\" is longer than 64 bytes or not UTF-8" },
    { "hello", "host", s2048, NULL },
    { "hello", "host", s2049, "member \"host\" is longer than 2048 bytes or not UTF-8" },
    { "hello", "device", s2049, "member \"device\" is longer than 2048 bytes or not UTF-8" },
    { "hello", "fallback", "7", "member \"fallback\" is not a string" },
    { "hello", "precision", "\"f7\"",
      "member \"precision\" = \"f7\" is not a wire precision (f32, f16, f8e4m3, f8e5m2)" },
    { "hello", "role", "\"boss\"", "member \"role\" = \"boss\" is not a role" },
    { "hello", "join_only", "1", "member \"join_only\" is not true or false" },
    { "hello", "leader", "\"\"", "member \"leader\" is empty" },
    { "hello", "lin", "\"00ab\"", "member \"lin\" is not 16 lowercase hex digits" },
    { "leader", "fbase", "-1", "member \"fbase\" = -1 is outside 0..9223372036854775807" },
    { "snapshot", "tbase", "-1", "member \"tbase\" = -1 is outside 0..9223372036854775807" },
    { "refuse", "reason", s2049, "member \"reason\" is longer than 2048 bytes or not UTF-8" },
    { "join", "hash", "\"0123456789ABCDEF\"", "member \"hash\" is not 16 lowercase hex digits" },
    { "ack", "ohash", "\"fedcba987654321\"", "member \"ohash\" is not 16 lowercase hex digits" },
    { "ack", "ohash", "\"FEDCBA9876543210\"", "member \"ohash\" is not 16 lowercase hex digits" },
    { "ack", "ohash", "7", "member \"ohash\" is not a string" },
    { "ack", "ohash", "\"0000000000000000\"", NULL },
    { "join", "merge", "\"yes\"", "member \"merge\" is not true or false" },
    { "snapshot", "epoch", "2147483647", NULL },
    { "snapshot", "epoch", "2147483648", "member \"epoch\" = 2147483648 is outside 0..2147483647" },
    { "snapshot", "loss", "\"x\"", "member \"loss\" is not a number" },
    { "snapshot", "members", ids_1024, NULL },
    { "snapshot", "members", ids_1025, "member \"members\" lists more than 1024 entries" },
    { "snapshot", "members", "[\"a\",\"a\"]", "member \"members\" names a twice" },
    { "snapshot", "members", "[\"a\",\"\"]", "member \"members\" entry 1 is not a node id" },
    { "snapshot", "hashes", hashes_512, NULL },
    { "snapshot", "hashes", hashes_513, "member \"hashes\" holds more than 512 hashes" },
    { "snapshot", "hashes", "[\"x\"]", "member \"hashes\" entry 0 is not a hash" },
    { "step", "samples", "2147483648", "member \"samples\" = 2147483648 is outside 0..2147483647" },
    { "step", "lr", "true", "member \"lr\" is not a number" },
    { "step", "contributors", "{}", "member \"contributors\" is not an array" },
    { "step", "assign", "[]", "member \"assign\" is not an object" },
    { "step", "assign", "{\"a\":[0,0]}", "member \"assign\" entry of a = [0, 0] is not a slice" },
    { "step", "assign", "{\"a\":[1]}", "member \"assign\" entry of a is not [start, count]" },
    { "step", "commit", "2", "member \"commit\" = 2 does not precede step 4" },
    { "step", "h", "10001", "member \"h\" = 10001 is outside 0..10000" },
    { "step", "h", "4", "member \"olr\" = 0 with omom = 0 is not an outer optimizer's setting" },
    { "step", "ch", "4", "member \"olr\" = 0 with omom = 0 is not an outer optimizer's setting" },
    { "step", "olr", "0.7", NULL },
    { "step", "lag", "1", "member \"lag\" = 1 without an outer round (h)" },
    { "step", "lag", "2", "member \"lag\" = 2 is outside 0..1" },
    { "step", "cepoch", "\"1\"", "member \"cepoch\" is not an integer" },
    { "step", "cepoch", "2147483648", "member \"cepoch\" = 2147483648 is outside 0..2147483647" },
    { "step", "cpos", "-2", "member \"cpos\" = -2 is outside 0..2147483647" },
    { "step", "cepoch", "0", "member \"cpos\" is missing (cepoch and cpos go together)" },
    { "step", "cepoch", "-1", NULL },
    { "grad", "compute_us", "-1", "member \"compute_us\" = -1 is outside 0..9223372036854775807" },
    { "grad", "inner_us", "-1", "member \"inner_us\" = -1 is outside 0..9223372036854775807" },
    { "grad", "loss_finite", "0", "member \"loss_finite\" is not true or false" },
    { "grad", "refused", s2049, "member \"refused\" is longer than 2048 bytes or not UTF-8" },
    { "heartbeat", "clock", "\"5\"", "member \"clock\" is not an integer" },
    { "heartbeat", "echo", "-7", NULL },
    { "heartbeat", "age", "-1", "member \"age\" = -1 is outside 0..9223372036854775807" },
    { "bye", "reason", "[]", "member \"reason\" is not a string" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(JsonObject) h = header (kind_json (cases[i].t));
      g_autoptr(GError) error = NULL;
      g_autoptr(JsonNode) v = json_from_string (cases[i].value, &error);
      g_autofree char *msg = NULL;
      g_autofree char *want = NULL;

      g_assert_no_error (error);
      json_object_set_member (h, cases[i].member, g_steal_pointer (&v));
      msg = parse (h, NULL);
      want = cases[i].message ? g_strdup_printf ("%s message: %s", cases[i].t, cases[i].message)
                              : NULL;
      if (g_strcmp0 (msg, want) != 0)
        g_error ("%s with %s = %.40s: got '%s', want '%s'", cases[i].t, cases[i].member,
                 cases[i].value, msg ? msg : "(parsed)", want ? want : "(parsed)");
    }
}

/* What absent optional members read as. */
static void
test_defaults (void)
{
  g_autoptr(JsonObject) bye = header ("{\"t\":\"bye\",\"node\":\"a\"}");
  g_autoptr(JsonObject) beat = header ("{\"t\":\"heartbeat\",\"node\":\"a\",\"term\":1,\"step\":3}");
  g_autoptr(JsonObject) grad = header (kind_json ("grad"));
  g_autoptr(JsonObject) hello = header (kind_json ("hello"));
  RlxMsg m;

  g_assert_null (parse (bye, &m));
  g_assert_cmpstr (m.u.bye.reason, ==, "left");
  rlx_msg_clear (&m);

  g_assert_null (parse (beat, &m));
  g_assert_cmpint (m.u.heartbeat.t, ==, -1);
  g_assert_cmpint (m.u.heartbeat.echo, ==, -1);
  g_assert_cmpint (m.u.heartbeat.age, ==, 0);
  /* a heartbeat that does not say where its sender stands says nothing of
   * it (not "alone") */
  g_assert_cmpint (m.u.heartbeat.role, ==, RLX_ROLE_N);
  g_assert_null (m.u.heartbeat.leader);
  rlx_msg_clear (&m);

  json_object_set_string_member (beat, "role", "member");
  json_object_set_string_member (beat, "leader", "b");
  json_object_set_string_member (beat, "lin", "0123456789abcdef");
  json_object_set_string_member (beat, "fork", "00000000000000ff");
  json_object_set_int_member (beat, "fbase", 40);
  g_assert_null (parse (beat, &m));
  g_assert_cmpint (m.u.heartbeat.role, ==, RLX_ROLE_MEMBER);
  g_assert_cmpstr (m.u.heartbeat.leader, ==, "b");
  g_assert_cmpuint (m.u.heartbeat.lineage.lin, ==, 0x0123456789abcdefull);
  g_assert_cmpuint (m.u.heartbeat.lineage.fork, ==, 0xff);
  g_assert_cmpuint (m.u.heartbeat.lineage.base, ==, 40);
  rlx_msg_clear (&m);
  json_object_set_string_member (beat, "role", "boss");
  {
    g_autofree char *err = parse (beat, &m);
    g_assert_nonnull (err);
    g_assert_nonnull (strstr (err, "is not a role"));
  }

  json_object_set_boolean_member (grad, "loss_finite", FALSE);
  json_object_remove_member (grad, "compute_us");
  json_object_remove_member (grad, "inner_us");
  g_assert_null (parse (grad, &m));
  g_assert_true (isnan (m.u.grad.loss));
  g_assert_cmpint (m.u.grad.compute_us, ==, 0);
  g_assert_cmpint (m.u.grad.inner_us, ==, 0);
  g_assert_null (m.u.grad.refused);
  rlx_msg_clear (&m);

  json_object_remove_member (hello, "leader");
  json_object_remove_member (hello, "checkpoint");
  json_object_remove_member (hello, "join_only");
  g_assert_null (parse (hello, &m));
  g_assert_null (m.u.hello.leader);
  g_assert_cmpuint (m.u.hello.checkpoint, ==, 0);
  g_assert_false (m.u.hello.join_only);
  g_assert_cmpuint (m.u.hello.batch, ==, 8);
  g_assert_cmpint (m.u.hello.precision, ==, RLX_PRECISION_F16);
  g_assert_cmpint (m.u.hello.role, ==, RLX_ROLE_MEMBER);
  rlx_msg_clear (&m);
}

static char *
header_json (const RlxMsg *m)
{
  g_autoptr(JsonObject) h = rlx_msg_header (m);
  g_autoptr(JsonNode) n = json_node_init_object (json_node_alloc (), h);

  return json_to_string (n, FALSE);
}

static void
assert_header (RlxMsg *m, const char *want)
{
  g_autofree char *got = header_json (m);

  if (!g_str_equal (got, want))
    g_error ("built %s\n  want %s", got, want);
  rlx_msg_clear (m);
}

/* What building writes, and what it leaves out: members in table order,
 * optional ones only when set, a loss that is not finite as 0. */
static void
test_build (void)
{
  RlxMsg m;

  rlx_msg_init (&m, RLX_MSG_HELLO, "a");
  m.u.hello.version = 3;
  m.u.hello.cohort = g_strdup ("c");
  m.u.hello.batch = 8;
  m.u.hello.precision = RLX_PRECISION_F8E4M3;
  m.u.hello.role = RLX_ROLE_LEADER;
  m.u.hello.term = G_MAXUINT64;
  assert_header (&m, "{\"t\":\"hello\",\"node\":\"a\",\"v\":3,\"cohort\":\"c\",\"seed\":\"\","
                 "\"model\":\"\",\"dataset\":\"\",\"backend\":\"\",\"device\":\"\",\"fallback\":\"\","
                 "\"host\":\"\",\"precision\":\"f8e4m3\",\"batch\":8,\"max_batch\":0,\"role\":\"leader\","
                 "\"term\":9223372036854775807,\"step\":0,\"members\":0,\"checkpoint\":0,"
                 "\"join_only\":false}");

  rlx_msg_init (&m, RLX_MSG_JOIN, "a");
  m.u.join.reason = g_strdup ("join");
  m.u.join.hash = 0xab;
  assert_header (&m, "{\"t\":\"join\",\"node\":\"a\",\"reason\":\"join\",\"step\":0,"
                 "\"hash\":\"00000000000000ab\"}");

  rlx_msg_init (&m, RLX_MSG_SNAPSHOT, "a");
  m.u.snapshot.loss = INFINITY;
  m.u.snapshot.hashes_from = 4;
  assert_header (&m, "{\"t\":\"snapshot\",\"node\":\"a\",\"term\":0,\"leader\":\"\",\"step\":0,"
                 "\"hash\":\"0000000000000000\",\"seed\":\"\",\"epoch\":0,\"pos\":0,\"loss\":0.0,"
                 "\"members\":[],\"tbase\":0}");

  /* a lineage's identity: written only when there is one */
  rlx_msg_init (&m, RLX_MSG_LEADER, "a");
  m.u.leader.leader = g_strdup ("b");
  m.u.leader.term = 2;
  m.u.leader.lineage = (RlxMsgLineage) { 0xab, 0xcd, 300 };
  assert_header (&m, "{\"t\":\"leader\",\"node\":\"a\",\"leader\":\"b\",\"term\":2,\"step\":0,"
                 "\"lin\":\"00000000000000ab\",\"fork\":\"00000000000000cd\",\"fbase\":300}");
  rlx_msg_init (&m, RLX_MSG_LEADER, "a");
  m.u.leader.leader = g_strdup ("b");
  assert_header (&m, "{\"t\":\"leader\",\"node\":\"a\",\"leader\":\"b\",\"term\":0,\"step\":0}");

  rlx_msg_init (&m, RLX_MSG_GRAD, "b");
  m.u.grad.loss = NAN;
  m.u.grad.compute_us = -5;
  m.u.grad.refused = g_strdup ("not finite");
  assert_header (&m, "{\"t\":\"grad\",\"node\":\"b\",\"term\":0,\"step\":0,\"samples\":0,"
                 "\"loss\":0.0,\"loss_finite\":false,\"compute_us\":0,\"refused\":\"not finite\"}");

  rlx_msg_init (&m, RLX_MSG_HEARTBEAT, "a");
  m.u.heartbeat.t = 7;
  m.u.heartbeat.age = 3;
  assert_header (&m, "{\"t\":\"heartbeat\",\"node\":\"a\",\"term\":0,\"step\":0,\"clock\":7}");
  rlx_msg_init (&m, RLX_MSG_HEARTBEAT, "a");
  m.u.heartbeat.echo = 6;
  m.u.heartbeat.age = -2;
  assert_header (&m, "{\"t\":\"heartbeat\",\"node\":\"a\",\"term\":0,\"step\":0,\"echo\":6,\"age\":0}");
  rlx_msg_init (&m, RLX_MSG_HEARTBEAT, "a");
  m.u.heartbeat.role = RLX_ROLE_LEADER;
  m.u.heartbeat.leader = g_strdup ("a");
  m.u.heartbeat.members = 3;
  m.u.heartbeat.lineage = (RlxMsgLineage) { 1, 2, 0 };
  assert_header (&m, "{\"t\":\"heartbeat\",\"node\":\"a\",\"term\":0,\"step\":0,"
                 "\"role\":\"leader\",\"leader\":\"a\",\"members\":3,"
                 "\"lin\":\"0000000000000001\",\"fork\":\"0000000000000002\",\"fbase\":0}");

  rlx_msg_init (&m, RLX_MSG_BYE, "a");
  assert_header (&m, "{\"t\":\"bye\",\"node\":\"a\",\"reason\":\"left\"}");
}

/* A snapshot with the outer state: θ and the momentum in one array, split
 * in two views; without the outer member it is the step mode's, and needs
 * no mhash. */
static void
test_outer_snapshot (void)
{
  static const float values[4] = { 0.5f, -1.0f, 2.0f, 4.0f };
  g_autoptr(JsonObject) h = header (kind_json ("snapshot"));
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) frame = NULL;
  RlxMsg m;

  /* the step mode's snapshot (no outer, no mhash) parses */
  g_assert_null (parse (h, &m));
  g_assert_false (m.u.snapshot.outer);
  g_assert_null (m.u.snapshot.momentum.frame);
  rlx_msg_clear (&m);
  /* three values cannot be θ and m */
  json_object_set_boolean_member (h, "outer", TRUE);
  json_object_set_string_member (h, "mhash", "0123456789abcdef");
  {
    g_autofree char *msg = parse (h, NULL);
    g_assert_nonnull (msg);
    g_assert_nonnull (strstr (msg, "not θ and the momentum of one size"));
  }
  frame = rlx_wire_encode (h, values, 4, RLX_PRECISION_F32, "params", &error);
  g_assert_no_error (error);
  g_assert_true (rlx_msg_parse (frame, NULL, &m, &error));
  g_assert_true (m.u.snapshot.outer);
  g_assert_cmpuint (m.u.snapshot.mhash, ==, 0x0123456789abcdefull);
  g_assert_cmpuint (m.u.snapshot.params.n, ==, 2);
  g_assert_cmpuint (m.u.snapshot.momentum.n, ==, 2);
  g_assert_cmpfloat (((const float *) m.u.snapshot.params.codes)[1], ==, -1.0f);
  g_assert_cmpfloat (((const float *) m.u.snapshot.momentum.codes)[0], ==, 2.0f);
  rlx_msg_clear (&m);
}

/* An ack of an outer round's commit carries the outer hash (ohash, θ and
 * the momentum); without it (the step mode) it reads as 0 and the ack is
 * built byte for byte as before the member existed. */
static void
test_outer_ack (void)
{
  g_autoptr(JsonObject) h = header (kind_json ("ack"));
  RlxMsg m;

  g_assert_null (parse (h, &m));
  g_assert_cmpuint (m.u.ack.hash, ==, 0x0123456789abcdefull);
  g_assert_cmpuint (m.u.ack.ohash, ==, 0xfedcba9876543210ull);
  rlx_msg_clear (&m);
  json_object_remove_member (h, "ohash");
  g_assert_null (parse (h, &m));
  g_assert_cmpuint (m.u.ack.ohash, ==, 0);
  rlx_msg_clear (&m);

  rlx_msg_init (&m, RLX_MSG_ACK, "b");
  m.u.ack.term = 1;
  m.u.ack.step = 3;
  m.u.ack.hash = 0xab;
  assert_header (&m, "{\"t\":\"ack\",\"node\":\"b\",\"term\":1,\"step\":3,"
                 "\"hash\":\"00000000000000ab\"}");
  rlx_msg_init (&m, RLX_MSG_ACK, "b");
  m.u.ack.term = 1;
  m.u.ack.step = 3;
  m.u.ack.hash = 0xab;
  m.u.ack.ohash = 0xcd;
  assert_header (&m, "{\"t\":\"ack\",\"node\":\"b\",\"term\":1,\"step\":3,"
                 "\"hash\":\"00000000000000ab\",\"ohash\":\"00000000000000cd\"}");
}

/* Make step header @h an outer round's: H @hh, the commit's @ch (0: none),
 * DiLoCo's outer lr and momentum. */
static void
set_outer (JsonObject *h, gint64 hh, gint64 ch)
{
  json_object_set_int_member (h, "h", hh);
  if (ch > 0)
    json_object_set_int_member (h, "ch", ch);
  json_object_set_double_member (h, "olr", 0.7);
  json_object_set_double_member (h, "omom", 0.9);
}

/* The sync mode's members of a step frame (docs/PROTOCOL.md, "Sync
 * modes"): read, checked across members, written only in the outer mode. */
static void
test_outer_step (void)
{
  g_autoptr(JsonObject) h = header (kind_json ("step"));
  g_autoptr(GBytes) frame = NULL;
  g_autofree char *json = NULL;
  RlxMsg m;

  set_outer (h, 50, 40);
  g_assert_null (parse (h, &m));
  g_assert_cmpuint (m.u.step.h, ==, 50);
  g_assert_cmpuint (m.u.step.ch, ==, 40);
  g_assert_cmpfloat (m.u.step.olr, ==, 0.7);
  g_assert_cmpfloat (m.u.step.omom, ==, 0.9);
  json = header_json (&m);
  g_assert_nonnull (strstr (json, "\"h\":50,\"ch\":40,\"olr\":0.69999999999999996,\"omom\":0.90000000000000002"));
  /* momentum 0 is a setting too: written with the lr */
  m.u.step.omom = 0;
  g_clear_pointer (&json, g_free);
  json = header_json (&m);
  g_assert_nonnull (strstr (json, "\"omom\":0"));
  /* a commit that names an outer round needs a commit */
  m.u.step.commit = 0;
  m.u.step.update.frame = NULL;
  rlx_msg_clear (&m);
  json_object_set_int_member (h, "commit", 0);
  {
    g_autofree char *msg = parse (h, NULL);
    g_assert_cmpstr (msg, ==, "step message: member \"ch\" names an outer commit in a frame "
                              "without one");
  }
  /* the step mode writes none of them */
  json_object_set_int_member (h, "commit", 3);
  json_object_remove_member (h, "h");
  json_object_remove_member (h, "ch");
  json_object_remove_member (h, "olr");
  json_object_remove_member (h, "omom");
  g_assert_null (parse (h, &m));
  g_clear_pointer (&json, g_free);
  json = header_json (&m);
  g_assert_null (strstr (json, "\"h\""));
  g_assert_null (strstr (json, "olr"));
  g_assert_null (strstr (json, "omom"));
  rlx_msg_clear (&m);
}

/* Where the round after a commit begins (cepoch, cpos): a frame that
 * commits c and names another step than c + 1 (overlap) must say it, one
 * that names c + 1 must not (its epoch and pos are that), and building
 * writes the pair only when set. */
static void
test_commit_begins (void)
{
  g_autoptr(JsonObject) h = header (kind_json ("step"));
  g_autofree char *json = NULL;
  RlxMsg m;

  /* step 4 after commit 3: epoch and pos are where it begins */
  g_assert_null (parse (h, &m));
  g_assert_cmpint (m.u.step.cepoch, ==, -1);
  g_assert_cmpint (m.u.step.cpos, ==, -1);
  json = header_json (&m);
  g_assert_null (strstr (json, "cepoch"));
  g_assert_null (strstr (json, "cpos"));
  rlx_msg_clear (&m);
  json_object_set_int_member (h, "cepoch", 0);
  json_object_set_int_member (h, "cpos", 16);
  {
    g_autofree char *msg = parse (h, NULL);
    g_assert_cmpstr (msg, ==, "step message: member \"cepoch\" is set in a frame whose step is "
                              "the one after its commit, or without one");
  }
  /* overlapped: commit 3 assigns step 5; where step 4 begins comes along */
  json_object_set_int_member (h, "step", 5);
  set_outer (h, 4, 0);
  json_object_set_int_member (h, "lag", 1);
  g_assert_null (parse (h, &m));
  g_assert_cmpint (m.u.step.cepoch, ==, 0);
  g_assert_cmpint (m.u.step.cpos, ==, 16);
  g_clear_pointer (&json, g_free);
  json = header_json (&m);
  g_assert_nonnull (strstr (json, "\"cepoch\":0,\"cpos\":16"));
  rlx_msg_clear (&m);
  json_object_remove_member (h, "cepoch");
  json_object_remove_member (h, "cpos");
  {
    g_autofree char *msg = parse (h, NULL);
    g_assert_cmpstr (msg, ==, "step message: member \"cepoch\" is missing (the frame names a "
                              "step other than the one after its commit)");
  }
}

/* @n bytes of text that JSON writes 6 bytes each for (\u0001), or of
 * @c where control characters are not allowed (an id). */
static char *
worst_text (gsize n, char c)
{
  char *s = g_malloc (n + 1);

  memset (s, c, n);
  s[n] = '\0';
  return s;
}

static void
on_control_frame (RlxLink *link, GBytes *frame, gpointer user_data)
{
  GBytes **got = user_data;

  g_assert_cmpint (rlx_link_get_rx_lane (link), ==, RLX_LINK_LANE_CONTROL);
  g_assert_null (*got);
  *got = g_bytes_ref (frame);
}

/* The largest control message a peer can send and this node parse — a
 * hello with every member at its bound and every byte of its texts one
 * that JSON escapes to six — is far under the control lane's cap
 * (RLX_LINK_MAX_CONTROL_FRAME, which rlx-link.h sizes from this), and
 * crosses a real link's control lane and parses. So are the other kinds
 * that travel there, each with its text at its bound. */
static void
test_largest_control_fits (void)
{
  const gsize room = RLX_LINK_MAX_CONTROL_FRAME / 8;
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) hello = NULL;
  g_autoptr(RlxLink) a = NULL;
  g_autoptr(RlxLink) b = NULL;
  g_autoptr(GBytes) got = NULL;
  RlxMsg m, back;
  const RlxMsgKind texts[] = { RLX_MSG_REFUSE, RLX_MSG_JOIN, RLX_MSG_REJECT, RLX_MSG_BYE,
                               RLX_MSG_GRAD };

  rlx_msg_init (&m, RLX_MSG_HELLO, NULL);
  g_free (m.node);
  m.node = worst_text (RLX_MSG_MAX_ID, '"');
  m.u.hello.version = RLX_MSG_PROTOCOL_VERSION;
  m.u.hello.cohort = worst_text (RLX_MSG_MAX_ID, '"');
  m.u.hello.seed = worst_text (32, 1);
  m.u.hello.model = worst_text (RLX_MSG_MAX_ID, '"');
  m.u.hello.dataset = worst_text (RLX_MSG_MAX_ID, '"');
  m.u.hello.backend = worst_text (RLX_MSG_MAX_ID, 1);
  m.u.hello.device = worst_text (RLX_MSG_MAX_TEXT, 1);
  m.u.hello.fallback = worst_text (RLX_MSG_MAX_TEXT, 1);
  m.u.hello.host = worst_text (RLX_MSG_MAX_TEXT, 1);
  m.u.hello.leader = worst_text (RLX_MSG_MAX_ID, '"');
  m.u.hello.batch = m.u.hello.max_batch = 1u << 24;
  m.u.hello.term = m.u.hello.step = m.u.hello.checkpoint = G_GUINT64_CONSTANT (999999999999999);
  m.u.hello.members = RLX_MSG_MAX_MEMBERS;
  m.u.hello.join_only = TRUE;
  hello = rlx_msg_build (&m, NULL, 0, RLX_PRECISION_F32, &error);
  g_assert_no_error (error);
  rlx_msg_clear (&m);
  g_test_message ("the largest hello: %" G_GSIZE_FORMAT " bytes", g_bytes_get_size (hello));
  g_assert_cmpuint (g_bytes_get_size (hello), >, 30000);   /* the worst case was built */
  g_assert_cmpuint (g_bytes_get_size (hello), <=, room);

  for (guint i = 0; i < G_N_ELEMENTS (texts); i++)
    {
      g_autoptr(GBytes) f = NULL;

      rlx_msg_init (&m, texts[i], "a");
      switch (texts[i])
        {
        case RLX_MSG_REFUSE: m.u.refuse.reason = worst_text (RLX_MSG_MAX_TEXT, 1); break;
        case RLX_MSG_JOIN:   m.u.join.reason = worst_text (RLX_MSG_MAX_TEXT, 1); break;
        case RLX_MSG_REJECT: m.u.reject.reason = worst_text (RLX_MSG_MAX_TEXT, 1); break;
        case RLX_MSG_BYE:    m.u.bye.reason = worst_text (RLX_MSG_MAX_TEXT, 1); break;
        default:             m.u.grad.refused = worst_text (RLX_MSG_MAX_TEXT, 1); break;
        }
      f = rlx_msg_build (&m, NULL, 0, RLX_PRECISION_F32, &error);
      g_assert_no_error (error);
      rlx_msg_clear (&m);
      g_assert_cmpuint (g_bytes_get_size (f), <, g_bytes_get_size (hello));
      g_assert_true (rlx_msg_parse (f, NULL, &back, &error));
      rlx_msg_clear (&back);
    }

  g_assert_true (rlx_unix_link_new_pair (0, &a, &b, &error));
  g_signal_connect (b, "frame", G_CALLBACK (on_control_frame), &got);
  g_assert_true (rlx_link_send_lane (a, RLX_LINK_LANE_CONTROL, hello, &error));
  while (got == NULL)
    g_main_context_iteration (NULL, TRUE);
  g_assert_true (g_bytes_equal (got, hello));
  rlx_msg_parse (got, NULL, &back, &error);
  g_assert_no_error (error);
  g_assert_cmpint (back.kind, ==, RLX_MSG_HELLO);
  g_assert_cmpuint (strlen (back.u.hello.host), ==, RLX_MSG_MAX_TEXT);
  rlx_msg_clear (&back);
  g_assert_false (rlx_link_is_closed (b));
  rlx_link_close (a);
  rlx_link_close (b);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/cohort/msg/outer-step", test_outer_step);
  g_test_add_func ("/cohort/msg/commit-begins", test_commit_begins);
  g_test_add_func ("/cohort/msg/outer-snapshot", test_outer_snapshot);
  g_test_add_func ("/cohort/msg/outer-ack", test_outer_ack);
  g_test_add_func ("/cohort/msg/required", test_required);
  g_test_add_func ("/cohort/msg/bounds", test_bounds);
  g_test_add_func ("/cohort/msg/defaults", test_defaults);
  g_test_add_func ("/cohort/msg/build", test_build);
  g_test_add_func ("/cohort/msg/largest-control-fits", test_largest_control_fits);
  return g_test_run ();
}
