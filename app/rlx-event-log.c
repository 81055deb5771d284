/* rlx-event-log.c — cohort events in words (see the header) */
#include "rlx-config.h"
#include "rlx-event-log.h"
#include "core/p2p/rlx-invite.h"

#include <glib/gi18n.h>

/* ── items ─────────────────────────────────────────────────────────────── */

struct _RlxEventItem
{
  GObject      parent_instance;
  RlxEventKind kind;
  gboolean     urgent;
  char        *time;
  char        *title;
  char        *detail;
  char        *event;
  char        *node;       /* for coalescing repeats */
  guint        repeats;
};

G_DEFINE_FINAL_TYPE (RlxEventItem, rlx_event_item, G_TYPE_OBJECT)

enum {
  ITEM_PROP_0, ITEM_PROP_KIND, ITEM_PROP_TIME, ITEM_PROP_TITLE, ITEM_PROP_DETAIL,
  ITEM_PROP_ICON_NAME, ITEM_PROP_URGENT, ITEM_PROP_EVENT, ITEM_N_PROPS
};
static GParamSpec *item_props[ITEM_N_PROPS];

static const char *
icon_for_kind (RlxEventKind kind)
{
  switch (kind)
    {
    case RLX_EVENT_KIND_JOINED:   return "list-add-symbolic";
    case RLX_EVENT_KIND_LEFT:     return "list-remove-symbolic";
    case RLX_EVENT_KIND_LEADER:   return "starred-symbolic";
    case RLX_EVENT_KIND_FALLBACK: return "dialog-warning-symbolic";
    case RLX_EVENT_KIND_REFUSED:  return "action-unavailable-symbolic";
    case RLX_EVENT_KIND_MERGED:   return "dialog-warning-symbolic";
    case RLX_EVENT_KIND_ACCURACY: return "emblem-ok-symbolic";
    case RLX_EVENT_KIND_WARNING:  return "dialog-warning-symbolic";
    case RLX_EVENT_KIND_ERROR:    return "dialog-error-symbolic";
    case RLX_EVENT_KIND_INFO:
    default:                      return "dialog-information-symbolic";
    }
}

static void
rlx_event_item_finalize (GObject *object)
{
  RlxEventItem *self = RLX_EVENT_ITEM (object);

  g_free (self->time);
  g_free (self->title);
  g_free (self->detail);
  g_free (self->event);
  g_free (self->node);
  G_OBJECT_CLASS (rlx_event_item_parent_class)->finalize (object);
}

static void
rlx_event_item_get_property (GObject *object, guint id, GValue *value, GParamSpec *pspec)
{
  RlxEventItem *self = RLX_EVENT_ITEM (object);

  switch (id)
    {
    case ITEM_PROP_KIND: g_value_set_int (value, self->kind); break;
    case ITEM_PROP_TIME: g_value_set_string (value, self->time); break;
    case ITEM_PROP_TITLE: g_value_set_string (value, self->title); break;
    case ITEM_PROP_DETAIL: g_value_set_string (value, self->detail); break;
    case ITEM_PROP_ICON_NAME: g_value_set_string (value, icon_for_kind (self->kind)); break;
    case ITEM_PROP_URGENT: g_value_set_boolean (value, self->urgent); break;
    case ITEM_PROP_EVENT: g_value_set_string (value, self->event); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, pspec);
    }
}

static void
rlx_event_item_class_init (RlxEventItemClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  const GParamFlags f = G_PARAM_READABLE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS;

  object_class->finalize = rlx_event_item_finalize;
  object_class->get_property = rlx_event_item_get_property;
  item_props[ITEM_PROP_KIND] = g_param_spec_int ("kind", NULL, NULL, 0, RLX_EVENT_KIND_ERROR, 0, f);
  item_props[ITEM_PROP_TIME] = g_param_spec_string ("time", NULL, NULL, NULL, f);
  item_props[ITEM_PROP_TITLE] = g_param_spec_string ("title", NULL, NULL, NULL, f);
  item_props[ITEM_PROP_DETAIL] = g_param_spec_string ("detail", NULL, NULL, NULL, f);
  item_props[ITEM_PROP_ICON_NAME] = g_param_spec_string ("icon-name", NULL, NULL, NULL, f);
  item_props[ITEM_PROP_URGENT] = g_param_spec_boolean ("urgent", NULL, NULL, FALSE, f);
  item_props[ITEM_PROP_EVENT] = g_param_spec_string ("event", NULL, NULL, NULL, f);
  g_object_class_install_properties (object_class, ITEM_N_PROPS, item_props);
}

static void
rlx_event_item_init (RlxEventItem *self)
{
}

RlxEventKind rlx_event_item_get_kind (RlxEventItem *self) { return self->kind; }
const char *rlx_event_item_get_time (RlxEventItem *self) { return self->time; }
const char *rlx_event_item_get_title (RlxEventItem *self) { return self->title; }
const char *rlx_event_item_get_detail (RlxEventItem *self) { return self->detail; }
const char *rlx_event_item_get_icon_name (RlxEventItem *self) { return icon_for_kind (self->kind); }
const char *rlx_event_item_get_event (RlxEventItem *self) { return self->event; }
gboolean rlx_event_item_get_urgent (RlxEventItem *self) { return self->urgent; }

/* ── the log ───────────────────────────────────────────────────────────── */

struct _RlxEventLog
{
  GObject    parent_instance;
  GPtrArray *items;      /* RlxEventItem*, oldest first */
  char      *leader;     /* the last leader reported, for "changed" */
};

static void rlx_event_log_model_init (GListModelInterface *iface);

G_DEFINE_FINAL_TYPE_WITH_CODE (RlxEventLog, rlx_event_log, G_TYPE_OBJECT,
                               G_IMPLEMENT_INTERFACE (G_TYPE_LIST_MODEL,
                                                      rlx_event_log_model_init))

static GType
model_get_item_type (GListModel *model)
{
  return RLX_TYPE_EVENT_ITEM;
}

static guint
model_get_n_items (GListModel *model)
{
  return RLX_EVENT_LOG (model)->items->len;
}

static gpointer
model_get_item (GListModel *model, guint position)
{
  RlxEventLog *self = RLX_EVENT_LOG (model);

  if (position >= self->items->len)
    return NULL;
  return g_object_ref (g_ptr_array_index (self->items, position));
}

static void
rlx_event_log_model_init (GListModelInterface *iface)
{
  iface->get_item_type = model_get_item_type;
  iface->get_n_items = model_get_n_items;
  iface->get_item = model_get_item;
}

static void
rlx_event_log_finalize (GObject *object)
{
  RlxEventLog *self = RLX_EVENT_LOG (object);

  g_ptr_array_unref (self->items);
  g_free (self->leader);
  G_OBJECT_CLASS (rlx_event_log_parent_class)->finalize (object);
}

static void
rlx_event_log_class_init (RlxEventLogClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = rlx_event_log_finalize;
}

static void
rlx_event_log_init (RlxEventLog *self)
{
  self->items = g_ptr_array_new_with_free_func (g_object_unref);
}

RlxEventLog *
rlx_event_log_new (void)
{
  return g_object_new (RLX_TYPE_EVENT_LOG, NULL);
}

RlxEventItem *
rlx_event_log_add (RlxEventLog *self, RlxEventKind kind, gboolean urgent, const char *event,
                   const char *title, const char *detail)
{
  g_autoptr(GDateTime) now = g_date_time_new_now_local ();
  RlxEventItem *item;
  guint removed = 0;

  g_return_val_if_fail (RLX_IS_EVENT_LOG (self), NULL);
  g_return_val_if_fail (title != NULL, NULL);

  item = g_object_new (RLX_TYPE_EVENT_ITEM, NULL);
  item->kind = kind;
  item->urgent = urgent;
  item->time = g_date_time_format (now, "%H:%M:%S");
  item->title = g_strdup (title);
  item->detail = g_strdup (detail ? detail : "");
  item->event = g_strdup (event ? event : "");
  if (self->items->len >= RLX_EVENT_LOG_MAX)
    {
      removed = self->items->len - RLX_EVENT_LOG_MAX + 1;
      g_ptr_array_remove_range (self->items, 0, removed);
      g_list_model_items_changed (G_LIST_MODEL (self), 0, removed, 0);
    }
  g_ptr_array_add (self->items, item);
  g_list_model_items_changed (G_LIST_MODEL (self), self->items->len - 1, 0, 1);
  return item;
}

void
rlx_event_log_clear (RlxEventLog *self)
{
  guint n;

  g_return_if_fail (RLX_IS_EVENT_LOG (self));
  n = self->items->len;
  g_ptr_array_set_size (self->items, 0);
  g_clear_pointer (&self->leader, g_free);
  if (n)
    g_list_model_items_changed (G_LIST_MODEL (self), 0, n, 0);
}

/* ── JSON events in words ──────────────────────────────────────────────── */

static const char *
str (JsonObject *o, const char *key)
{
  JsonNode *n = json_object_get_member (o, key);

  if (n && JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_STRING)
    return json_node_get_string (n);
  return "";
}

static long long
num (JsonObject *o, const char *key)
{
  JsonNode *n = json_object_get_member (o, key);

  if (n && JSON_NODE_HOLDS_VALUE (n) &&
      (json_node_get_value_type (n) == G_TYPE_INT64 || json_node_get_value_type (n) == G_TYPE_DOUBLE))
    return (long long) json_node_get_double (n);
  return 0;
}

static double
dbl (JsonObject *o, const char *key)
{
  JsonNode *n = json_object_get_member (o, key);

  if (n && JSON_NODE_HOLDS_VALUE (n) &&
      (json_node_get_value_type (n) == G_TYPE_INT64 || json_node_get_value_type (n) == G_TYPE_DOUBLE))
    return json_node_get_double (n);
  return 0;
}

/* "this node" for our own id, else the id */
static const char *
who (const char *node, const char *self_id)
{
  if (self_id && g_strcmp0 (node, self_id) == 0)
    return _("this node");
  return *node ? node : _("a rank");
}

/* A rank that computes on something slower than it could, and why. */
static RlxEventItem *
add_fallback (RlxEventLog *self, JsonObject *e, const char *node, const char *self_id)
{
  const char *backend = str (e, "backend"), *fallback = str (e, "fallback");
  g_autofree char *title = NULL;

  if (*fallback == '\0')
    return NULL;
  if (g_str_equal (backend, "cpu"))
    /* Translators: %s is "this node" or a node id */
    title = g_strdup_printf (_("%s fell back to the CPU"), who (node, self_id));
  else
    /* Translators: first %s is "this node" or a node id, second a backend name */
    title = g_strdup_printf (_("%s computes on %s, not the fastest candidate"),
                             who (node, self_id), backend);
  return rlx_event_log_add (self, RLX_EVENT_KIND_FALLBACK, TRUE, "fallback", title, fallback);
}

guint
rlx_event_log_add_event (RlxEventLog *self, JsonObject *e, const char *self_id, GPtrArray **added)
{
  g_autoptr(GPtrArray) items = g_ptr_array_new ();
  g_autofree char *title = NULL;
  g_autofree char *detail = NULL;
  const char *name;
  RlxEventKind kind = RLX_EVENT_KIND_INFO;
  gboolean urgent = FALSE;
  RlxEventItem *item;

  g_return_val_if_fail (RLX_IS_EVENT_LOG (self), 0);
  g_return_val_if_fail (e != NULL, 0);

  name = str (e, "event");
  if (g_str_equal (name, "joined"))
    {
      kind = RLX_EVENT_KIND_JOINED;
      /* Translators: %s is a cohort name, e.g. "default" */
      title = g_strdup_printf (_("Joined cohort “%s” as %s"), str (e, "cohort"), str (e, "role"));
      /* Translators: first %s a backend ("cpu", "vulkan"), second the device */
      detail = g_strdup_printf (_("Computes on %s (%s), wire precision %s"), str (e, "backend"),
                                str (e, "device"), str (e, "precision"));
      g_ptr_array_add (items, rlx_event_log_add (self, kind, FALSE, name, title, detail));
      if ((item = add_fallback (self, e, str (e, "node"), self_id)))
        g_ptr_array_add (items, item);
      goto done;
    }
  else if (g_str_equal (name, "member-joined"))
    {
      kind = RLX_EVENT_KIND_JOINED;
      /* Translators: first %s a node id, second a host name */
      title = g_strdup_printf (_("%s joined from %s"), str (e, "node"), str (e, "host"));
      detail = g_strdup_printf (_("Computes on %s (%s), wire precision %s"), str (e, "backend"),
                                str (e, "device"), str (e, "precision"));
      g_ptr_array_add (items, rlx_event_log_add (self, kind, FALSE, name, title, detail));
      if ((item = add_fallback (self, e, str (e, "node"), self_id)))
        g_ptr_array_add (items, item);
      goto done;
    }
  else if (g_str_equal (name, "member-left"))
    {
      kind = RLX_EVENT_KIND_LEFT;
      urgent = TRUE;
      /* Translators: %s is a node id */
      title = g_strdup_printf (_("%s left the cohort"), str (e, "node"));
      /* Translators: %s is the reason a rank left, e.g. "interrupted" */
      detail = g_strdup_printf (_("Reason: %s (at step %lld)"), str (e, "reason"),
                                num (e, "step"));
    }
  else if (g_str_equal (name, "refused"))
    {
      kind = RLX_EVENT_KIND_REFUSED;
      urgent = TRUE;
      if (g_strcmp0 (str (e, "by"), self_id) == 0)
        /* Translators: %s is a node id */
        title = g_strdup_printf (_("Refused %s"), str (e, "node"));
      else
        /* Translators: %s is a node id */
        title = g_strdup_printf (_("Refused by %s"), *str (e, "by") ? str (e, "by") : str (e, "node"));
      detail = g_strdup (str (e, "reason"));
    }
  else if (g_str_equal (name, "leader"))
    {
      const char *node = str (e, "node");
      kind = RLX_EVENT_KIND_LEADER;
      /* a change is news; the first leader is not */
      urgent = self->leader != NULL && g_strcmp0 (self->leader, node) != 0;
      g_free (self->leader);
      self->leader = g_strdup (node);
      if (self_id && g_str_equal (node, self_id))
        title = g_strdup (_("This node leads the cohort"));
      else
        /* Translators: %s is a node id */
        title = g_strdup_printf (_("%s leads the cohort"), node);
      /* Translators: the leader's term and the step it took over at */
      detail = g_strdup_printf (_("Term %lld, from step %lld"),
                                num (e, "term"), num (e, "step"));
    }
  else if (g_str_equal (name, "merged"))
    {
      kind = RLX_EVENT_KIND_MERGED;
      urgent = TRUE;
      title = g_strdup_printf (ngettext ("Merged with another group: %lld step discarded",
                                            "Merged with another group: %lld steps discarded",
                                            (gulong) num (e, "discarded")),
                               num (e, "discarded"));
      /* Translators: the steps a merge threw away, the leader kept and the rule */
      detail = g_strdup_printf (_("Steps %lld–%lld were dropped; %s leads (%s)"),
                                num (e, "from_step"), num (e, "to_step"), str (e, "node"),
                                str (e, "rule"));
    }
  else if (g_str_equal (name, "rejoining"))
    {
      kind = RLX_EVENT_KIND_WARNING;
      urgent = TRUE;
      title = g_strdup (_("Cut off from the cohort, rejoining"));
      detail = g_strdup (str (e, "reason"));
    }
  else if (g_str_equal (name, "rejected"))
    {
      kind = RLX_EVENT_KIND_WARNING;
      urgent = TRUE;
      /* Translators: a gradient bucket was thrown away; %s is a node id */
      title = g_strdup_printf (_("Gradient of %s rejected at step %lld"),
                               str (e, "node"), num (e, "step"));
      detail = g_strdup (str (e, "reason"));
    }
  else if (g_str_equal (name, "late"))
    {
      RlxEventItem *last = self->items->len
                             ? g_ptr_array_index (self->items, self->items->len - 1) : NULL;

      /* a slow rank misses many steps in a row: one line that counts them */
      if (last && g_str_equal (last->event, "late") && g_strcmp0 (last->node, str (e, "node")) == 0)
        {
          last->repeats++;
          g_free (last->title);
          /* Translators: %s is a node id; the steps its gradient came too late for */
          last->title = g_strdup_printf (ngettext ("Gradient of %s missed %u step, the last %lld",
                                                   "Gradient of %s missed %u steps, the last %lld",
                                                   last->repeats),
                                         str (e, "node"), last->repeats, num (e, "step"));
          g_object_notify_by_pspec (G_OBJECT (last), item_props[ITEM_PROP_TITLE]);
          goto done;
        }
      kind = RLX_EVENT_KIND_INFO;
      /* Translators: %s is a node id */
      title = g_strdup_printf (_("Gradient of %s missed step %lld"),
                               str (e, "node"), num (e, "step"));
      detail = g_strdup (str (e, "reason"));
      item = rlx_event_log_add (self, kind, urgent, name, title, detail);
      item->node = g_strdup (str (e, "node"));
      item->repeats = 1;
      g_ptr_array_add (items, item);
      goto done;
    }
  else if (g_str_equal (name, "dropped") || g_str_equal (name, "send-failed"))
    {
      kind = RLX_EVENT_KIND_WARNING;
      /* Translators: %s is a node id */
      title = g_strdup_printf (_("A message to %s was not sent"), str (e, "node"));
      detail = g_strdup (str (e, "reason"));
    }
  else if (g_str_equal (name, "invite"))
    {
      /* Translators: %lld is a port number */
      title = g_strdup_printf (_("Other machines can join on port %lld"), num (e, "port"));
      /* a log shows no key: Copy Invite copies the whole invite */
      detail = rlx_invite_redact (str (e, "invite"));
    }
  else if (g_str_equal (name, "link-failed"))
    {
      kind = RLX_EVENT_KIND_WARNING;
      /* Translators: %s is a node id */
      title = g_strdup_printf (_("No connection to %s"), str (e, "node"));
      detail = g_strdup (str (e, "reason"));
    }
  else if (g_str_equal (name, "signalling") && g_str_equal (str (e, "state"), "unreachable"))
    {
      /* not joined yet, and trying again: the joining page says so, no toast */
      kind = RLX_EVENT_KIND_WARNING;
      title = *str (e, "server")
                /* Translators: %s is HOST:PORT */
                ? g_strdup_printf (_("Cannot reach the invite’s host %s yet"), str (e, "server"))
                : g_strdup (_("Cannot reach the invite’s host yet"));
      detail = g_strdup (str (e, "reason"));
    }
  else if (g_str_equal (name, "signalling") && !g_str_equal (str (e, "state"), "joined"))
    {
      kind = RLX_EVENT_KIND_WARNING;
      urgent = TRUE;
      title = *str (e, "server")
                /* Translators: %s is HOST:PORT */
                ? g_strdup_printf (_("Lost the invite’s host %s"), str (e, "server"))
                : g_strdup (_("Lost the invite’s host"));
      detail = g_strdup (str (e, "reason"));
    }
  else if (g_str_equal (name, "snapshot"))
    {
      const char *from = str (e, "from");
      if (*from)
        /* Translators: %s is a node id */
        title = g_strdup_printf (_("Took a snapshot from %s at step %lld"), from,
                                 num (e, "step"));
      else
        /* Translators: %s is a node id */
        title = g_strdup_printf (_("Sent a snapshot to %s at step %lld"),
                                 str (e, "to"), num (e, "step"));
      detail = g_strdup (str (e, "reason"));
    }
  else if (g_str_equal (name, "precision"))
    {
      /* Translators: first %s "this node" or a node id, second a precision */
      title = g_strdup_printf (_("Wire precision of %s is now %s"), who (str (e, "node"), self_id),
                               str (e, "precision"));
    }
  else if (g_str_equal (name, "resumed"))
    {
      title = g_strdup_printf (_("Resumed from the checkpoint at step %lld"),
                               num (e, "step"));
      detail = g_strdup (str (e, "path"));
    }
  else if (g_str_equal (name, "evaluated"))
    {
      kind = RLX_EVENT_KIND_ACCURACY;
      /* Translators: test accuracy in percent, and the step it was measured at */
      title = g_strdup_printf (_("Test accuracy %.1f%% at step %lld"),
                               100.0 * dbl (e, "accuracy"), num (e, "step"));
      detail = g_strdup_printf (_("Test loss %.4f"), dbl (e, "test_loss"));
    }
  else if (g_str_equal (name, "error"))
    {
      kind = RLX_EVENT_KIND_ERROR;
      urgent = TRUE;
      /* Translators: %s is "this node" or a node id */
      title = g_strdup_printf (_("Error at %s"), who (str (e, "node"), self_id));
      detail = g_strdup (str (e, "reason"));
    }
  else if (g_str_equal (name, "done"))
    {
      title = g_strdup_printf (_("Stopped at step %lld"), num (e, "step"));
      detail = g_strdup (str (e, "message"));
    }
  else
    {
      /* step, checkpoint and other routine events stay out of the log */
      goto done;
    }
  g_ptr_array_add (items, rlx_event_log_add (self, kind, urgent, name, title, detail));

done:
  if (added)
    *added = g_ptr_array_ref (items);
  return items->len;
}
