/* rlx-roster.c — RlxRosterEntry and the roster model (see rlx-roster.h) */
#include "rlx-config.h"
#include "rlx-roster.h"

#include <string.h>

/* ── entries ────────────────────────────────────────────────────────────── */

struct _RlxRosterEntry {
  GObject  parent_instance;
  char    *node_id, *host, *backend, *device, *fallback, *precision, *state, *link;
  double   speed;
  guint    rank;
  guint64  bytes_tx, bytes_rx;
  gboolean is_leader, is_self;
};

G_DEFINE_FINAL_TYPE (RlxRosterEntry, rlx_roster_entry, G_TYPE_OBJECT)

enum {
  RE_PROP_0, RE_PROP_NODE_ID, RE_PROP_HOST, RE_PROP_BACKEND, RE_PROP_DEVICE,
  RE_PROP_FALLBACK, RE_PROP_PRECISION, RE_PROP_SPEED, RE_PROP_IS_LEADER,
  RE_PROP_IS_SELF, RE_PROP_RANK, RE_PROP_STATE, RE_PROP_BYTES_TX, RE_PROP_BYTES_RX, RE_PROP_LINK,
  RE_N_PROPS
};
static GParamSpec *re_props[RE_N_PROPS];

static void
rlx_roster_entry_finalize (GObject *object)
{
  RlxRosterEntry *self = RLX_ROSTER_ENTRY (object);

  g_free (self->node_id);
  g_free (self->host);
  g_free (self->backend);
  g_free (self->device);
  g_free (self->fallback);
  g_free (self->precision);
  g_free (self->state);
  g_free (self->link);
  G_OBJECT_CLASS (rlx_roster_entry_parent_class)->finalize (object);
}

static void
rlx_roster_entry_get_property (GObject *object, guint id, GValue *value, GParamSpec *pspec)
{
  RlxRosterEntry *self = RLX_ROSTER_ENTRY (object);

  switch (id)
    {
    case RE_PROP_NODE_ID: g_value_set_string (value, self->node_id); break;
    case RE_PROP_HOST: g_value_set_string (value, self->host); break;
    case RE_PROP_BACKEND: g_value_set_string (value, self->backend); break;
    case RE_PROP_DEVICE: g_value_set_string (value, self->device); break;
    case RE_PROP_FALLBACK: g_value_set_string (value, self->fallback); break;
    case RE_PROP_PRECISION: g_value_set_string (value, self->precision); break;
    case RE_PROP_SPEED: g_value_set_double (value, self->speed); break;
    case RE_PROP_IS_LEADER: g_value_set_boolean (value, self->is_leader); break;
    case RE_PROP_IS_SELF: g_value_set_boolean (value, self->is_self); break;
    case RE_PROP_RANK: g_value_set_uint (value, self->rank); break;
    case RE_PROP_STATE: g_value_set_string (value, self->state); break;
    case RE_PROP_BYTES_TX: g_value_set_uint64 (value, self->bytes_tx); break;
    case RE_PROP_BYTES_RX: g_value_set_uint64 (value, self->bytes_rx); break;
    case RE_PROP_LINK: g_value_set_string (value, self->link); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, pspec);
    }
}

static void
rlx_roster_entry_class_init (RlxRosterEntryClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  const GParamFlags f = G_PARAM_READABLE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS;

  object_class->finalize = rlx_roster_entry_finalize;
  object_class->get_property = rlx_roster_entry_get_property;
  re_props[RE_PROP_NODE_ID] = g_param_spec_string ("node-id", NULL, NULL, NULL, f);
  re_props[RE_PROP_HOST] = g_param_spec_string ("host", NULL, NULL, NULL, f);
  re_props[RE_PROP_BACKEND] = g_param_spec_string ("backend", NULL, NULL, NULL, f);
  re_props[RE_PROP_DEVICE] = g_param_spec_string ("device", NULL, NULL, NULL, f);
  re_props[RE_PROP_FALLBACK] = g_param_spec_string ("fallback", NULL, NULL, NULL, f);
  re_props[RE_PROP_PRECISION] = g_param_spec_string ("precision", NULL, NULL, NULL, f);
  re_props[RE_PROP_SPEED] = g_param_spec_double ("speed", NULL, NULL, 0, G_MAXDOUBLE, 0, f);
  re_props[RE_PROP_IS_LEADER] = g_param_spec_boolean ("is-leader", NULL, NULL, FALSE, f);
  re_props[RE_PROP_IS_SELF] = g_param_spec_boolean ("is-self", NULL, NULL, FALSE, f);
  re_props[RE_PROP_RANK] = g_param_spec_uint ("rank", NULL, NULL, 0, G_MAXUINT, 0, f);
  re_props[RE_PROP_STATE] = g_param_spec_string ("state", NULL, NULL, NULL, f);
  re_props[RE_PROP_BYTES_TX] = g_param_spec_uint64 ("bytes-tx", NULL, NULL, 0, G_MAXUINT64, 0, f);
  re_props[RE_PROP_BYTES_RX] = g_param_spec_uint64 ("bytes-rx", NULL, NULL, 0, G_MAXUINT64, 0, f);
  re_props[RE_PROP_LINK] = g_param_spec_string ("link", NULL, NULL, NULL, f);
  g_object_class_install_properties (object_class, RE_N_PROPS, re_props);
}

static void
rlx_roster_entry_init (RlxRosterEntry *self)
{
}

const char *rlx_roster_entry_get_node_id (RlxRosterEntry *self) { return self->node_id; }
const char *rlx_roster_entry_get_host (RlxRosterEntry *self) { return self->host; }
const char *rlx_roster_entry_get_backend (RlxRosterEntry *self) { return self->backend; }
const char *rlx_roster_entry_get_device (RlxRosterEntry *self) { return self->device; }
const char *rlx_roster_entry_get_fallback (RlxRosterEntry *self) { return self->fallback; }
const char *rlx_roster_entry_get_precision (RlxRosterEntry *self) { return self->precision; }
double rlx_roster_entry_get_speed (RlxRosterEntry *self) { return self->speed; }
gboolean rlx_roster_entry_get_is_leader (RlxRosterEntry *self) { return self->is_leader; }
gboolean rlx_roster_entry_get_is_self (RlxRosterEntry *self) { return self->is_self; }
guint rlx_roster_entry_get_rank (RlxRosterEntry *self) { return self->rank; }
const char *rlx_roster_entry_get_state (RlxRosterEntry *self) { return self->state; }
guint64 rlx_roster_entry_get_bytes_tx (RlxRosterEntry *self) { return self->bytes_tx; }
guint64 rlx_roster_entry_get_bytes_rx (RlxRosterEntry *self) { return self->bytes_rx; }
const char *rlx_roster_entry_get_link (RlxRosterEntry *self) { return self->link; }

static void
entry_set_str (RlxRosterEntry *e, char **field, const char *v, guint prop)
{
  if (g_strcmp0 (*field, v ? v : "") == 0)
    return;
  g_free (*field);
  *field = g_strdup (v ? v : "");
  g_object_notify_by_pspec (G_OBJECT (e), re_props[prop]);
}

#define ENTRY_SET(e, field, v, prop) G_STMT_START {                          \
    if ((e)->field != (v))                                                   \
      {                                                                      \
        (e)->field = (v);                                                    \
        g_object_notify_by_pspec (G_OBJECT (e), re_props[prop]);             \
      }                                                                      \
  } G_STMT_END

static void
entry_update (RlxRosterEntry *e, const RlxRosterRow *row, guint rank)
{
  g_object_freeze_notify (G_OBJECT (e));
  entry_set_str (e, &e->host, row->host, RE_PROP_HOST);
  entry_set_str (e, &e->backend, row->backend, RE_PROP_BACKEND);
  entry_set_str (e, &e->device, row->device, RE_PROP_DEVICE);
  entry_set_str (e, &e->fallback, row->fallback, RE_PROP_FALLBACK);
  entry_set_str (e, &e->precision, row->precision, RE_PROP_PRECISION);
  entry_set_str (e, &e->state, row->state, RE_PROP_STATE);
  entry_set_str (e, &e->link, row->link, RE_PROP_LINK);
  ENTRY_SET (e, speed, row->speed, RE_PROP_SPEED);
  ENTRY_SET (e, bytes_tx, row->bytes_tx, RE_PROP_BYTES_TX);
  ENTRY_SET (e, bytes_rx, row->bytes_rx, RE_PROP_BYTES_RX);
  ENTRY_SET (e, is_leader, row->is_leader, RE_PROP_IS_LEADER);
  ENTRY_SET (e, is_self, row->is_self, RE_PROP_IS_SELF);
  ENTRY_SET (e, rank, rank, RE_PROP_RANK);
  g_object_thaw_notify (G_OBJECT (e));
}

/* ── the model ──────────────────────────────────────────────────────────── */

struct _RlxRoster {
  GObject    parent_instance;
  GPtrArray *entries;   /* RlxRosterEntry*, owned */
};

static void rlx_roster_list_model_init (GListModelInterface *iface);

G_DEFINE_FINAL_TYPE_WITH_CODE (RlxRoster, rlx_roster, G_TYPE_OBJECT,
                               G_IMPLEMENT_INTERFACE (G_TYPE_LIST_MODEL, rlx_roster_list_model_init))

static GType
roster_get_item_type (GListModel *model)
{
  return RLX_TYPE_ROSTER_ENTRY;
}

static guint
roster_get_n_items (GListModel *model)
{
  return RLX_ROSTER (model)->entries->len;
}

static gpointer
roster_get_item (GListModel *model, guint position)
{
  RlxRoster *self = RLX_ROSTER (model);

  if (position >= self->entries->len)
    return NULL;
  return g_object_ref (g_ptr_array_index (self->entries, position));
}

static void
rlx_roster_list_model_init (GListModelInterface *iface)
{
  iface->get_item_type = roster_get_item_type;
  iface->get_n_items = roster_get_n_items;
  iface->get_item = roster_get_item;
}

static void
rlx_roster_finalize (GObject *object)
{
  g_ptr_array_unref (RLX_ROSTER (object)->entries);
  G_OBJECT_CLASS (rlx_roster_parent_class)->finalize (object);
}

static void
rlx_roster_class_init (RlxRosterClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = rlx_roster_finalize;
}

static void
rlx_roster_init (RlxRoster *self)
{
  self->entries = g_ptr_array_new_with_free_func (g_object_unref);
}

RlxRoster *
rlx_roster_new (void)
{
  return g_object_new (RLX_TYPE_ROSTER, NULL);
}

static RlxRosterEntry *
find (RlxRoster *self, const char *id, guint *pos)
{
  for (guint i = 0; i < self->entries->len; i++)
    {
      RlxRosterEntry *e = g_ptr_array_index (self->entries, i);
      if (g_strcmp0 (e->node_id, id) == 0)
        {
          if (pos)
            *pos = i;
          return e;
        }
    }
  return NULL;
}

void
rlx_roster_sync (RlxRoster *self, const RlxRosterRow *rows, guint n)
{
  g_autoptr(GPtrArray) next = g_ptr_array_new_with_free_func (g_object_unref);
  guint old_n = self->entries->len, prefix = 0, suffix = 0;

  g_return_if_fail (RLX_IS_ROSTER (self));
  g_return_if_fail (rows != NULL || n == 0);

  /* The entry objects of the new list: the same object for a node id seen
   * before (updated in place), a new one otherwise. */
  for (guint i = 0; i < n; i++)
    {
      RlxRosterEntry *e = find (self, rows[i].node_id, NULL);

      if (e == NULL)
        {
          e = g_object_new (RLX_TYPE_ROSTER_ENTRY, NULL);
          e->node_id = g_strdup (rows[i].node_id);
          e->rank = i;
        }
      else
        g_object_ref (e);
      g_ptr_array_add (next, e);
    }
  /* The smallest splice: keep the common prefix and suffix. */
  while (prefix < old_n && prefix < n &&
         g_ptr_array_index (self->entries, prefix) == g_ptr_array_index (next, prefix))
    prefix++;
  while (suffix < old_n - prefix && suffix < n - prefix &&
         g_ptr_array_index (self->entries, old_n - 1 - suffix) ==
         g_ptr_array_index (next, n - 1 - suffix))
    suffix++;

  g_ptr_array_unref (self->entries);
  self->entries = g_steal_pointer (&next);
  for (guint i = 0; i < n; i++)
    entry_update (g_ptr_array_index (self->entries, i), &rows[i], i);
  if (prefix + suffix < MAX (old_n, n))
    g_list_model_items_changed (G_LIST_MODEL (self), prefix, old_n - prefix - suffix,
                                n - prefix - suffix);
}

void
rlx_roster_set_speed (RlxRoster *self, const char *node_id, double speed)
{
  RlxRosterEntry *e = find (self, node_id, NULL);

  if (e)
    ENTRY_SET (e, speed, speed, RE_PROP_SPEED);
}

void
rlx_roster_set_bytes (RlxRoster *self, const char *node_id, guint64 tx, guint64 rx)
{
  RlxRosterEntry *e = find (self, node_id, NULL);

  if (e == NULL)
    return;
  ENTRY_SET (e, bytes_tx, tx, RE_PROP_BYTES_TX);
  ENTRY_SET (e, bytes_rx, rx, RE_PROP_BYTES_RX);
}

void
rlx_roster_set_state (RlxRoster *self, const char *node_id, const char *state)
{
  RlxRosterEntry *e = find (self, node_id, NULL);

  if (e)
    entry_set_str (e, &e->state, state, RE_PROP_STATE);
}
