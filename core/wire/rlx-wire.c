/* rlx-wire.c — frames, precisions, round trip, error feedback (the byte
 * counters are rlx-wire-counters.c) */
#include "rlx-config.h"

#include <math.h>
#include <string.h>

#include "core/wire/rlx-wire-private.h"
#include "core/util/rlx-fp-mode.h"

G_DEFINE_QUARK (rlx-wire-error-quark, rlx_wire_error)

/* ── precisions ─────────────────────────────────────────────────────────── */

static const char *const precision_names[RLX_PRECISION_COUNT] = {
  "f32", "f16", "f8e4m3", "f8e5m2",
};

static gboolean
precision_valid (RlxPrecision p)
{
  return (guint) p < RLX_PRECISION_COUNT;
}

const char *
rlx_precision_to_string (RlxPrecision p)
{
  g_return_val_if_fail (precision_valid (p), NULL);
  return precision_names[p];
}

gboolean
rlx_precision_from_string (const char *s, RlxPrecision *p_out, GError **error)
{
  g_return_val_if_fail (p_out != NULL, FALSE);

  for (guint i = 0; s != NULL && i < RLX_PRECISION_COUNT; i++)
    if (strcmp (s, precision_names[i]) == 0)
      {
        *p_out = (RlxPrecision) i;
        return TRUE;
      }
  g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_BAD_FORMAT,
               "unknown wire precision \"%.32s\" (use f32, f16, f8e4m3 or f8e5m2)",
               s ? s : "(null)");
  return FALSE;
}

gsize
rlx_precision_element_size (RlxPrecision p)
{
  static const gsize sizes[RLX_PRECISION_COUNT] = { 4, 2, 1, 1 };

  g_return_val_if_fail (precision_valid (p), 4);
  return sizes[p];
}

double
rlx_precision_target (RlxPrecision p)
{
  static const double targets[RLX_PRECISION_COUNT] = { 0, 1024, 192, 1024 };

  g_return_val_if_fail (precision_valid (p), 0);
  return targets[p];
}

/* ── quantisation ───────────────────────────────────────────────────────── */

static double
scale_from_maxabs (float maxabs, RlxPrecision p)
{
  /* The seed: `maxAbs > 0 ? f.target / maxAbs : 1`, in double. */
  return maxabs > 0 ? rlx_precision_target (p) / (double) maxabs : 1.0;
}

static double
wire_scale_for_exact (const float *in, gsize n, RlxPrecision p)
{
  g_return_val_if_fail (precision_valid (p), 1.0);
  g_return_val_if_fail (in != NULL || n == 0, 1.0);

  if (p == RLX_PRECISION_F32 || n == 0)
    return 1.0;
  return scale_from_maxabs (rlx_wire_kernels ()->maxabs (in, n), p);
}

/* in the exact mode, whatever the calling thread's (rlx-fp-mode.h) */
double
rlx_wire_scale_for (const float *in, gsize n, RlxPrecision p)
{
  RlxFpScope fp = rlx_fp_scope_begin_exact ();
  double ret;

  ret = wire_scale_for_exact (in, n, p);
  rlx_fp_scope_end (fp);
  return ret;
}

static void
wire_quantize_exact (const float *in, gsize n, RlxPrecision p, double scale, void *codes)
{
  const RlxWireKernels *k = rlx_wire_kernels ();

  g_return_if_fail (precision_valid (p));
  g_return_if_fail ((in != NULL && codes != NULL) || n == 0);

  switch (p)
    {
    case RLX_PRECISION_F32:
      if (n)
        memcpy (codes, in, n * 4);
      break;
    case RLX_PRECISION_F16:
      k->quant_f16 (in, n, scale, codes);
      break;
    case RLX_PRECISION_F8E4M3:
    case RLX_PRECISION_F8E5M2:
      k->quant_f8 (in, n, scale, p, codes);
      break;
    }
}

/* in the exact mode, whatever the calling thread's (rlx-fp-mode.h) */
void
rlx_wire_quantize (const float *in, gsize n, RlxPrecision p, double scale, void *codes)
{
  RlxFpScope fp = rlx_fp_scope_begin_exact ();

  wire_quantize_exact (in, n, p, scale, codes);
  rlx_fp_scope_end (fp);
}

static void
wire_dequantize_exact (const void *codes, gsize n, RlxPrecision p, double scale, float *out)
{
  const RlxWireKernels *k = rlx_wire_kernels ();
  /* The seed: `const inv = 1 / scale` then `code * inv`, in double. */
  double inv = 1.0 / scale;

  g_return_if_fail (precision_valid (p));
  g_return_if_fail ((codes != NULL && out != NULL) || n == 0);

  switch (p)
    {
    case RLX_PRECISION_F32:
      if (n)
        memmove (out, codes, n * 4);
      break;
    case RLX_PRECISION_F16:
      k->dequant_f16 (codes, n, inv, out);
      break;
    case RLX_PRECISION_F8E4M3:
    case RLX_PRECISION_F8E5M2:
      {
        float lut[256];
        rlx_wire_f8_lut (p, inv, lut);
        k->dequant_f8 (codes, n, p, inv, lut, out);
      }
      break;
    }
}

/* in the exact mode, whatever the calling thread's (rlx-fp-mode.h) */
void
rlx_wire_dequantize (const void *codes, gsize n, RlxPrecision p, double scale, float *out)
{
  RlxFpScope fp = rlx_fp_scope_begin_exact ();

  wire_dequantize_exact (codes, n, p, scale, out);
  rlx_fp_scope_end (fp);
}

/* Quantise @s at @scale and dequantise it into @out, block by block so the
 * codes stay in L1. When @residual is set it holds s on entry and receives
 * s − out (0 where that is not finite). @out may alias @s (not @residual). */
static void
quant_dequant_blocks (const float *s, float *out, float *residual, gsize n,
                      RlxPrecision p, double scale)
{
  const RlxWireKernels *k = rlx_wire_kernels ();
  guint8 codes[RLX_WIRE_BLOCK * 2];
  float lut[256];
  double inv = 1.0 / scale;

  if (p != RLX_PRECISION_F16)
    rlx_wire_f8_lut (p, inv, lut);
  for (gsize i = 0; i < n; i += RLX_WIRE_BLOCK)
    {
      gsize m = MIN (RLX_WIRE_BLOCK, n - i);

      if (p == RLX_PRECISION_F16)
        {
          k->quant_f16 (s + i, m, scale, codes);
          k->dequant_f16 (codes, m, inv, out + i);
        }
      else
        {
          k->quant_f8 (s + i, m, scale, p, codes);
          k->dequant_f8 (codes, m, p, inv, lut, out + i);
        }
      if (residual != NULL)
        for (gsize j = i; j < i + m; j++)
          {
            float r = residual[j] - out[j];
            residual[j] = isfinite (r) ? r : 0.0f;
          }
    }
}

static double
wire_round_trip_exact (const float *in, float *out, gsize n, RlxPrecision p)
{
  double scale;

  g_return_val_if_fail (precision_valid (p), 1.0);
  g_return_val_if_fail ((in != NULL && out != NULL) || n == 0, 1.0);

  if (p == RLX_PRECISION_F32 || n == 0)
    {
      if (n && in != out)
        memmove (out, in, n * 4);
      return 1.0;
    }
  scale = rlx_wire_scale_for (in, n, p);
  quant_dequant_blocks (in, out, NULL, n, p, scale);
  return scale;
}

/* in the exact mode, whatever the calling thread's (rlx-fp-mode.h) */
double
rlx_wire_round_trip (const float *in, float *out, gsize n, RlxPrecision p)
{
  RlxFpScope fp = rlx_fp_scope_begin_exact ();
  double ret;

  ret = wire_round_trip_exact (in, out, n, p);
  rlx_fp_scope_end (fp);
  return ret;
}

/* ── frames: encode ─────────────────────────────────────────────────────── */

static gboolean
field_name_valid (const char *field)
{
  gsize len = strlen (field);

  if (len == 0 || len > RLX_WIRE_FIELD_MAX || field[0] == '_')
    return FALSE;
  for (gsize i = 0; i < len; i++)
    if (!g_ascii_isalnum (field[i]) && field[i] != '_')
      return FALSE;
  return TRUE;
}

static gboolean
is_reserved (const char *name)
{
  return strcmp (name, "_f32") == 0 || strcmp (name, "_fmt") == 0 || strcmp (name, "_scale") == 0;
}

/* Writes `{…header…,"_f32":…,"_fmt":…,"_scale":…}` padded with spaces to a
 * multiple of 4, exactly as the seed's JSON.stringify does. */
static GString *
encode_header (JsonObject *header, const char *field, RlxPrecision fmt, gboolean has_fmt,
               double scale, GError **error)
{
  g_autoptr(GString) json = g_string_sized_new (128);
  g_autoptr(GList) names = header ? json_object_get_members (header) : NULL;
  gboolean first = TRUE;

  g_string_append_c (json, '{');
  for (GList *l = names; l; l = l->next)
    {
      const char *name = l->data;

      if (is_reserved (name))
        {
          g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_INVALID_ARGUMENT,
                       "header member \"%s\" is reserved for the wire format; remove it", name);
          return NULL;
        }
      if (field && strcmp (name, field) == 0)
        {
          g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_INVALID_ARGUMENT,
                       "header member \"%s\" has the name of the float array; rename one", name);
          return NULL;
        }
      if (!g_utf8_validate (name, -1, NULL))
        {
          g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_INVALID_ARGUMENT,
                       "a header member name is not valid UTF-8");
          return NULL;
        }
      if (!first)
        g_string_append_c (json, ',');
      first = FALSE;
      rlx_wire_json_write_string (json, name);
      g_string_append_c (json, ':');
      if (!rlx_wire_json_write (json, json_object_get_member (header, name),
                                RLX_WIRE_DEFAULT_MAX_DEPTH - 1, error))
        return NULL;
    }
  if (field)
    {
      g_string_append (json, first ? "\"_f32\":" : ",\"_f32\":");
      rlx_wire_json_write_string (json, field);
      if (has_fmt)
        {
          g_string_append (json, ",\"_fmt\":");
          rlx_wire_json_write_string (json, rlx_precision_to_string (fmt));
          g_string_append (json, ",\"_scale\":");
          rlx_wire_json_write_double (json, scale);
        }
    }
  g_string_append_c (json, '}');
  while (json->len % 4)
    g_string_append_c (json, ' ');
  return g_steal_pointer (&json);
}

/* Validates the arguments, writes the header and allocates the frame with
 * room for the payload: returns the buffer (of *@total bytes, payload at
 * *@payload_off) or NULL with @error. @field may be NULL only without an
 * array; @has_values says whether there is one. */
static guint8 *
frame_alloc (JsonObject *header, gboolean has_values, gsize n, RlxPrecision p,
             const char *field, double scale, gsize *total, gsize *payload_off,
             GError **error)
{
  g_autoptr(GString) json = NULL;
  gboolean quantised = has_values && n > 0 && p != RLX_PRECISION_F32;
  gsize esize = quantised ? rlx_precision_element_size (p) : 4;
  guint8 *buf;
  guint32 hlen;

  if (!has_values && n != 0)
    {
      g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_INVALID_ARGUMENT,
                   "%" G_GSIZE_FORMAT " elements but no values", n);
      return NULL;
    }
  if (has_values)
    {
      if (field == NULL)
        field = "g";
      if (!field_name_valid (field))
        {
          g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_INVALID_ARGUMENT,
                       "array field name \"%.80s\" is not valid (1–%d letters, digits or '_', "
                       "not starting with '_')", field, RLX_WIRE_FIELD_MAX);
          return NULL;
        }
    }
  else
    field = NULL;
  if (n > (G_MAXSIZE - G_MAXUINT32 - 8) / 4)
    {
      g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_TOO_LARGE,
                   "%" G_GSIZE_FORMAT " elements do not fit in a frame", n);
      return NULL;
    }

  json = encode_header (header, field, p, quantised, scale, error);
  if (json == NULL)
    return NULL;
  if (json->len > G_MAXUINT32)
    {
      g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_TOO_LARGE,
                   "header of %" G_GSIZE_FORMAT " bytes is over the 4 GiB the length field holds",
                   json->len);
      return NULL;
    }

  *total = 4 + json->len + n * esize;
  *payload_off = 4 + json->len;
  buf = g_malloc (*total);
  hlen = GUINT32_TO_LE ((guint32) json->len);
  memcpy (buf, &hlen, 4);
  memcpy (buf + 4, json->str, json->len);
  return buf;
}

/* Frame = header + payload; the payload is written into the frame's own
 * buffer so nothing is copied twice. */
static GBytes *
encode_frame_exact (JsonObject *header, const float *values, gsize n, RlxPrecision p,
              const char *field, double scale_in, gboolean use_scale,
              float *residual, float *dequantised, GError **error)
{
  gboolean quantised = values != NULL && n > 0 && p != RLX_PRECISION_F32;
  double scale = 1.0;
  gsize total, off;
  guint8 *buf;

  if (quantised)
    scale = use_scale ? scale_in : rlx_wire_scale_for (values, n, p);
  buf = frame_alloc (header, values != NULL, n, p, field, scale, &total, &off, error);
  if (buf == NULL)
    return NULL;
  if (values != NULL && n > 0)
    {
      guint8 *payload = buf + off;

      if (!quantised)
        {
          memcpy (payload, values, n * 4);
          if (dequantised != NULL && dequantised != values)
            memcpy (dequantised, values, n * 4);
          if (residual != NULL)
            memset (residual, 0, n * 4);
        }
      else if (dequantised == NULL && residual == NULL)
        rlx_wire_quantize (values, n, p, scale, payload);
      else
        {
          /* One pass, block by block while the block is in L1: quantise into
           * the frame, decode what receivers will get, carry the residual. */
          float tmp[RLX_WIRE_BLOCK];
          gsize es = rlx_precision_element_size (p);

          for (gsize i = 0; i < n; i += RLX_WIRE_BLOCK)
            {
              gsize m = MIN (RLX_WIRE_BLOCK, n - i);
              float *d = dequantised ? dequantised + i : tmp;

              rlx_wire_quantize (values + i, m, p, scale, payload + i * es);
              rlx_wire_dequantize (payload + i * es, m, p, scale, d);
              if (residual != NULL)
                for (gsize j = 0; j < m; j++)
                  {
                    float r = residual[i + j] - d[j];
                    residual[i + j] = isfinite (r) ? r : 0.0f;
                  }
            }
        }
    }
  return g_bytes_new_take (buf, total);
}

/* in the exact mode, whatever the calling thread's (rlx-fp-mode.h) */
static GBytes *
encode_frame (JsonObject *header, const float *values, gsize n, RlxPrecision p,
              const char *field, double scale_in, gboolean use_scale,
              float *residual, float *dequantised, GError **error)
{
  RlxFpScope fp = rlx_fp_scope_begin_exact ();
  GBytes *ret;

  ret = encode_frame_exact (header, values, n, p, field, scale_in, use_scale, residual,
                            dequantised, error);
  rlx_fp_scope_end (fp);
  return ret;
}

GBytes *
rlx_wire_encode (JsonObject *header, const float *values, gsize n, RlxPrecision p,
                 const char *field, GError **error)
{
  g_return_val_if_fail (precision_valid (p), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  return encode_frame (header, values, n, p, field, 1.0, FALSE, NULL, NULL, error);
}

guint8 *
rlx_wire_frame_alloc (JsonObject *header, const char *field, gsize n, RlxPrecision p,
                      double scale, gsize *frame_len, gsize *payload_offset, GError **error)
{
  g_return_val_if_fail (precision_valid (p), NULL);
  g_return_val_if_fail (frame_len != NULL && payload_offset != NULL, NULL);
  g_return_val_if_fail (field != NULL || n == 0, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (field != NULL && n > 0 && p != RLX_PRECISION_F32 &&
      !(isfinite (scale) && scale > 0 && isfinite (1.0 / scale)))
    {
      g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_INVALID_ARGUMENT,
                   "scale %g is not a finite positive number", scale);
      return NULL;
    }
  return frame_alloc (header, field != NULL, n, p, field, scale, frame_len, payload_offset, error);
}

/* ── frames: decode ─────────────────────────────────────────────────────── */

static void
limits_resolve (const RlxWireLimits *in, RlxWireLimits *out)
{
  out->max_frame = in && in->max_frame ? in->max_frame : RLX_WIRE_DEFAULT_MAX_FRAME;
  out->max_header = in && in->max_header ? in->max_header : RLX_WIRE_DEFAULT_MAX_HEADER;
  out->max_depth = in && in->max_depth ? MIN (in->max_depth, 1000u) : RLX_WIRE_DEFAULT_MAX_DEPTH;
}

/* Validates the frame and fills @info; returns the header object (with the
 * `_` members still in it) and the payload. */
static JsonObject *
parse_frame (GBytes *frame, const RlxWireLimits *limits_in, RlxWireInfo *info,
             const guint8 **payload_out, GError **error)
{
  RlxWireLimits limits;
  gsize size;
  const guint8 *data = g_bytes_get_data (frame, &size);
  guint32 hlen;
  gsize plen, esize;
  g_autoptr(JsonNode) root = NULL;
  JsonObject *obj;
  JsonNode *f32_node, *fmt_node, *scale_node;
  g_autoptr(GList) names = NULL;

  limits_resolve (limits_in, &limits);
  memset (info, 0, sizeof *info);
  info->precision = RLX_PRECISION_F32;
  info->scale = 1.0;
  info->frame_len = size;

  if (size > limits.max_frame)
    {
      g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_TOO_LARGE,
                   "frame of %" G_GSIZE_FORMAT " bytes is over the %" G_GSIZE_FORMAT
                   "-byte limit (raise max_frame if the model needs it)", size, limits.max_frame);
      return NULL;
    }
  if (size < 4)
    {
      g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_TRUNCATED,
                   "frame of %" G_GSIZE_FORMAT " bytes is shorter than its 4-byte header length",
                   size);
      return NULL;
    }
  memcpy (&hlen, data, 4);
  hlen = GUINT32_FROM_LE (hlen);
  if (hlen > limits.max_header)
    {
      g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_TOO_LARGE,
                   "header length %u is over the %" G_GSIZE_FORMAT "-byte limit",
                   hlen, limits.max_header);
      return NULL;
    }
  if (hlen > size - 4)
    {
      g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_TRUNCATED,
                   "header length %u runs past the end of the %" G_GSIZE_FORMAT "-byte frame",
                   hlen, size);
      return NULL;
    }
  if (hlen % 4 != 0)
    {
      g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_BAD_HEADER,
                   "header length %u is not a multiple of 4 (the header must be space-padded)",
                   hlen);
      return NULL;
    }
  info->header_len = hlen;

  root = rlx_wire_json_parse ((const char *) data + 4, hlen, limits.max_depth, error);
  if (root == NULL)
    return NULL;
  if (!JSON_NODE_HOLDS_OBJECT (root))
    {
      g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_BAD_HEADER,
                   "header JSON is not an object");
      return NULL;
    }
  obj = json_node_get_object (root);

  names = json_object_get_members (obj);
  for (GList *l = names; l; l = l->next)
    if (((const char *) l->data)[0] == '_' && !is_reserved (l->data))
      {
        g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_BAD_FIELD,
                     "unknown header field \"%.64s\" (names starting with '_' belong to the "
                     "wire format: _f32, _fmt, _scale)", (const char *) l->data);
        return NULL;
      }

  f32_node = json_object_get_member (obj, "_f32");
  fmt_node = json_object_get_member (obj, "_fmt");
  scale_node = json_object_get_member (obj, "_scale");

  if (f32_node != NULL)
    {
      const char *field;

      if (!JSON_NODE_HOLDS_VALUE (f32_node) || json_node_get_value_type (f32_node) != G_TYPE_STRING)
        {
          g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_BAD_FIELD,
                       "header field _f32 must be a string naming the float array");
          return NULL;
        }
      field = json_node_get_string (f32_node);
      if (!field_name_valid (field))
        {
          g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_BAD_FIELD,
                       "header field _f32 = \"%.64s\" is not a valid array name "
                       "(1–%d letters, digits or '_', not starting with '_')",
                       field, RLX_WIRE_FIELD_MAX);
          return NULL;
        }
      if (json_object_has_member (obj, field))
        {
          g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_BAD_FIELD,
                       "header has both _f32 = \"%s\" and a member \"%s\"", field, field);
          return NULL;
        }
      info->has_values = TRUE;
      g_strlcpy (info->field, field, sizeof info->field);
    }
  else if (fmt_node != NULL || scale_node != NULL)
    {
      g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_BAD_FIELD,
                   "header has %s but no _f32 naming the array",
                   fmt_node ? "_fmt" : "_scale");
      return NULL;
    }

  if (fmt_node != NULL)
    {
      g_autoptr(GError) local = NULL;

      if (!JSON_NODE_HOLDS_VALUE (fmt_node) || json_node_get_value_type (fmt_node) != G_TYPE_STRING)
        {
          g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_BAD_FIELD,
                       "header field _fmt must be a string (f16, f8e4m3 or f8e5m2)");
          return NULL;
        }
      if (!rlx_precision_from_string (json_node_get_string (fmt_node), &info->precision, &local))
        {
          g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_BAD_FORMAT,
                       "header field _fmt: %s", local->message);
          return NULL;
        }
    }
  if (scale_node != NULL)
    {
      double s;
      GType t = JSON_NODE_HOLDS_VALUE (scale_node) ? json_node_get_value_type (scale_node) : G_TYPE_INVALID;

      if (t != G_TYPE_DOUBLE && t != G_TYPE_INT64)
        {
          g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_BAD_SCALE,
                       "header field _scale must be a number");
          return NULL;
        }
      s = t == G_TYPE_DOUBLE ? json_node_get_double (scale_node)
                             : (double) json_node_get_int (scale_node);
      if (!(isfinite (s) && s > 0 && isfinite (1.0 / s)))
        {
          g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_BAD_SCALE,
                       "header field _scale = %g is not a finite positive number", s);
          return NULL;
        }
      info->scale = s;
    }
  else if (info->precision != RLX_PRECISION_F32)
    {
      g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_BAD_SCALE,
                   "header has _fmt = %s but no _scale", rlx_precision_to_string (info->precision));
      return NULL;
    }

  plen = size - 4 - hlen;
  esize = rlx_precision_element_size (info->precision);
  if (!info->has_values && plen != 0)
    {
      g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_BAD_PAYLOAD,
                   "%" G_GSIZE_FORMAT " payload bytes but the header names no array (_f32)", plen);
      return NULL;
    }
  if (plen % esize != 0)
    {
      g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_BAD_PAYLOAD,
                   "payload of %" G_GSIZE_FORMAT " bytes is not a whole number of %s elements "
                   "(%" G_GSIZE_FORMAT " bytes each)", plen,
                   rlx_precision_to_string (info->precision), esize);
      return NULL;
    }
  info->n = plen / esize;
  *payload_out = data + 4 + hlen;
  return json_object_ref (obj);
}

static JsonObject *
strip_reserved (JsonObject *obj)
{
  json_object_remove_member (obj, "_f32");
  json_object_remove_member (obj, "_fmt");
  json_object_remove_member (obj, "_scale");
  return obj;
}

gboolean
rlx_wire_decode_full (GBytes *frame, const RlxWireLimits *limits, RlxWireInfo *info_out,
                      JsonObject **header_out, float **values_out, GError **error)
{
  RlxWireInfo info;
  const guint8 *payload = NULL;
  g_autoptr(JsonObject) obj = NULL;

  g_return_val_if_fail (frame != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (header_out)
    *header_out = NULL;
  if (values_out)
    *values_out = NULL;
  obj = parse_frame (frame, limits, &info, &payload, error);
  if (obj == NULL)
    {
      if (info_out)
        memset (info_out, 0, sizeof *info_out);
      return FALSE;
    }
  if (values_out && info.n > 0)
    {
      float *v = g_malloc (info.n * sizeof (float));
      rlx_wire_dequantize (payload, info.n, info.precision, info.scale, v);
      *values_out = v;
    }
  if (header_out)
    *header_out = strip_reserved (g_steal_pointer (&obj));
  if (info_out)
    *info_out = info;
  return TRUE;
}

gboolean
rlx_wire_decode (GBytes *frame, const RlxWireLimits *limits, JsonObject **header_out,
                 float **values_out, gsize *n_out, GError **error)
{
  RlxWireInfo info;

  if (n_out)
    *n_out = 0;
  if (!rlx_wire_decode_full (frame, limits, &info, header_out, values_out, error))
    return FALSE;
  if (n_out)
    *n_out = info.n;
  return TRUE;
}

gboolean
rlx_wire_decode_into (GBytes *frame, const RlxWireLimits *limits, RlxWireInfo *info_out,
                      JsonObject **header_out, float *dst, gsize n, GError **error)
{
  RlxWireInfo info;
  const guint8 *payload = NULL;
  g_autoptr(JsonObject) obj = NULL;

  g_return_val_if_fail (frame != NULL, FALSE);
  g_return_val_if_fail (dst != NULL || n == 0, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (header_out)
    *header_out = NULL;
  if (info_out)
    memset (info_out, 0, sizeof *info_out);
  obj = parse_frame (frame, limits, &info, &payload, error);
  if (obj == NULL)
    return FALSE;
  if (!info.has_values)
    {
      g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_BAD_PAYLOAD,
                   "frame carries no float array, expected %" G_GSIZE_FORMAT " elements", n);
      return FALSE;
    }
  if (info.n != n)
    {
      g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_BAD_PAYLOAD,
                   "array \"%s\" has %" G_GSIZE_FORMAT " elements, expected %" G_GSIZE_FORMAT,
                   info.field, info.n, n);
      return FALSE;
    }
  rlx_wire_dequantize (payload, info.n, info.precision, info.scale, dst);
  if (header_out)
    *header_out = strip_reserved (g_steal_pointer (&obj));
  if (info_out)
    *info_out = info;
  return TRUE;
}

JsonObject *
rlx_wire_header_parse (const char *json, gssize len, GError **error)
{
  g_autoptr(JsonNode) root = NULL;
  gsize n;

  g_return_val_if_fail (json != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  n = len < 0 ? strlen (json) : (gsize) len;
  root = rlx_wire_json_parse (json, n, RLX_WIRE_DEFAULT_MAX_DEPTH, error);
  if (root == NULL)
    return NULL;
  if (!JSON_NODE_HOLDS_OBJECT (root))
    {
      g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_BAD_HEADER,
                   "header JSON is not an object");
      return NULL;
    }
  return json_object_ref (json_node_get_object (root));
}

char *
rlx_wire_header_to_json (JsonObject *header, GError **error)
{
  g_autoptr(JsonNode) node = NULL;
  g_autoptr(GString) out = g_string_new (NULL);

  g_return_val_if_fail (header != NULL, NULL);

  node = json_node_init_object (json_node_alloc (), header);
  if (!rlx_wire_json_write (out, node, RLX_WIRE_DEFAULT_MAX_DEPTH, error))
    return NULL;
  return g_string_free (g_steal_pointer (&out), FALSE);
}

/* ── error feedback ─────────────────────────────────────────────────────── */

struct _RlxWireFeedback {
  gsize  n;
  float *residual;
  float *scratch;   /* s = x + residual while a frame is being made */
};

RlxWireFeedback *
rlx_wire_feedback_new (gsize n)
{
  RlxWireFeedback *fb = g_new0 (RlxWireFeedback, 1);

  fb->n = n;
  fb->residual = g_new0 (float, MAX (n, 1));
  return fb;
}

void
rlx_wire_feedback_free (RlxWireFeedback *fb)
{
  if (fb == NULL)
    return;
  g_free (fb->residual);
  g_free (fb->scratch);
  g_free (fb);
}

gsize
rlx_wire_feedback_size (RlxWireFeedback *fb)
{
  g_return_val_if_fail (fb != NULL, 0);
  return fb->n;
}

void
rlx_wire_feedback_reset (RlxWireFeedback *fb)
{
  g_return_if_fail (fb != NULL);
  memset (fb->residual, 0, fb->n * sizeof (float));
}

const float *
rlx_wire_feedback_residual (RlxWireFeedback *fb)
{
  g_return_val_if_fail (fb != NULL, NULL);
  return fb->residual;
}

static double
wire_feedback_apply_exact (RlxWireFeedback *fb, const float *x, float *out, gsize n, RlxPrecision p)
{
  double scale;

  g_return_val_if_fail (fb != NULL, 1.0);
  g_return_val_if_fail (n == fb->n, 1.0);
  g_return_val_if_fail (precision_valid (p), 1.0);
  g_return_val_if_fail ((x != NULL && out != NULL) || n == 0, 1.0);

  if (n == 0)
    return 1.0;
  if (p == RLX_PRECISION_F32)
    {
      for (gsize i = 0; i < n; i++)
        out[i] = x[i] + fb->residual[i];
      memset (fb->residual, 0, n * sizeof (float));
      return 1.0;
    }
  /* Pass 1: residual := x + residual, and its largest finite magnitude. */
  scale = scale_from_maxabs (rlx_wire_kernels ()->add_maxabs (x, fb->residual, fb->residual, n), p);
  /* Pass 2: out = wire (residual); residual := residual − out. */
  quant_dequant_blocks (fb->residual, out, fb->residual, n, p, scale);
  return scale;
}

/* in the exact mode, whatever the calling thread's (rlx-fp-mode.h) */
double
rlx_wire_feedback_apply (RlxWireFeedback *fb, const float *x, float *out, gsize n, RlxPrecision p)
{
  RlxFpScope fp = rlx_fp_scope_begin_exact ();
  double ret;

  ret = wire_feedback_apply_exact (fb, x, out, n, p);
  rlx_fp_scope_end (fp);
  return ret;
}

GBytes *
rlx_wire_feedback_encode (RlxWireFeedback *fb, JsonObject *header, const float *x, gsize n,
                          RlxPrecision p, const char *field, float *dequantised_out,
                          GError **error)
{
  GBytes *frame;
  double scale = 1.0;

  g_return_val_if_fail (fb != NULL, NULL);
  g_return_val_if_fail (precision_valid (p), NULL);
  g_return_val_if_fail (x != NULL || n == 0, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (n != fb->n)
    {
      g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_INVALID_ARGUMENT,
                   "error feedback holds %" G_GSIZE_FORMAT " elements, the array has %"
                   G_GSIZE_FORMAT, fb->n, n);
      return NULL;
    }
  if (fb->scratch == NULL)
    fb->scratch = g_new (float, MAX (n, 1));
  /* s = x + residual (into scratch), fused with the max-abs pass. */
  if (n > 0)
    {
      float m = rlx_wire_kernels ()->add_maxabs (x, fb->residual, fb->scratch, n);
      if (p != RLX_PRECISION_F32)
        scale = scale_from_maxabs (m, p);
    }

  /* encode_frame turns scratch (s) into the new residual s − dequantised. */
  frame = encode_frame (header, fb->scratch, n, p, field, scale, TRUE,
                        fb->scratch, dequantised_out, error);
  if (frame == NULL)
    return NULL;
  {
    float *t = fb->residual;
    fb->residual = fb->scratch;
    fb->scratch = t;
  }
  return frame;
}
