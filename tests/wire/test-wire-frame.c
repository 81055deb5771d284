/* test-wire-frame.c — frames: layout, round trip of header and values,
 * decode_into, encode's refusals, and every way a frame can be broken, each
 * answered by a GError of the right code that says what was wrong. */
#include "rlx-config.h"

#include <math.h>
#include <string.h>

#include "core/wire/rlx-wire.h"

/* A frame with the given header text (padded with spaces unless @raw) and
 * payload bytes. */
static GBytes *
make_frame (const char *json, gboolean raw, const void *payload, gsize plen)
{
  gsize len = strlen (json), padded = raw ? len : (len + 3) / 4 * 4;
  guint8 *buf = g_malloc (4 + padded + plen);
  guint32 le = GUINT32_TO_LE ((guint32) padded);

  memcpy (buf, &le, 4);
  memcpy (buf + 4, json, len);
  memset (buf + 4 + len, ' ', padded - len);
  if (plen)
    memcpy (buf + 4 + padded, payload, plen);
  return g_bytes_new_take (buf, 4 + padded + plen);
}

static void
test_frame_layout (void)
{
  float v[3] = { 1.0f, -2.0f, 0.5f };
  g_autoptr(JsonObject) h = json_object_new ();
  g_autoptr(GBytes) f = NULL;
  g_autoptr(GError) error = NULL;
  const guint8 *d;
  gsize len;
  guint32 hlen;

  json_object_set_string_member (h, "t", "grad");
  json_object_set_int_member (h, "step", 7);
  f = rlx_wire_encode (h, v, 3, RLX_PRECISION_F16, NULL, &error);
  g_assert_no_error (error);
  d = g_bytes_get_data (f, &len);
  memcpy (&hlen, d, 4);
  hlen = GUINT32_FROM_LE (hlen);
  g_assert_cmpuint (hlen % 4, ==, 0);
  g_assert_cmpuint (len, ==, 4 + hlen + 3 * 2);
  {
    g_autofree char *json = g_strndup ((const char *) d + 4, hlen);
    g_strchomp (json);
    g_assert_cmpstr (json, ==, "{\"t\":\"grad\",\"step\":7,\"_f32\":\"g\",\"_fmt\":\"f16\",\"_scale\":512}");
  }
  /* f16 codes of 1*512, -2*512, 0.5*512 = 512, -1024, 256, little-endian */
  {
    const guint8 want[6] = { 0x00, 0x60, 0x00, 0xe4, 0x00, 0x5c };
    g_assert_cmpmem (d + 4 + hlen, 6, want, 6);
  }
  /* the caller's header is left as it was */
  g_assert_cmpuint (json_object_get_size (h), ==, 2);
}

static void
test_frame_round_trip (void)
{
  GRand *r = g_rand_new_with_seed (5);
  gsize n = 10001;
  g_autofree float *x = g_new (float, n);
  g_autofree float *rt = g_new (float, n);
  g_autofree float *into = g_new (float, n);

  for (gsize i = 0; i < n; i++)
    x[i] = (float) g_rand_double_range (r, -3, 3);
  g_rand_free (r);
  for (int p = 0; p < RLX_PRECISION_COUNT; p++)
    {
      g_autoptr(JsonObject) h = json_object_new ();
      g_autoptr(JsonObject) back = NULL;
      g_autoptr(GBytes) f = NULL;
      g_autoptr(GError) error = NULL;
      g_autofree float *vals = NULL;
      gsize got = 0;
      RlxWireInfo info;

      json_object_set_string_member (h, "t", "commit");
      json_object_set_double_member (h, "lr", 0.01);
      json_object_set_boolean_member (h, "ok", TRUE);
      f = rlx_wire_encode (h, x, n, p, "params", &error);
      g_assert_no_error (error);
      g_assert_cmpuint (g_bytes_get_size (f), <, 4 + 128 + n * rlx_precision_element_size (p));
      g_assert_true (rlx_wire_decode (f, NULL, &back, &vals, &got, &error));
      g_assert_no_error (error);
      g_assert_cmpuint (got, ==, n);
      rlx_wire_round_trip (x, rt, n, p);
      g_assert_cmpmem (vals, n * 4, rt, n * 4);
      if (p == RLX_PRECISION_F32)
        g_assert_cmpmem (vals, n * 4, x, n * 4);
      /* the `_` fields are gone; the rest came back */
      g_assert_cmpuint (json_object_get_size (back), ==, 3);
      g_assert_cmpstr (json_object_get_string_member (back, "t"), ==, "commit");
      g_assert_cmpfloat (json_object_get_double_member (back, "lr"), ==, 0.01);
      g_assert_true (json_object_get_boolean_member (back, "ok"));
      g_assert_false (json_object_has_member (back, "_f32"));

      g_assert_true (rlx_wire_decode_into (f, NULL, &info, NULL, into, n, &error));
      g_assert_no_error (error);
      g_assert_cmpmem (into, n * 4, rt, n * 4);
      g_assert_cmpstr (info.field, ==, "params");
      g_assert_cmpint (info.precision, ==, p);
      g_assert_cmpuint (info.n, ==, n);
      g_assert_cmpuint (info.frame_len, ==, g_bytes_get_size (f));
      g_assert_false (rlx_wire_decode_into (f, NULL, &info, NULL, into, n - 1, &error));
      g_assert_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_BAD_PAYLOAD);
      g_assert_nonnull (strstr (error->message, "10001"));
    }
}

static void
test_frame_no_array (void)
{
  g_autoptr(JsonObject) h = json_object_new ();
  g_autoptr(JsonObject) back = NULL;
  g_autoptr(GBytes) f = NULL;
  g_autoptr(GError) error = NULL;
  float *vals = (float *) 1;
  gsize n = 99;
  RlxWireInfo info;
  static const float none[1];

  json_object_set_string_member (h, "t", "hello");
  f = rlx_wire_encode (h, NULL, 0, RLX_PRECISION_F8E4M3, NULL, &error);
  g_assert_no_error (error);
  g_assert_true (rlx_wire_decode_full (f, NULL, &info, &back, &vals, &error));
  g_assert_false (info.has_values);
  g_assert_null (vals);
  g_assert_cmpuint (info.n, ==, 0);
  g_clear_pointer (&f, g_bytes_unref);
  /* an empty array is an array: _f32 and nothing else */
  f = rlx_wire_encode (NULL, none, 0, RLX_PRECISION_F16, "g", &error);
  g_assert_no_error (error);
  g_assert_true (rlx_wire_decode (f, NULL, NULL, NULL, &n, &error));
  g_assert_cmpuint (n, ==, 0);
  g_assert_true (rlx_wire_decode_full (f, NULL, &info, NULL, NULL, &error));
  g_assert_true (info.has_values);
  g_assert_cmpint (info.precision, ==, RLX_PRECISION_F32);
}

static void
test_frame_encode_refusals (void)
{
  float v[2] = { 1, 2 };
  struct { const char *member; const char *field; } cases[] = {
    { "_f32", NULL }, { "_fmt", NULL }, { "_scale", NULL }, { "g", NULL }, { "params", "params" },
  };
  const char *bad_fields[] = { "", "_g", "a b", "é", "x\"y",
                               "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(JsonObject) h = json_object_new ();
      g_autoptr(GError) error = NULL;
      json_object_set_int_member (h, cases[i].member, 1);
      g_assert_null (rlx_wire_encode (h, v, 2, RLX_PRECISION_F16, cases[i].field, &error));
      g_assert_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_INVALID_ARGUMENT);
      g_assert_nonnull (strstr (error->message, cases[i].member));
    }
  for (guint i = 0; i < G_N_ELEMENTS (bad_fields); i++)
    {
      g_autoptr(GError) error = NULL;
      g_assert_null (rlx_wire_encode (NULL, v, 2, RLX_PRECISION_F16, bad_fields[i], &error));
      g_assert_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_INVALID_ARGUMENT);
    }
  {
    g_autoptr(GError) error = NULL;
    g_assert_null (rlx_wire_encode (NULL, NULL, 3, RLX_PRECISION_F16, NULL, &error));
    g_assert_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_INVALID_ARGUMENT);
  }
  /* NaN in a header number: written as null, like JSON.stringify */
  {
    g_autoptr(JsonObject) h = json_object_new ();
    g_autoptr(JsonObject) back = NULL;
    g_autoptr(GBytes) f = NULL;
    json_object_set_double_member (h, "loss", NAN);
    f = rlx_wire_encode (h, NULL, 0, RLX_PRECISION_F32, NULL, NULL);
    g_assert_true (rlx_wire_decode (f, NULL, &back, NULL, NULL, NULL));
    g_assert_true (json_object_get_null_member (back, "loss"));
  }
}

typedef struct {
  const char *name;
  const char *json;      /* NULL: @bytes/@len is the whole frame */
  gboolean    raw;       /* no padding */
  gsize       payload;   /* bytes of zero payload */
  int         code;
  const char *says;      /* the message must contain this */
} Bad;

static void
test_frame_hostile (void)
{
  static const Bad cases[] = {
    { "not an object", "[1,2]", FALSE, 0, RLX_WIRE_ERROR_BAD_HEADER, "not an object" },
    { "empty header", "", FALSE, 0, RLX_WIRE_ERROR_BAD_HEADER, "empty" },
    { "spaces only", "    ", FALSE, 0, RLX_WIRE_ERROR_BAD_HEADER, "empty" },
    { "syntax", "{\"t\":}", FALSE, 0, RLX_WIRE_ERROR_BAD_HEADER, "byte 5" },
    { "trailing comma", "{\"t\":1,}", FALSE, 0, RLX_WIRE_ERROR_BAD_HEADER, "member name" },
    { "single quotes", "{'t':1}", FALSE, 0, RLX_WIRE_ERROR_BAD_HEADER, "double quotes" },
    { "comment", "/**/{}", FALSE, 0, RLX_WIRE_ERROR_BAD_HEADER, "'/'" },
    { "leading zero", "{\"a\":01}", FALSE, 0, RLX_WIRE_ERROR_BAD_HEADER, "leading zeros" },
    { "NaN literal", "{\"a\":NaN}", FALSE, 0, RLX_WIRE_ERROR_BAD_HEADER, "'N'" },
    { "huge number", "{\"a\":1e999}", FALSE, 0, RLX_WIRE_ERROR_BAD_HEADER, "out of range" },
    { "NUL escape", "{\"a\":\"\\u0000\"}", FALSE, 0, RLX_WIRE_ERROR_BAD_HEADER, "NUL" },
    { "lone surrogate", "{\"a\":\"\\ud800x\"}", FALSE, 0, RLX_WIRE_ERROR_BAD_HEADER, "surrogate" },
    { "raw control", "{\"a\":\"\x01\"}", FALSE, 0, RLX_WIRE_ERROR_BAD_HEADER, "control" },
    { "bad utf-8", "{\"a\":\"\xc3\x28\"}", FALSE, 0, RLX_WIRE_ERROR_BAD_HEADER, "UTF-8" },
    { "unclosed string", "{\"a\":\"abc", FALSE, 0, RLX_WIRE_ERROR_BAD_HEADER, "never closed" },
    { "duplicate", "{\"a\":1,\"a\":2}", FALSE, 0, RLX_WIRE_ERROR_BAD_HEADER, "twice" },
    { "garbage after", "{} x", FALSE, 0, RLX_WIRE_ERROR_BAD_HEADER, "after" },
    { "too deep", "{\"a\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}",
      FALSE, 0, RLX_WIRE_ERROR_BAD_HEADER, "deeper" },
    { "unpadded", "{\"t\":1}", TRUE, 0, RLX_WIRE_ERROR_BAD_HEADER, "multiple of 4" },
    { "_f32 number", "{\"_f32\":3}", FALSE, 0, RLX_WIRE_ERROR_BAD_FIELD, "_f32" },
    { "_f32 empty", "{\"_f32\":\"\"}", FALSE, 0, RLX_WIRE_ERROR_BAD_FIELD, "_f32" },
    { "_f32 clash", "{\"g\":1,\"_f32\":\"g\"}", FALSE, 0, RLX_WIRE_ERROR_BAD_FIELD, "both" },
    { "unknown _ field", "{\"_x\":1}", FALSE, 0, RLX_WIRE_ERROR_BAD_FIELD, "_x" },
    { "_fmt without _f32", "{\"_fmt\":\"f16\",\"_scale\":1}", FALSE, 0, RLX_WIRE_ERROR_BAD_FIELD, "no _f32" },
    { "_fmt unknown", "{\"_f32\":\"g\",\"_fmt\":\"f4\",\"_scale\":1}", FALSE, 0, RLX_WIRE_ERROR_BAD_FORMAT, "f4" },
    { "_fmt number", "{\"_f32\":\"g\",\"_fmt\":16,\"_scale\":1}", FALSE, 0, RLX_WIRE_ERROR_BAD_FIELD, "_fmt" },
    { "_scale missing", "{\"_f32\":\"g\",\"_fmt\":\"f16\"}", FALSE, 2, RLX_WIRE_ERROR_BAD_SCALE, "no _scale" },
    { "_scale string", "{\"_f32\":\"g\",\"_fmt\":\"f16\",\"_scale\":\"2\"}", FALSE, 2, RLX_WIRE_ERROR_BAD_SCALE, "number" },
    { "_scale zero", "{\"_f32\":\"g\",\"_fmt\":\"f16\",\"_scale\":0}", FALSE, 2, RLX_WIRE_ERROR_BAD_SCALE, "finite positive" },
    { "_scale negative", "{\"_f32\":\"g\",\"_fmt\":\"f16\",\"_scale\":-1.5}", FALSE, 2, RLX_WIRE_ERROR_BAD_SCALE, "finite positive" },
    { "_scale subnormal", "{\"_f32\":\"g\",\"_fmt\":\"f16\",\"_scale\":5e-324}", FALSE, 2, RLX_WIRE_ERROR_BAD_SCALE, "finite positive" },
    { "_scale null", "{\"_f32\":\"g\",\"_fmt\":\"f16\",\"_scale\":null}", FALSE, 2, RLX_WIRE_ERROR_BAD_SCALE, "number" },
    { "f16 odd payload", "{\"_f32\":\"g\",\"_fmt\":\"f16\",\"_scale\":1}", FALSE, 3, RLX_WIRE_ERROR_BAD_PAYLOAD, "whole number" },
    { "f32 payload", "{\"_f32\":\"g\"}", FALSE, 6, RLX_WIRE_ERROR_BAD_PAYLOAD, "4 bytes each" },
    { "payload, no array", "{\"t\":1}", FALSE, 4, RLX_WIRE_ERROR_BAD_PAYLOAD, "names no array" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autofree guint8 *zeros = g_malloc0 (cases[i].payload + 1);
      g_autoptr(GBytes) f = make_frame (cases[i].json, cases[i].raw, zeros, cases[i].payload);
      g_autoptr(GError) error = NULL;
      JsonObject *h = (JsonObject *) 1;
      float *v = (float *) 1;
      gsize n = 7;

      g_test_message ("%s", cases[i].name);
      g_assert_false (rlx_wire_decode (f, NULL, &h, &v, &n, &error));
      g_assert_error (error, RLX_WIRE_ERROR, cases[i].code);
      if (strstr (error->message, cases[i].says) == NULL)
        g_error ("%s: message \"%s\" does not say \"%s\"", cases[i].name, error->message, cases[i].says);
      g_assert_null (h);
      g_assert_null (v);
      g_assert_cmpuint (n, ==, 0);
    }
}

static void
test_frame_lengths_and_limits (void)
{
  g_autoptr(GError) error = NULL;
  float v[100] = { 1 };
  g_autoptr(GBytes) good = rlx_wire_encode (NULL, v, 100, RLX_PRECISION_F32, NULL, &error);
  gsize len;
  const guint8 *d = g_bytes_get_data (good, &len);

  /* Every truncation of a good frame is refused — except a cut at an
   * element boundary, which is a shorter array (the format carries no count;
   * decode_into's expected length catches that). */
  for (gsize cut = 0; cut < len; cut++)
    {
      g_autoptr(GBytes) f = g_bytes_new (d, cut);
      g_autoptr(GError) e = NULL;
      guint32 hlen;
      gsize n = 0;
      float dst[100];

      memcpy (&hlen, d, 4);
      if (cut >= 4 + hlen && (cut - 4 - hlen) % 4 == 0)
        {
          g_assert_true (rlx_wire_decode (f, NULL, NULL, NULL, &n, &e));
          g_assert_cmpuint (n, ==, (cut - 4 - hlen) / 4);
          g_assert_false (rlx_wire_decode_into (f, NULL, NULL, NULL, dst, 100, &e));
          g_assert_error (e, RLX_WIRE_ERROR, RLX_WIRE_ERROR_BAD_PAYLOAD);
          continue;
        }
      g_assert_false (rlx_wire_decode (f, NULL, NULL, NULL, NULL, &e));
      g_assert_nonnull (e);
      if (cut < 4)
        g_assert_error (e, RLX_WIRE_ERROR, RLX_WIRE_ERROR_TRUNCATED);
    }
  /* header length past the end, and huge */
  {
    guint8 buf[12] = { 8, 0, 0, 0, '{', '}', ' ', ' ' };
    guint8 big[8] = { 0xff, 0xff, 0xff, 0xff, '{', '}', ' ', ' ' };
    g_autoptr(GBytes) f = g_bytes_new (buf, 8);
    g_autoptr(GBytes) b = g_bytes_new (big, 8);
    g_autoptr(GError) e1 = NULL, e2 = NULL;
    g_assert_false (rlx_wire_decode (f, NULL, NULL, NULL, NULL, &e1));
    g_assert_error (e1, RLX_WIRE_ERROR, RLX_WIRE_ERROR_TRUNCATED);
    g_assert_nonnull (strstr (e1->message, "runs past the end"));
    g_assert_false (rlx_wire_decode (b, NULL, NULL, NULL, NULL, &e2));
    g_assert_error (e2, RLX_WIRE_ERROR, RLX_WIRE_ERROR_TOO_LARGE);
  }
  /* limits */
  {
    RlxWireLimits small = { .max_frame = 100 };
    RlxWireLimits tiny_header = { .max_header = 8 };
    RlxWireLimits shallow = { .max_depth = 1 };
    g_autoptr(GBytes) nested = make_frame ("{\"a\":{\"b\":1}}", FALSE, NULL, 0);
    g_autoptr(GError) e1 = NULL, e2 = NULL, e3 = NULL;

    g_assert_false (rlx_wire_decode (good, &small, NULL, NULL, NULL, &e1));
    g_assert_error (e1, RLX_WIRE_ERROR, RLX_WIRE_ERROR_TOO_LARGE);
    g_assert_nonnull (strstr (e1->message, "max_frame"));
    g_assert_false (rlx_wire_decode (good, &tiny_header, NULL, NULL, NULL, &e2));
    g_assert_error (e2, RLX_WIRE_ERROR, RLX_WIRE_ERROR_TOO_LARGE);
    g_assert_false (rlx_wire_decode (nested, &shallow, NULL, NULL, NULL, &e3));
    g_assert_error (e3, RLX_WIRE_ERROR, RLX_WIRE_ERROR_BAD_HEADER);
    g_assert_true (rlx_wire_decode (nested, NULL, NULL, NULL, NULL, NULL));
  }
  /* default cap: a frame for the largest model passes, a bigger one not */
  {
    gsize n = 1863690;
    g_autofree float *x = g_new0 (float, n);
    g_autoptr(GBytes) f = rlx_wire_encode (NULL, x, n, RLX_PRECISION_F32, "params", NULL);
    g_autofree guint8 *huge = g_malloc0 (RLX_WIRE_DEFAULT_MAX_FRAME + 1);
    g_autoptr(GBytes) h = NULL;
    g_autoptr(GError) e = NULL;
    guint32 le = GUINT32_TO_LE (4);

    g_assert_true (rlx_wire_decode (f, NULL, NULL, NULL, NULL, NULL));
    memcpy (huge, &le, 4);
    memcpy (huge + 4, "{}  ", 4);
    h = g_bytes_new_take (g_steal_pointer (&huge), RLX_WIRE_DEFAULT_MAX_FRAME + 1);
    g_assert_false (rlx_wire_decode (h, NULL, NULL, NULL, NULL, &e));
    g_assert_error (e, RLX_WIRE_ERROR, RLX_WIRE_ERROR_TOO_LARGE);
  }
}

/* JSON numbers and strings are written as JavaScript's JSON.stringify
 * writes them. */
static void
test_frame_json_like_js (void)
{
  struct { double v; const char *js; } nums[] = {
    { 0.1, "0.1" }, { 1e21, "1e+21" }, { 1e20, "100000000000000000000" }, { 1e-7, "1e-7" },
    { 1.5e-6, "0.0000015" }, { -0.0, "0" }, { 5e-324, "5e-324" }, { 1.0, "1" },
    { 1.7976931348623157e308, "1.7976931348623157e+308" }, { 1024.0 / 3.0, "341.3333333333333" },
    { 123.456, "123.456" }, { -2.5e-300, "-2.5e-300" }, { 1e22, "1e+22" }, { INFINITY, "null" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (nums); i++)
    {
      g_autoptr(JsonObject) h = json_object_new ();
      g_autoptr(GBytes) f = NULL;
      g_autofree char *want = g_strdup_printf ("{\"x\":%s}", nums[i].js);
      g_autofree char *got = NULL;
      gsize len;
      const char *d;

      json_object_set_double_member (h, "x", nums[i].v);
      f = rlx_wire_encode (h, NULL, 0, RLX_PRECISION_F32, NULL, NULL);
      d = g_bytes_get_data (f, &len);
      got = g_strchomp (g_strndup (d + 4, len - 4));
      g_assert_cmpstr (got, ==, want);
    }
  {
    g_autoptr(JsonObject) h = json_object_new ();
    g_autoptr(GBytes) f = NULL;
    g_autofree char *got = NULL;
    gsize len;
    const char *d;

    json_object_set_string_member (h, "s", "a\"b\\c\n\t\x01\x1f/\xe2\x82\xac");
    f = rlx_wire_encode (h, NULL, 0, RLX_PRECISION_F32, NULL, NULL);
    d = g_bytes_get_data (f, &len);
    got = g_strchomp (g_strndup (d + 4, len - 4));
    g_assert_cmpstr (got, ==, "{\"s\":\"a\\\"b\\\\c\\n\\t\\u0001\\u001f/\xe2\x82\xac\"}");
  }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/wire/frame/layout", test_frame_layout);
  g_test_add_func ("/wire/frame/round-trip", test_frame_round_trip);
  g_test_add_func ("/wire/frame/no-array", test_frame_no_array);
  g_test_add_func ("/wire/frame/encode-refusals", test_frame_encode_refusals);
  g_test_add_func ("/wire/frame/hostile", test_frame_hostile);
  g_test_add_func ("/wire/frame/lengths-and-limits", test_frame_lengths_and_limits);
  g_test_add_func ("/wire/frame/json-like-js", test_frame_json_like_js);
  return g_test_run ();
}
