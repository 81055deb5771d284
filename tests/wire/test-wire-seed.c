/* test-wire-seed.c — byte compatibility with the seed's JavaScript codec
 * (shared/seeds/cluster-bus.js), run under Node.js through seed-codec.mjs.
 *
 * For every vector and every precision:
 *   seed → here: the seed's frame decodes here to exactly the values the
 *                seed's own decode gives, and encoding the same message here
 *                gives the seed's frame byte for byte (header included);
 *   here → seed: our frame, decoded by the seed, gives exactly what our
 *                round trip gives, and the header fields come back unchanged.
 * Run with the vector kernels and again with the portable ones. */
#include "rlx-config.h"

#include <math.h>
#include <string.h>

#include <glib/gstdio.h>

#include "core/wire/rlx-wire.h"

typedef struct {
  const char *name;
  const char *header;   /* JSON, NULL = {"t":"grad"} */
  const char *field;    /* NULL = "g" */
  GArray     *values;
} Vector;

static char *node_path;
static char *harness;

static void
run_node (const char *cmd, const char *dir)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *out = NULL, *err = NULL;
  int status = 0;
  const char *argv[] = { node_path, harness, cmd, dir, NULL };

  if (!g_spawn_sync (NULL, (char **) argv, NULL, G_SPAWN_STDIN_FROM_DEV_NULL, NULL, NULL,
                     &out, &err, &status, &error))
    g_error ("could not run %s: %s", node_path, error->message);
  if (!g_spawn_check_wait_status (status, &error))
    g_error ("node %s %s %s failed: %s\n%s", harness, cmd, dir, error->message, err);
}

static GBytes *
read_file (const char *dir, const char *name)
{
  g_autofree char *path = g_build_filename (dir, name, NULL);
  g_autoptr(GError) error = NULL;
  char *data = NULL;
  gsize len = 0;

  if (!g_file_get_contents (path, &data, &len, &error))
    g_error ("%s", error->message);
  return g_bytes_new_take (data, len);
}

static void
write_file (const char *dir, const char *name, const void *data, gsize len)
{
  g_autofree char *path = g_build_filename (dir, name, NULL);
  g_autoptr(GError) error = NULL;

  if (!g_file_set_contents (path, data, (gssize) len, &error))
    g_error ("%s", error->message);
}

/* Same bits, except that any NaN equals any NaN. */
static void
assert_same_floats (const char *what, const float *a, const float *b, gsize n)
{
  for (gsize i = 0; i < n; i++)
    {
      guint32 x, y;
      memcpy (&x, a + i, 4);
      memcpy (&y, b + i, 4);
      if (isnan (a[i]) && isnan (b[i]))
        continue;
      if (x != y)
        g_error ("%s: element %" G_GSIZE_FORMAT ": %a (0x%08x) here, %a (0x%08x) in the seed",
                 what, i, a[i], x, b[i], y);
    }
}

static void
push (GArray *a, float v)
{
  g_array_append_val (a, v);
}

static GPtrArray *
make_vectors (void)
{
  GPtrArray *vs = g_ptr_array_new ();
  GRand *r = g_rand_new_with_seed (20261129);
  Vector *v;

#define NEW_VECTOR(nm, hdr, fld) \
  (v = g_new0 (Vector, 1), v->name = nm, v->header = hdr, v->field = fld, \
   v->values = g_array_new (FALSE, FALSE, sizeof (float)), g_ptr_array_add (vs, v))

  /* Everything at once: zeros, f32 subnormals, 1e-9s, huge, NaN, ±Inf. */
  NEW_VECTOR ("mixed",
              "{\"t\":\"grad\",\"step\":5,\"loss\":0.123456789,\"s\":\"\\u00e9\\\"\\\\\\n\\u0001 \\ud83d\\ude00\","
              "\"n\":null,\"b\":true,\"arr\":[1,2.5,-0,1e21,1e-7,123456789012345678901234,0.1],"
              "\"o\":{\"x\":[],\"y\":{}}}", NULL);
  {
    const float specials[] = { 0.0f, -0.0f, 1e-45f, -1e-45f, 1e-40f, 1e-9f, -3e-9f,
                               3.0e38f, -3.4e38f, NAN, -NAN, INFINITY, -INFINITY,
                               1.0f, -1.0f, 0.5f, 65504.0f, 65520.0f, 1e-7f };
    for (guint i = 0; i < G_N_ELEMENTS (specials); i++)
      push (v->values, specials[i]);
    for (int i = 0; i < 2000; i++)
      push (v->values, (float) (g_rand_double_range (r, -1, 1) *
                                pow (10, g_rand_double_range (r, -45, 38))));
  }

  /* A bucket living around 1e-9. */
  NEW_VECTOR ("tiny", NULL, NULL);
  for (int i = 0; i < 4099; i++)
    push (v->values, (float) (g_rand_double_range (r, -1, 1) * 1e-9));

  /* Huge values only. */
  NEW_VECTOR ("huge", "{\"t\":\"commit\",\"step\":1}", "params");
  for (int i = 0; i < 300; i++)
    push (v->values, (float) (g_rand_double_range (r, -3.4, 3.4) * 1e38));
  push (v->values, G_MAXFLOAT);
  push (v->values, -G_MAXFLOAT);

  /* max |x| = 1024 pins the f16/E5M2 scale to 1: exact ties (subnormal and
   * normal) reach the f16 rounding unchanged. */
  NEW_VECTOR ("ties", NULL, NULL);
  push (v->values, 1024.0f);
  for (int k = 1; k < 2048; k += 2)
    {
      push (v->values, (float) ldexp (k, -25));         /* subnormal ties */
      push (v->values, (float) -ldexp (k, -25));
      push (v->values, (float) ldexp (2 * 1024 + k, -12)); /* normal ties near 1 */
      push (v->values, nextafterf ((float) ldexp (k, -25), 1));
    }
  for (int k = 0; k < 256; k++)
    push (v->values, (float) (k / 4.0 + 0.125));        /* E4M3/E5M2 ties */

  /* Nothing to scale: all zero, all non-finite. */
  NEW_VECTOR ("zeros", "{\"t\":\"grad\",\"n\":0}", NULL);
  for (int i = 0; i < 33; i++)
    push (v->values, i % 2 ? 0.0f : -0.0f);
  NEW_VECTOR ("nonfinite", NULL, NULL);
  push (v->values, NAN);
  push (v->values, INFINITY);
  push (v->values, -INFINITY);
  push (v->values, 0.0f);

  /* Gradient-like, and the awkward lengths. */
  NEW_VECTOR ("grad", "{\"t\":\"grad\",\"step\":123,\"samples\":64,\"loss\":2.302585}", NULL);
  for (int i = 0; i < 100003; i++)
    push (v->values, (float) (g_rand_double_range (r, -1, 1) * 1e-3 *
                              pow (10, g_rand_double_range (r, -3, 0))));
  NEW_VECTOR ("one", NULL, "avg");
  push (v->values, -0.7f);
  NEW_VECTOR ("empty", "{\"t\":\"bye\"}", NULL);

  g_rand_free (r);
  return vs;
#undef NEW_VECTOR
}

static const char *precisions[] = { "f32", "f16", "f8e4m3", "f8e5m2" };

/* The header through our own (strict) parser: a hand-made frame. */
static JsonObject *
header_of (const Vector *v)
{
  const char *h = v->header ? v->header : "{\"t\":\"grad\"}";
  gsize len = strlen (h), padded = (len + 3) / 4 * 4;
  g_autofree guint8 *buf = g_malloc (4 + padded);
  guint32 le = GUINT32_TO_LE ((guint32) padded);
  g_autoptr(GBytes) frame = NULL;
  g_autoptr(GError) error = NULL;
  JsonObject *obj = NULL;

  memcpy (buf, &le, 4);
  memcpy (buf + 4, h, len);
  memset (buf + 4 + len, ' ', padded - len);
  frame = g_bytes_new (buf, 4 + padded);
  if (!rlx_wire_decode (frame, NULL, &obj, NULL, NULL, &error))
    g_error ("header %s: %s", h, error->message);
  return obj;
}

/* Our JSON for a header: the frame of a message without an array. */
static char *
our_json (JsonObject *header)
{
  g_autoptr(GBytes) f = rlx_wire_encode (header, NULL, 0, RLX_PRECISION_F32, NULL, NULL);
  gsize len;
  const char *d = g_bytes_get_data (f, &len);
  g_autofree char *s = g_strndup (d + 4, len - 4);

  return g_strdup (g_strchomp (s));
}

static void
check_with_seed (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp ("rlx-wire-seed-XXXXXX", &error);
  g_autoptr(GPtrArray) vs = make_vectors ();
  guint frames = 0;

  g_assert_no_error (error);
  g_test_message ("kernels: %s, scratch: %s", rlx_wire_simd_path (), dir);

  for (guint i = 0; i < vs->len; i++)
    {
      Vector *v = vs->pdata[i];
      g_autofree char *f32 = g_strconcat (v->name, ".f32", NULL);
      g_autofree char *json = g_strconcat (v->name, ".json", NULL);
      g_autofree char *field = g_strconcat (v->name, ".field", NULL);

      write_file (dir, f32, v->values->data, v->values->len * 4);
      if (v->header)
        write_file (dir, json, v->header, strlen (v->header));
      if (v->field)
        write_file (dir, field, v->field, strlen (v->field));
    }
  run_node ("encode", dir);

  /* seed → here */
  for (guint i = 0; i < vs->len; i++)
    {
      Vector *v = vs->pdata[i];
      static const float none[1];
      /* an empty array is still an array: never NULL */
      const float *x = v->values->len ? (const float *) v->values->data : none;
      gsize n = v->values->len;

      for (guint p = 0; p < G_N_ELEMENTS (precisions); p++)
        {
          g_autofree char *fname = g_strdup_printf ("%s.%s.seed.frame", v->name, precisions[p]);
          g_autofree char *rtname = g_strdup_printf ("%s.%s.seed.rt.f32", v->name, precisions[p]);
          g_autofree char *cname = g_strdup_printf ("%s.%s.c.frame", v->name, precisions[p]);
          g_autofree char *what = g_strdup_printf ("%s at %s", v->name, precisions[p]);
          g_autoptr(GBytes) seed_frame = read_file (dir, fname);
          g_autoptr(GBytes) seed_rt = read_file (dir, rtname);
          g_autoptr(JsonObject) header = NULL;
          g_autoptr(JsonObject) header0 = header_of (v);
          g_autofree float *values = NULL;
          g_autoptr(GBytes) ours = NULL;
          g_autoptr(GBytes) ours0 = NULL;
          RlxWireInfo info;

          if (!rlx_wire_decode_full (seed_frame, NULL, &info, &header, &values, &error))
            g_error ("%s: the seed's frame does not decode: %s", what, error->message);
          g_assert_true (info.has_values);
          g_assert_cmpstr (info.field, ==, v->field ? v->field : "g");
          g_assert_cmpuint (info.n, ==, n);
          g_assert_cmpuint (g_bytes_get_size (seed_rt), ==, n * 4);
          if (n)
            assert_same_floats (what, values, g_bytes_get_data (seed_rt, NULL), n);

          /* the same message encoded here: the seed's bytes exactly */
          ours = rlx_wire_encode (header, x, n, p, v->field, &error);
          g_assert_no_error (error);
          ours0 = rlx_wire_encode (header0, x, n, p, v->field, &error);
          g_assert_no_error (error);
          if (!g_bytes_equal (ours, seed_frame) || !g_bytes_equal (ours0, seed_frame))
            {
              gsize a, b;
              const guint8 *pa = g_bytes_get_data (ours0, &a), *pb = g_bytes_get_data (seed_frame, &b);
              gsize k = 0;
              while (k < MIN (a, b) && pa[k] == pb[k])
                k++;
              g_error ("%s: our frame (%" G_GSIZE_FORMAT " bytes) differs from the seed's (%"
                       G_GSIZE_FORMAT ") at byte %" G_GSIZE_FORMAT "; seed header: %.*s", what,
                       a, b, k, (int) MIN (b - 4, 400), (const char *) pb + 4);
            }
          write_file (dir, cname, g_bytes_get_data (ours0, NULL), g_bytes_get_size (ours0));
          frames++;
        }
    }

  /* Frames only we make: error feedback over a few steps, a header of our
   * own, no array at all. */
  {
    Vector *v = vs->pdata[6]; /* grad */
    gsize n = v->values->len;
    for (guint p = 1; p < G_N_ELEMENTS (precisions); p++)
      {
        g_autoptr(RlxWireFeedback) fb = rlx_wire_feedback_new (n);
        for (int step = 0; step < 2; step++)
          {
            g_autoptr(GBytes) f = NULL;
            g_autofree char *cname = g_strdup_printf ("fb%d.%s.c.frame", step, precisions[p]);
            g_autofree char *dname = g_strdup_printf ("fb%d.%s.c.deq", step, precisions[p]);
            g_autofree float *deq = g_new (float, n);
            g_autoptr(JsonObject) h = json_object_new ();

            json_object_set_string_member (h, "t", "update");
            json_object_set_int_member (h, "step", step);
            json_object_set_double_member (h, "lr", 0.05);
            f = rlx_wire_feedback_encode (fb, h, (const float *) v->values->data, n, p, "avg", deq, &error);
            g_assert_no_error (error);
            write_file (dir, cname, g_bytes_get_data (f, NULL), g_bytes_get_size (f));
            write_file (dir, dname, deq, n * 4);
          }
      }
    {
      g_autoptr(JsonObject) h = json_object_new ();
      g_autoptr(GBytes) f = NULL;
      json_object_set_string_member (h, "t", "hello");
      json_object_set_string_member (h, "host", "b\xc3\xa4r \"q\"");
      f = rlx_wire_encode (h, NULL, 0, RLX_PRECISION_F16, NULL, &error);
      g_assert_no_error (error);
      write_file (dir, "hello.f16.c.frame", g_bytes_get_data (f, NULL), g_bytes_get_size (f));
    }
  }

  /* here → seed */
  run_node ("decode", dir);
  for (guint i = 0; i < vs->len; i++)
    {
      Vector *v = vs->pdata[i];
      gsize n = v->values->len;

      for (guint p = 0; p < G_N_ELEMENTS (precisions); p++)
        {
          g_autofree char *what = g_strdup_printf ("seed decoding our %s at %s", v->name, precisions[p]);
          g_autofree char *vname = g_strdup_printf ("%s.%s.c.frame.node.f32", v->name, precisions[p]);
          g_autofree char *jname = g_strdup_printf ("%s.%s.c.frame.node.json", v->name, precisions[p]);
          g_autoptr(GBytes) seed_vals = read_file (dir, vname);
          g_autoptr(GBytes) seed_json = read_file (dir, jname);
          g_autofree float *rt = g_new (float, MAX (n, 1));
          g_autoptr(JsonObject) header0 = header_of (v);
          g_autofree char *ojson = our_json (header0);

          rlx_wire_round_trip ((const float *) v->values->data, rt, n, p);
          g_assert_cmpuint (g_bytes_get_size (seed_vals), ==, n * 4);
          if (n)
            assert_same_floats (what, rt, g_bytes_get_data (seed_vals, NULL), n);
          /* header fields unchanged: the seed's JSON.stringify of what it
           * decoded is byte for byte what we write */
          g_assert_cmpmem (g_bytes_get_data (seed_json, NULL), g_bytes_get_size (seed_json),
                           ojson, strlen (ojson));
        }
    }
  for (guint p = 1; p < G_N_ELEMENTS (precisions); p++)
    for (int step = 0; step < 2; step++)
      {
        g_autofree char *vname = g_strdup_printf ("fb%d.%s.c.frame.node.f32", step, precisions[p]);
        g_autofree char *dname = g_strdup_printf ("fb%d.%s.c.deq", step, precisions[p]);
        g_autoptr(GBytes) a = read_file (dir, vname);
        g_autoptr(GBytes) b = read_file (dir, dname);
        g_assert_cmpuint (g_bytes_get_size (a), ==, g_bytes_get_size (b));
        assert_same_floats ("seed decoding our error-feedback frame", g_bytes_get_data (b, NULL),
                            g_bytes_get_data (a, NULL), g_bytes_get_size (a) / 4);
      }
  {
    g_autoptr(GBytes) j = read_file (dir, "hello.f16.c.frame.node.json");
    const char *want = "{\"t\":\"hello\",\"host\":\"b\xc3\xa4r \\\"q\\\"\"}";
    g_assert_cmpmem (g_bytes_get_data (j, NULL), g_bytes_get_size (j), want, strlen (want));
  }
  g_test_message ("%u seed frames matched byte for byte", frames);
  g_assert_cmpuint (frames, ==, vs->len * 4);

  for (guint i = 0; i < vs->len; i++)
    {
      Vector *v = vs->pdata[i];
      g_array_unref (v->values);
      g_free (v);
    }
  {
    g_autoptr(GDir) d = g_dir_open (dir, 0, NULL);
    const char *name;
    while (d && (name = g_dir_read_name (d)))
      {
        g_autofree char *path = g_build_filename (dir, name, NULL);
        g_unlink (path);
      }
    g_rmdir (dir);
  }
}

static void
test_seed_vector (void)
{
  rlx_wire_force_portable (FALSE);
  check_with_seed ();
}

static void
test_seed_avx2 (void)
{
  if (rlx_wire_force_kernels ("avx2") == NULL)
    {
      g_test_skip ("this CPU cannot run the AVX2 kernels");
      return;
    }
  check_with_seed ();
  rlx_wire_force_kernels (NULL);
}

static void
test_seed_portable (void)
{
  g_assert_cmpstr (rlx_wire_force_portable (TRUE), ==, "portable");
  check_with_seed ();
  rlx_wire_force_portable (FALSE);
}

static void
test_seed_bridge (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp ("rlx-wire-bridge-XXXXXX", &error);
  const RlxPrecision ps[2] = { RLX_PRECISION_F8E4M3, RLX_PRECISION_F8E5M2 };

  g_assert_no_error (error);
  run_node ("bridge", dir);
  for (int k = 0; k < 2; k++)
    {
      g_autofree char *name = g_strdup_printf ("%s.bridge", rlx_precision_to_string (ps[k]));
      g_autoptr(GBytes) b = read_file (dir, name);
      const guint8 *m = g_bytes_get_data (b, NULL);
      g_autofree char *path = g_build_filename (dir, name, NULL);

      g_assert_cmpuint (g_bytes_get_size (b), ==, 0x10000);
      for (guint h = 0; h < 0x10000; h++)
        if (rlx_wire_f8_from_f16 ((guint16) h, ps[k]) != m[h])
          g_error ("%s bridge: f16 0x%04x → 0x%02x here, 0x%02x in the seed", name, h,
                   rlx_wire_f8_from_f16 ((guint16) h, ps[k]), m[h]);
      g_unlink (path);
    }
  g_rmdir (dir);
}

/* The seed's codec is read from $RLX_SHARED_DIR (the project's shared/
 * beside this clone) when it is there, else from the verbatim copy in
 * tests/wire/seed/ — so a bare clone tests itself. With both present the
 * copy must not have drifted from the original. */
static char *seed_upstream, *seed_copy;

static void
test_seed_copy (void)
{
  g_autofree char *a = NULL, *b = NULL;
  gsize na, nb;
  g_autoptr(GError) error = NULL;

  if (!g_file_test (seed_upstream, G_FILE_TEST_EXISTS))
    {
      g_test_skip ("no shared/ beside this clone: the copy in tests/wire/seed is the oracle");
      return;
    }
  g_assert_true (g_file_get_contents (seed_upstream, &a, &na, &error));
  g_assert_no_error (error);
  g_assert_true (g_file_get_contents (seed_copy, &b, &nb, &error));
  g_assert_no_error (error);
  if (na != nb || memcmp (a, b, na) != 0)
    g_error ("%s differs from %s: copy the seed again (cp %s %s)", seed_copy, seed_upstream,
             seed_upstream, seed_copy);
}

int
main (int argc, char **argv)
{
  const char *root = g_getenv ("RLX_SOURCE_ROOT");
  const char *shared = g_getenv ("RLX_SHARED_DIR");

  g_test_init (&argc, &argv, NULL);
  node_path = g_find_program_in_path ("node");
  if (node_path == NULL)
    node_path = g_find_program_in_path ("nodejs");
  if (node_path == NULL)
    {
      g_printerr ("test-wire-seed: Node.js is needed to run the seed's codec: install nodejs "
                  "(scripts/deps.sh does)\n");
      return 1;
    }
  if (root == NULL || shared == NULL)
    {
      g_printerr ("test-wire-seed: run under meson test (needs RLX_SOURCE_ROOT and RLX_SHARED_DIR)\n");
      return 1;
    }
  harness = g_build_filename (root, "tests", "wire", "seed-codec.mjs", NULL);
  seed_upstream = g_build_filename (shared, "seeds", "cluster-bus.js", NULL);
  seed_copy = g_build_filename (root, "tests", "wire", "seed", "seeds", "cluster-bus.js", NULL);
  if (!g_file_test (seed_upstream, G_FILE_TEST_EXISTS))
    {
      g_autofree char *dir = g_build_filename (root, "tests", "wire", "seed", NULL);
      g_test_message ("%s is not there: using the copy in %s", seed_upstream, dir);
      g_setenv ("RLX_SHARED_DIR", dir, TRUE);
    }
  g_test_add_func ("/wire/seed/copy-matches-shared", test_seed_copy);
  g_test_add_func ("/wire/seed/bridge", test_seed_bridge);
  g_test_add_func ("/wire/seed/interop", test_seed_vector);
  g_test_add_func ("/wire/seed/interop-avx2", test_seed_avx2);
  g_test_add_func ("/wire/seed/interop-portable", test_seed_portable);
  return g_test_run ();
}
