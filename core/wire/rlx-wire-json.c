/* rlx-wire-json.c — the header's JSON: a strict parser and a generator
 *
 * json-glib 1.6's own parser is lenient where a wire decoder must not be (it
 * takes single-quoted strings, comments, leading zeros, "\u0000", silently
 * wraps integers past 2^63) and its generator writes "1e-300.0" for some
 * doubles. So the header is parsed here (RFC 8259, bounded depth, UTF-8
 * checked) into json-glib nodes, and written back the way JavaScript's
 * JSON.stringify writes it — which makes frames byte-identical to the seed's.
 */
#include "rlx-config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/wire/rlx-wire-private.h"

typedef struct {
  const guchar *start;
  const guchar *p;
  const guchar *end;
  guint         depth;
  guint         max_depth;
  GError      **error;
} Parser;

static gboolean G_GNUC_PRINTF (2, 3)
fail (Parser *ps, const char *fmt, ...)
{
  va_list ap;
  g_autofree char *msg = NULL;

  va_start (ap, fmt);
  msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  if (ps->error != NULL && *ps->error == NULL)
    g_set_error (ps->error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_BAD_HEADER,
                 "header JSON, byte %" G_GSIZE_FORMAT ": %s",
                 (gsize) (ps->p - ps->start), msg);
  return FALSE;
}

static const char *
describe_byte (const guchar *p, const guchar *end, char buf[16])
{
  if (p >= end)
    return "the end of the header";
  if (*p >= 0x20 && *p < 0x7f)
    g_snprintf (buf, 16, "'%c'", *p);
  else
    g_snprintf (buf, 16, "byte 0x%02x", *p);
  return buf;
}

static void
skip_ws (Parser *ps)
{
  while (ps->p < ps->end &&
         (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
    ps->p++;
}

static JsonNode *parse_value (Parser *ps);

static int
hex4 (const guchar *p)
{
  int v = 0;

  for (int i = 0; i < 4; i++)
    {
      int c = p[i], d;
      if (c >= '0' && c <= '9')
        d = c - '0';
      else if (c >= 'a' && c <= 'f')
        d = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        d = c - 'A' + 10;
      else
        return -1;
      v = v * 16 + d;
    }
  return v;
}

/* At the opening quote; returns a newly allocated UTF-8 string. */
static char *
parse_string (Parser *ps)
{
  g_autoptr(GString) s = g_string_new (NULL);
  const guchar *open = ps->p;

  ps->p++;
  for (;;)
    {
      const guchar *run = ps->p;

      while (ps->p < ps->end && *ps->p != '"' && *ps->p != '\\' && *ps->p >= 0x20)
        ps->p++;
      g_string_append_len (s, (const char *) run, ps->p - run);
      if (ps->p >= ps->end)
        {
          ps->p = open;
          fail (ps, "string never closed (missing '\"')");
          return NULL;
        }
      if (*ps->p == '"')
        {
          ps->p++;
          break;
        }
      if (*ps->p < 0x20)
        {
          fail (ps, "control byte 0x%02x inside a string (must be escaped)", *ps->p);
          return NULL;
        }
      /* backslash */
      if (ps->end - ps->p < 2)
        {
          fail (ps, "escape at the end of the header");
          return NULL;
        }
      switch (ps->p[1])
        {
        case '"': g_string_append_c (s, '"'); ps->p += 2; break;
        case '\\': g_string_append_c (s, '\\'); ps->p += 2; break;
        case '/': g_string_append_c (s, '/'); ps->p += 2; break;
        case 'b': g_string_append_c (s, '\b'); ps->p += 2; break;
        case 'f': g_string_append_c (s, '\f'); ps->p += 2; break;
        case 'n': g_string_append_c (s, '\n'); ps->p += 2; break;
        case 'r': g_string_append_c (s, '\r'); ps->p += 2; break;
        case 't': g_string_append_c (s, '\t'); ps->p += 2; break;
        case 'u':
          {
            int u, lo;
            gunichar c;

            if (ps->end - ps->p < 6 || (u = hex4 (ps->p + 2)) < 0)
              {
                fail (ps, "\\u must be followed by 4 hex digits");
                return NULL;
              }
            if (u == 0)
              {
                fail (ps, "\\u0000 (a NUL character) is not allowed in a header string");
                return NULL;
              }
            if (u >= 0xdc00 && u <= 0xdfff)
              {
                fail (ps, "lone low surrogate \\u%04x", (guint) u);
                return NULL;
              }
            if (u >= 0xd800 && u <= 0xdbff)
              {
                if (ps->end - ps->p < 12 || ps->p[6] != '\\' || ps->p[7] != 'u' ||
                    (lo = hex4 (ps->p + 8)) < 0xdc00 || lo > 0xdfff)
                  {
                    fail (ps, "high surrogate \\u%04x not followed by a low one", (guint) u);
                    return NULL;
                  }
                c = 0x10000 + (((gunichar) u - 0xd800) << 10) + ((gunichar) lo - 0xdc00);
                ps->p += 12;
              }
            else
              {
                c = (gunichar) u;
                ps->p += 6;
              }
            g_string_append_unichar (s, c);
          }
          break;
        default:
          fail (ps, "unknown escape '\\%c'", ps->p[1] >= 0x20 && ps->p[1] < 0x7f ? ps->p[1] : '?');
          return NULL;
        }
    }
  if (!g_utf8_validate_len (s->str, s->len, NULL))
    {
      ps->p = open;
      fail (ps, "string is not valid UTF-8");
      return NULL;
    }
  return g_string_free (g_steal_pointer (&s), FALSE);
}

static JsonNode *
parse_number (Parser *ps)
{
  const guchar *begin = ps->p;
  gboolean integral = TRUE;
  gsize digits = 0;
  g_autofree char *tok = NULL;
  JsonNode *node;

  if (*ps->p == '-')
    ps->p++;
  if (ps->p >= ps->end || !g_ascii_isdigit (*ps->p))
    {
      fail (ps, "'-' must be followed by a digit");
      return NULL;
    }
  if (*ps->p == '0')
    {
      ps->p++;
      digits = 1;
      if (ps->p < ps->end && g_ascii_isdigit (*ps->p))
        {
          fail (ps, "numbers must not have leading zeros");
          return NULL;
        }
    }
  else
    while (ps->p < ps->end && g_ascii_isdigit (*ps->p))
      ps->p++, digits++;
  if (ps->p < ps->end && *ps->p == '.')
    {
      integral = FALSE;
      ps->p++;
      if (ps->p >= ps->end || !g_ascii_isdigit (*ps->p))
        {
          fail (ps, "'.' must be followed by a digit");
          return NULL;
        }
      while (ps->p < ps->end && g_ascii_isdigit (*ps->p))
        ps->p++;
    }
  if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E'))
    {
      integral = FALSE;
      ps->p++;
      if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-'))
        ps->p++;
      if (ps->p >= ps->end || !g_ascii_isdigit (*ps->p))
        {
          fail (ps, "exponent must have digits");
          return NULL;
        }
      while (ps->p < ps->end && g_ascii_isdigit (*ps->p))
        ps->p++;
    }

  tok = g_strndup ((const char *) begin, ps->p - begin);
  node = json_node_alloc ();
  if (integral && digits <= 18)
    json_node_init_int (node, g_ascii_strtoll (tok, NULL, 10));
  else
    {
      double v = g_ascii_strtod (tok, NULL);
      if (!isfinite (v))
        {
          json_node_unref (node);
          ps->p = begin;
          fail (ps, "number %.40s is out of range", tok);
          return NULL;
        }
      json_node_init_double (node, v);
    }
  return node;
}

static gboolean
parse_literal (Parser *ps, const char *word)
{
  gsize len = strlen (word);

  if ((gsize) (ps->end - ps->p) < len || memcmp (ps->p, word, len) != 0)
    {
      char b[16];
      return fail (ps, "unexpected %s, expected a value", describe_byte (ps->p, ps->end, b));
    }
  ps->p += len;
  return TRUE;
}

static JsonNode *
parse_object (Parser *ps)
{
  g_autoptr(JsonObject) obj = json_object_new ();
  char b[16];

  ps->p++; /* { */
  skip_ws (ps);
  if (ps->p < ps->end && *ps->p == '}')
    {
      ps->p++;
      return json_node_init_object (json_node_alloc (), obj);
    }
  for (;;)
    {
      g_autofree char *key = NULL;
      JsonNode *value;
      const guchar *key_at;

      skip_ws (ps);
      if (ps->p >= ps->end || *ps->p != '"')
        {
          fail (ps, "unexpected %s, expected a member name in double quotes",
                describe_byte (ps->p, ps->end, b));
          return NULL;
        }
      key_at = ps->p;
      if ((key = parse_string (ps)) == NULL)
        return NULL;
      if (json_object_has_member (obj, key))
        {
          ps->p = key_at;
          fail (ps, "member \"%.64s\" appears twice", key);
          return NULL;
        }
      skip_ws (ps);
      if (ps->p >= ps->end || *ps->p != ':')
        {
          fail (ps, "unexpected %s, expected ':'", describe_byte (ps->p, ps->end, b));
          return NULL;
        }
      ps->p++;
      skip_ws (ps);
      if ((value = parse_value (ps)) == NULL)
        return NULL;
      json_object_set_member (obj, key, value);
      skip_ws (ps);
      if (ps->p < ps->end && *ps->p == ',')
        {
          ps->p++;
          continue;
        }
      if (ps->p < ps->end && *ps->p == '}')
        {
          ps->p++;
          return json_node_init_object (json_node_alloc (), obj);
        }
      fail (ps, "unexpected %s, expected ',' or '}'", describe_byte (ps->p, ps->end, b));
      return NULL;
    }
}

static JsonNode *
parse_array (Parser *ps)
{
  g_autoptr(JsonArray) arr = json_array_new ();
  char b[16];

  ps->p++; /* [ */
  skip_ws (ps);
  if (ps->p < ps->end && *ps->p == ']')
    {
      ps->p++;
      return json_node_init_array (json_node_alloc (), arr);
    }
  for (;;)
    {
      JsonNode *value;

      skip_ws (ps);
      if ((value = parse_value (ps)) == NULL)
        return NULL;
      json_array_add_element (arr, value);
      skip_ws (ps);
      if (ps->p < ps->end && *ps->p == ',')
        {
          ps->p++;
          continue;
        }
      if (ps->p < ps->end && *ps->p == ']')
        {
          ps->p++;
          return json_node_init_array (json_node_alloc (), arr);
        }
      fail (ps, "unexpected %s, expected ',' or ']'", describe_byte (ps->p, ps->end, b));
      return NULL;
    }
}

static JsonNode *
parse_value (Parser *ps)
{
  char b[16];
  JsonNode *node;

  if (ps->p >= ps->end)
    {
      fail (ps, "unexpected end of the header, expected a value");
      return NULL;
    }
  switch (*ps->p)
    {
    case '{':
    case '[':
      if (ps->depth >= ps->max_depth)
        {
          fail (ps, "nested deeper than %u levels", ps->max_depth);
          return NULL;
        }
      ps->depth++;
      node = *ps->p == '{' ? parse_object (ps) : parse_array (ps);
      ps->depth--;
      return node;
    case '"':
      {
        char *s = parse_string (ps);
        if (s == NULL)
          return NULL;
        node = json_node_init_string (json_node_alloc (), s);
        g_free (s);
        return node;
      }
    case 't':
      return parse_literal (ps, "true") ? json_node_init_boolean (json_node_alloc (), TRUE) : NULL;
    case 'f':
      return parse_literal (ps, "false") ? json_node_init_boolean (json_node_alloc (), FALSE) : NULL;
    case 'n':
      return parse_literal (ps, "null") ? json_node_init_null (json_node_alloc ()) : NULL;
    default:
      if (*ps->p == '-' || g_ascii_isdigit (*ps->p))
        return parse_number (ps);
      fail (ps, "unexpected %s, expected a value", describe_byte (ps->p, ps->end, b));
      return NULL;
    }
}

JsonNode *
rlx_wire_json_parse (const char *data, gsize len, guint max_depth, GError **error)
{
  Parser ps = {
    .start = (const guchar *) data,
    .p = (const guchar *) data,
    .end = (const guchar *) data + len,
    .max_depth = MIN (max_depth, 1000),
    .error = error,
  };
  JsonNode *node;
  char b[16];

  skip_ws (&ps);
  if (ps.p >= ps.end)
    {
      fail (&ps, "the header is empty (expected a JSON object)");
      return NULL;
    }
  if ((node = parse_value (&ps)) == NULL)
    return NULL;
  skip_ws (&ps);
  if (ps.p < ps.end)
    {
      json_node_unref (node);
      fail (&ps, "unexpected %s after the JSON value", describe_byte (ps.p, ps.end, b));
      return NULL;
    }
  return node;
}

/* ── generator ──────────────────────────────────────────────────────────── */

void
rlx_wire_json_write_string (GString *out, const char *s)
{
  static const char hex[] = "0123456789abcdef";

  g_string_append_c (out, '"');
  for (const guchar *p = (const guchar *) s; *p; p++)
    {
      switch (*p)
        {
        case '"': g_string_append (out, "\\\""); break;
        case '\\': g_string_append (out, "\\\\"); break;
        case '\b': g_string_append (out, "\\b"); break;
        case '\f': g_string_append (out, "\\f"); break;
        case '\n': g_string_append (out, "\\n"); break;
        case '\r': g_string_append (out, "\\r"); break;
        case '\t': g_string_append (out, "\\t"); break;
        default:
          if (*p < 0x20)
            {
              g_string_append (out, "\\u00");
              g_string_append_c (out, hex[*p >> 4]);
              g_string_append_c (out, hex[*p & 15]);
            }
          else
            g_string_append_c (out, (char) *p);
        }
    }
  g_string_append_c (out, '"');
}

/* Number::toString: the shortest digits that read back as @v, laid out the
 * way JavaScript lays them out (1e+21, 1e-7, 0.000001, 123456789012). Not
 * finite → null, as JSON.stringify does. */
void
rlx_wire_json_write_double (GString *out, double v)
{
  char buf[G_ASCII_DTOSTR_BUF_SIZE + 8];
  char digits[24];
  int k = 0, n = 0;

  if (!isfinite (v))
    {
      g_string_append (out, "null");
      return;
    }
  if (v == 0)
    {
      g_string_append_c (out, '0');
      return;
    }
  if (v < 0)
    {
      g_string_append_c (out, '-');
      v = -v;
    }
  for (int prec = 1; prec <= 17; prec++)
    {
      char fmt[8];
      const char *e;

      g_snprintf (fmt, sizeof fmt, "%%.%de", prec - 1);
      g_ascii_formatd (buf, sizeof buf, fmt, v);
      if (prec < 17 && g_ascii_strtod (buf, NULL) != v)
        continue;
      /* buf = d[.ddd]e±XX */
      k = 0;
      for (const char *c = buf; *c && *c != 'e'; c++)
        if (g_ascii_isdigit (*c))
          digits[k++] = *c;
      e = strchr (buf, 'e');
      n = (e ? atoi (e + 1) : 0) + 1;
      break;
    }
  while (k > 1 && digits[k - 1] == '0')
    k--;
  digits[k] = '\0';

  if (k <= n && n <= 21)
    {
      g_string_append (out, digits);
      for (int i = 0; i < n - k; i++)
        g_string_append_c (out, '0');
    }
  else if (0 < n && n <= 21)
    {
      g_string_append_len (out, digits, n);
      g_string_append_c (out, '.');
      g_string_append (out, digits + n);
    }
  else if (-6 < n && n <= 0)
    {
      g_string_append (out, "0.");
      for (int i = 0; i < -n; i++)
        g_string_append_c (out, '0');
      g_string_append (out, digits);
    }
  else
    {
      g_string_append_c (out, digits[0]);
      if (k > 1)
        {
          g_string_append_c (out, '.');
          g_string_append (out, digits + 1);
        }
      g_string_append_printf (out, "e%c%d", n - 1 >= 0 ? '+' : '-', ABS (n - 1));
    }
}

static gboolean
write_node (GString *out, JsonNode *node, guint depth, guint max_depth, GError **error)
{
  switch (json_node_get_node_type (node))
    {
    case JSON_NODE_NULL:
      g_string_append (out, "null");
      return TRUE;
    case JSON_NODE_VALUE:
      {
        GType t = json_node_get_value_type (node);
        if (t == G_TYPE_INT64)
          g_string_append_printf (out, "%" G_GINT64_FORMAT, json_node_get_int (node));
        else if (t == G_TYPE_DOUBLE)
          rlx_wire_json_write_double (out, json_node_get_double (node));
        else if (t == G_TYPE_BOOLEAN)
          g_string_append (out, json_node_get_boolean (node) ? "true" : "false");
        else if (t == G_TYPE_STRING)
          {
            const char *s = json_node_get_string (node);
            if (!g_utf8_validate (s ? s : "", -1, NULL))
              {
                g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_INVALID_ARGUMENT,
                             "header string is not valid UTF-8");
                return FALSE;
              }
            rlx_wire_json_write_string (out, s ? s : "");
          }
        else
          {
            g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_INVALID_ARGUMENT,
                         "header holds a %s value, which JSON cannot carry",
                         g_type_name (t));
            return FALSE;
          }
        return TRUE;
      }
    case JSON_NODE_ARRAY:
    case JSON_NODE_OBJECT:
      if (depth >= max_depth)
        {
          g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_INVALID_ARGUMENT,
                       "header nests deeper than %u levels", max_depth);
          return FALSE;
        }
      if (json_node_get_node_type (node) == JSON_NODE_ARRAY)
        {
          JsonArray *a = json_node_get_array (node);
          guint len = json_array_get_length (a);

          g_string_append_c (out, '[');
          for (guint i = 0; i < len; i++)
            {
              if (i)
                g_string_append_c (out, ',');
              if (!write_node (out, json_array_get_element (a, i), depth + 1, max_depth, error))
                return FALSE;
            }
          g_string_append_c (out, ']');
        }
      else
        {
          JsonObject *o = json_node_get_object (node);
          g_autoptr(GList) names = json_object_get_members (o);
          gboolean first = TRUE;

          g_string_append_c (out, '{');
          for (GList *l = names; l; l = l->next)
            {
              if (!first)
                g_string_append_c (out, ',');
              first = FALSE;
              rlx_wire_json_write_string (out, l->data);
              g_string_append_c (out, ':');
              if (!write_node (out, json_object_get_member (o, l->data), depth + 1, max_depth, error))
                return FALSE;
            }
          g_string_append_c (out, '}');
        }
      return TRUE;
    default:
      g_set_error (error, RLX_WIRE_ERROR, RLX_WIRE_ERROR_INVALID_ARGUMENT,
                   "header holds an unknown JSON node");
      return FALSE;
    }
}

gboolean
rlx_wire_json_write (GString *out, JsonNode *node, guint max_depth, GError **error)
{
  return write_node (out, node, 0, MIN (max_depth, 1000), error);
}
