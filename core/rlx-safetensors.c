/* rlx-safetensors.c — see rlx-safetensors.h */
#include "rlx-config.h"
#include "rlx-safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <gio/gio.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <string.h>
#include <unistd.h>

G_DEFINE_QUARK (rlx-safetensors-error-quark, rlx_safetensors_error)

/* A header larger than this is not one of ours (ours are well under 1 KiB). */
#define MAX_HEADER_LEN (1u << 20)

GBytes *
rlx_safetensors_build (const RlxModel *model, const float *params,
                       GHashTable *metadata)
{
  g_autoptr(JsonBuilder) b = json_builder_new ();
  g_autoptr(JsonGenerator) gen = json_generator_new ();
  g_autoptr(JsonNode) root = NULL;
  g_autofree char *json = NULL;
  gsize json_len, hlen, data_len;
  guint8 *buf;
  guint64 hlen_le;

  g_return_val_if_fail (model != NULL && params != NULL, NULL);

  json_builder_begin_object (b);
  if (metadata != NULL && g_hash_table_size (metadata) > 0)
    {
      g_autoptr(GList) keys = g_list_sort (g_hash_table_get_keys (metadata),
                                           (GCompareFunc) strcmp);
      json_builder_set_member_name (b, "__metadata__");
      json_builder_begin_object (b);
      for (GList *l = keys; l; l = l->next)
        {
          json_builder_set_member_name (b, l->data);
          json_builder_add_string_value (b, g_hash_table_lookup (metadata, l->data));
        }
      json_builder_end_object (b);
    }
  for (guint t = 0; t < model->n_tensors; t++)
    {
      const RlxTensorInfo *ti = &model->tensors[t];

      json_builder_set_member_name (b, ti->name);
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "dtype");
      json_builder_add_string_value (b, "F32");
      json_builder_set_member_name (b, "shape");
      json_builder_begin_array (b);
      for (guint d = 0; d < ti->rank; d++)
        json_builder_add_int_value (b, ti->shape[d]);
      json_builder_end_array (b);
      json_builder_set_member_name (b, "data_offsets");
      json_builder_begin_array (b);
      json_builder_add_int_value (b, (gint64) (ti->offset * 4));
      json_builder_add_int_value (b, (gint64) ((ti->offset + ti->numel) * 4));
      json_builder_end_array (b);
      json_builder_end_object (b);
    }
  json_builder_end_object (b);

  root = json_builder_get_root (b);
  json_generator_set_root (gen, root);
  json = json_generator_to_data (gen, &json_len);

  /* Pad with spaces so the data starts 8-aligned. */
  hlen = (json_len + 7) & ~(gsize) 7;
  data_len = model->n_params * sizeof (float);
  buf = g_malloc (8 + hlen + data_len);
  hlen_le = GUINT64_TO_LE ((guint64) hlen);
  memcpy (buf, &hlen_le, 8);
  memcpy (buf + 8, json, json_len);
  memset (buf + 8 + json_len, ' ', hlen - json_len);
#if G_BYTE_ORDER == G_LITTLE_ENDIAN
  memcpy (buf + 8 + hlen, params, data_len);
#else
  for (gsize i = 0; i < model->n_params; i++)
    {
      guint32 v;
      memcpy (&v, &params[i], 4);
      v = GUINT32_TO_LE (v);
      memcpy (buf + 8 + hlen + 4 * i, &v, 4);
    }
#endif
  return g_bytes_new_take (buf, 8 + hlen + data_len);
}

static gboolean
fsync_dir (const char *path, GError **error)
{
  g_autofree char *dir = g_path_get_dirname (path);
  int fd = open (dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

  if (fd < 0 || fsync (fd) < 0)
    {
      int e = errno;
      if (fd >= 0)
        close (fd);
      g_set_error (error, RLX_SAFETENSORS_ERROR, RLX_SAFETENSORS_ERROR_IO,
                   "could not sync directory %s: %s", dir, g_strerror (e));
      return FALSE;
    }
  close (fd);
  return TRUE;
}

gboolean
rlx_safetensors_write (const char *path, const RlxModel *model,
                       const float *params, GHashTable *metadata,
                       GError **error)
{
  g_autoptr(GBytes) bytes = NULL;
  g_autoptr(GError) local = NULL;
  gsize len;
  const char *data;

  g_return_val_if_fail (path != NULL && model != NULL && params != NULL, FALSE);

  bytes = rlx_safetensors_build (model, params, metadata);
  data = g_bytes_get_data (bytes, &len);
  /* DURABLE|CONSISTENT: write a temporary file beside @path, fsync it, and
   * rename it over @path. */
  if (!g_file_set_contents_full (path, data, (gssize) len,
                                 G_FILE_SET_CONTENTS_CONSISTENT |
                                 G_FILE_SET_CONTENTS_DURABLE,
                                 0600, &local))
    {
      g_set_error (error, RLX_SAFETENSORS_ERROR, RLX_SAFETENSORS_ERROR_IO,
                   "could not write %s: %s", path, local->message);
      return FALSE;
    }
  /* And the rename itself is durable once the directory is synced. */
  return fsync_dir (path, error);
}

typedef struct {
  char           *path;
  const RlxModel *model;
  float          *params;
  GHashTable     *metadata;
} WriteJob;

static void
write_job_free (WriteJob *job)
{
  g_free (job->path);
  g_free (job->params);
  g_clear_pointer (&job->metadata, g_hash_table_unref);
  g_free (job);
}

static void
write_thread (GTask *task, gpointer source, gpointer task_data, GCancellable *cancellable)
{
  WriteJob *job = task_data;
  GError *error = NULL;

  if (rlx_safetensors_write (job->path, job->model, job->params, job->metadata, &error))
    g_task_return_boolean (task, TRUE);
  else
    g_task_return_error (task, error);
}

void
rlx_safetensors_write_async (const char *path, const RlxModel *model,
                             const float *params, GHashTable *metadata,
                             GCancellable *cancellable,
                             GAsyncReadyCallback callback, gpointer user_data)
{
  g_autoptr(GTask) task = NULL;
  WriteJob *job;

  g_return_if_fail (path != NULL && model != NULL && params != NULL);

  job = g_new0 (WriteJob, 1);
  job->path = g_strdup (path);
  job->model = model;
  job->params = g_memdup2 (params, model->n_params * sizeof (float));
  job->metadata = metadata ? g_hash_table_ref (metadata) : NULL;
  task = g_task_new (NULL, cancellable, callback, user_data);
  g_task_set_source_tag (task, rlx_safetensors_write_async);
  g_task_set_task_data (task, job, (GDestroyNotify) write_job_free);
  g_task_run_in_thread (task, write_thread);
}

gboolean
rlx_safetensors_write_finish (GAsyncResult *result, GError **error)
{
  g_return_val_if_fail (g_task_is_valid (result, NULL), FALSE);
  return g_task_propagate_boolean (G_TASK (result), error);
}

/* ---- reading ------------------------------------------------------------ */

static gboolean G_GNUC_PRINTF (2, 3)
corrupt (GError **error, const char *fmt, ...)
{
  va_list ap;
  g_autofree char *msg = NULL;

  va_start (ap, fmt);
  msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  g_set_error (error, RLX_SAFETENSORS_ERROR, RLX_SAFETENSORS_ERROR_CORRUPT,
               "not a valid safetensors file: %s", msg);
  return FALSE;
}

/* Parse the 8-byte length and the JSON header at @data. */
static JsonObject *
parse_header (const guint8 *data, gsize len, gsize *data_start, GError **error)
{
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(GError) local = NULL;
  guint64 hlen;
  JsonNode *root;

  if (len < 8)
    {
      corrupt (error, "%zu bytes is shorter than the 8-byte header length", len);
      return NULL;
    }
  memcpy (&hlen, data, 8);
  hlen = GUINT64_FROM_LE (hlen);
  if (hlen == 0 || hlen > MAX_HEADER_LEN || hlen > len - 8)
    {
      corrupt (error, "header length %" G_GUINT64_FORMAT " does not fit the file (%zu bytes)",
               hlen, len);
      return NULL;
    }
  if (!g_utf8_validate ((const char *) data + 8, (gssize) hlen, NULL))
    {
      corrupt (error, "header is not UTF-8");
      return NULL;
    }
  if (!json_parser_load_from_data (parser, (const char *) data + 8, (gssize) hlen, &local))
    {
      corrupt (error, "header is not JSON (%s)", local->message);
      return NULL;
    }
  root = json_parser_get_root (parser);
  if (root == NULL || !JSON_NODE_HOLDS_OBJECT (root))
    {
      corrupt (error, "header is not a JSON object");
      return NULL;
    }
  *data_start = 8 + (gsize) hlen;
  return json_object_ref (json_node_get_object (root));
}

static GHashTable *
header_metadata (JsonObject *header, GError **error)
{
  g_autoptr(GHashTable) md = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  JsonNode *node = json_object_get_member (header, "__metadata__");
  JsonObjectIter iter;
  const char *key;
  JsonNode *value;

  if (node == NULL)
    return g_steal_pointer (&md);
  if (!JSON_NODE_HOLDS_OBJECT (node))
    {
      corrupt (error, "__metadata__ is not an object");
      return NULL;
    }
  json_object_iter_init (&iter, json_node_get_object (node));
  while (json_object_iter_next (&iter, &key, &value))
    {
      if (!JSON_NODE_HOLDS_VALUE (value) || json_node_get_value_type (value) != G_TYPE_STRING)
        {
          corrupt (error, "__metadata__ value of '%s' is not a string", key);
          return NULL;
        }
      g_hash_table_insert (md, g_strdup (key), g_strdup (json_node_get_string (value)));
    }
  return g_steal_pointer (&md);
}

static gboolean
get_uint (JsonNode *node, guint64 *out)
{
  if (node == NULL || !JSON_NODE_HOLDS_VALUE (node) ||
      json_node_get_value_type (node) != G_TYPE_INT64 ||
      json_node_get_int (node) < 0)
    return FALSE;
  *out = (guint64) json_node_get_int (node);
  return TRUE;
}

float *
rlx_safetensors_parse (const guint8 *data, gsize len, const RlxModel *model,
                       GHashTable **metadata_out, GError **error)
{
  g_autoptr(JsonObject) header = NULL;
  g_autoptr(GHashTable) md = NULL;
  g_autofree float *params = NULL;
  gsize start, data_len, covered = 0;
  guint n_entries = 0;
  JsonObjectIter iter;
  const char *key;
  JsonNode *value;

  g_return_val_if_fail (data != NULL || len == 0, NULL);
  g_return_val_if_fail (model != NULL, NULL);

  header = parse_header (data, len, &start, error);
  if (header == NULL)
    return NULL;
  md = header_metadata (header, error);
  if (md == NULL)
    return NULL;
  data_len = len - start;

  json_object_iter_init (&iter, header);
  while (json_object_iter_next (&iter, &key, &value))
    if (strcmp (key, "__metadata__") != 0)
      n_entries++;
  if (n_entries != model->n_tensors)
    {
      g_set_error (error, RLX_SAFETENSORS_ERROR, RLX_SAFETENSORS_ERROR_MISMATCH,
                   "the file holds %u tensors, %s has %u", n_entries, model->slug,
                   model->n_tensors);
      return NULL;
    }

  params = g_new (float, model->n_params);
  for (guint t = 0; t < model->n_tensors; t++)
    {
      const RlxTensorInfo *ti = &model->tensors[t];
      JsonNode *tn = json_object_get_member (header, ti->name);
      JsonObject *to;
      JsonNode *dtype, *shape, *offs;
      JsonArray *sa, *oa;
      guint64 begin, end;

      if (tn == NULL)
        {
          g_set_error (error, RLX_SAFETENSORS_ERROR, RLX_SAFETENSORS_ERROR_MISMATCH,
                       "tensor '%s' of %s is missing from the file", ti->name, model->slug);
          return NULL;
        }
      if (!JSON_NODE_HOLDS_OBJECT (tn))
        {
          corrupt (error, "entry '%s' is not an object", ti->name);
          return NULL;
        }
      to = json_node_get_object (tn);
      dtype = json_object_get_member (to, "dtype");
      shape = json_object_get_member (to, "shape");
      offs = json_object_get_member (to, "data_offsets");
      if (dtype == NULL || !JSON_NODE_HOLDS_VALUE (dtype) ||
          json_node_get_value_type (dtype) != G_TYPE_STRING ||
          shape == NULL || !JSON_NODE_HOLDS_ARRAY (shape) ||
          offs == NULL || !JSON_NODE_HOLDS_ARRAY (offs))
        {
          corrupt (error, "entry '%s' lacks dtype, shape or data_offsets", ti->name);
          return NULL;
        }
      if (strcmp (json_node_get_string (dtype), "F32") != 0)
        {
          g_set_error (error, RLX_SAFETENSORS_ERROR, RLX_SAFETENSORS_ERROR_MISMATCH,
                       "tensor '%s' is %s, expected F32", ti->name,
                       json_node_get_string (dtype));
          return NULL;
        }
      sa = json_node_get_array (shape);
      if (json_array_get_length (sa) != ti->rank)
        {
          g_set_error (error, RLX_SAFETENSORS_ERROR, RLX_SAFETENSORS_ERROR_MISMATCH,
                       "tensor '%s' has %u dimensions, expected %u", ti->name,
                       json_array_get_length (sa), ti->rank);
          return NULL;
        }
      for (guint d = 0; d < ti->rank; d++)
        {
          guint64 dim;
          if (!get_uint (json_array_get_element (sa, d), &dim) || dim != ti->shape[d])
            {
              g_set_error (error, RLX_SAFETENSORS_ERROR, RLX_SAFETENSORS_ERROR_MISMATCH,
                           "tensor '%s' dimension %u does not match %s (expected %u)",
                           ti->name, d, model->slug, ti->shape[d]);
              return NULL;
            }
        }
      oa = json_node_get_array (offs);
      if (json_array_get_length (oa) != 2 ||
          !get_uint (json_array_get_element (oa, 0), &begin) ||
          !get_uint (json_array_get_element (oa, 1), &end) ||
          begin > end || end > data_len || end - begin != ti->numel * 4 || begin % 4 != 0)
        {
          corrupt (error, "data_offsets of '%s' are outside the data or of the wrong size",
                   ti->name);
          return NULL;
        }
#if G_BYTE_ORDER == G_LITTLE_ENDIAN
      memcpy (params + ti->offset, data + start + begin, ti->numel * 4);
#else
      for (gsize i = 0; i < ti->numel; i++)
        {
          guint32 v;
          memcpy (&v, data + start + begin + 4 * i, 4);
          v = GUINT32_FROM_LE (v);
          memcpy (&params[ti->offset + i], &v, 4);
        }
#endif
      covered += ti->numel * 4;
    }
  if (covered != data_len)
    {
      corrupt (error, "%zu data bytes, the tensors cover %zu", data_len, covered);
      return NULL;
    }
  if (metadata_out)
    *metadata_out = g_steal_pointer (&md);
  return g_steal_pointer (&params);
}

static gboolean
load_file (const char *path, gsize max_len, char **contents, gsize *len, GError **error)
{
  g_autoptr(GError) local = NULL;
  GStatBuf st;

  if (g_stat (path, &st) != 0)
    {
      int e = errno;
      g_set_error (error, RLX_SAFETENSORS_ERROR,
                   e == ENOENT ? RLX_SAFETENSORS_ERROR_NOT_FOUND : RLX_SAFETENSORS_ERROR_IO,
                   "could not open %s: %s", path, g_strerror (e));
      return FALSE;
    }
  if ((guint64) st.st_size > max_len)
    {
      corrupt (error, "%s is %" G_GUINT64_FORMAT " bytes, more than expected",
               path, (guint64) st.st_size);
      return FALSE;
    }
  if (!g_file_get_contents (path, contents, len, &local))
    {
      g_set_error (error, RLX_SAFETENSORS_ERROR, RLX_SAFETENSORS_ERROR_IO,
                   "could not read %s: %s", path, local->message);
      return FALSE;
    }
  return TRUE;
}

float *
rlx_safetensors_read (const char *path, const RlxModel *model,
                      GHashTable **metadata_out, GError **error)
{
  g_autofree char *contents = NULL;
  gsize len;
  float *params;

  g_return_val_if_fail (path != NULL && model != NULL, NULL);

  if (!load_file (path, 8 + MAX_HEADER_LEN + model->n_params * 4, &contents, &len, error))
    return NULL;
  params = rlx_safetensors_parse ((const guint8 *) contents, len, model, metadata_out, error);
  if (params == NULL)
    g_prefix_error (error, "%s: ", path);
  return params;
}

GHashTable *
rlx_safetensors_read_metadata (const char *path, GError **error)
{
  g_autoptr(GFile) file = NULL;
  g_autoptr(GFileInputStream) in = NULL;
  g_autoptr(GError) local = NULL;
  g_autoptr(JsonObject) header = NULL;
  g_autofree guint8 *buf = NULL;
  guint8 len8[8];
  guint64 hlen;
  gsize got, start;

  g_return_val_if_fail (path != NULL, NULL);

  file = g_file_new_for_path (path);
  in = g_file_read (file, NULL, &local);
  if (in == NULL)
    {
      g_set_error (error, RLX_SAFETENSORS_ERROR,
                   g_error_matches (local, G_IO_ERROR, G_IO_ERROR_NOT_FOUND)
                     ? RLX_SAFETENSORS_ERROR_NOT_FOUND : RLX_SAFETENSORS_ERROR_IO,
                   "could not open %s: %s", path, local->message);
      return NULL;
    }
  if (!g_input_stream_read_all (G_INPUT_STREAM (in), len8, 8, &got, NULL, &local) || got != 8)
    {
      corrupt (error, "%s is shorter than the 8-byte header length", path);
      return NULL;
    }
  memcpy (&hlen, len8, 8);
  hlen = GUINT64_FROM_LE (hlen);
  if (hlen == 0 || hlen > MAX_HEADER_LEN)
    {
      corrupt (error, "%s: header length %" G_GUINT64_FORMAT " is out of range", path, hlen);
      return NULL;
    }
  buf = g_malloc (8 + hlen);
  memcpy (buf, len8, 8);
  if (!g_input_stream_read_all (G_INPUT_STREAM (in), buf + 8, hlen, &got, NULL, &local) ||
      got != hlen)
    {
      corrupt (error, "%s: the header is truncated", path);
      return NULL;
    }
  header = parse_header (buf, 8 + hlen, &start, error);
  if (header == NULL)
    return NULL;
  return header_metadata (header, error);
}
