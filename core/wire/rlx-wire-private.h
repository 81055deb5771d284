/* rlx-wire-private.h — internals shared by the files of core/wire */
#pragma once

#include "core/wire/rlx-wire.h"
#include "core/wire/rlx-wire-kernels.h"

G_BEGIN_DECLS

/* JSON (rlx-wire-json.c): a strict RFC 8259 parser that builds json-glib
 * nodes, and a generator whose bytes match JavaScript's JSON.stringify. */
JsonNode *rlx_wire_json_parse (const char *data, gsize len, guint max_depth,
                               GError **error);
/* Appends @node; FALSE (with RLX_WIRE_ERROR_INVALID_ARGUMENT) when a node is
 * of a kind JSON cannot hold or nests deeper than @max_depth. */
gboolean  rlx_wire_json_write (GString *out, JsonNode *node, guint max_depth,
                               GError **error);
void      rlx_wire_json_write_double (GString *out, double v);
void      rlx_wire_json_write_string (GString *out, const char *s);

G_END_DECLS
