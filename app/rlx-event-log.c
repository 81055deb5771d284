/* rlx-event-log.c — cohort events in words (see the header) */
#include "rlx-config.h"
#include "rlx-event-log.h"
#include "core/p2p/rlx-invite.h"
#include <inttypes.h>

#include <glib/gi18n.h>

/* ── items ─────────────────────────────────────────────────────────────── */

struct _RlxEventItem
{
  GObject      parent_instance;
  RlxLogKind kind;
  gboolean     urgent;
  char        *time;
  char        *title;
  char        *detail;
  int          source;     /* the RlxEventKind it tells, RLX_EVENT_N_KINDS: the app's */
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
icon_for_kind (RlxLogKind kind)
{
  switch (kind)
    {
    case RLX_LOG_JOINED:   return "list-add-symbolic";
    case RLX_LOG_LEFT:     return "list-remove-symbolic";
    case RLX_LOG_LEADER:   return "starred-symbolic";
    case RLX_LOG_FALLBACK: return "dialog-warning-symbolic";
    case RLX_LOG_REFUSED:  return "action-unavailable-symbolic";
    case RLX_LOG_MERGED:   return "dialog-warning-symbolic";
    case RLX_LOG_ACCURACY: return "emblem-ok-symbolic";
    case RLX_LOG_WARNING:  return "dialog-warning-symbolic";
    case RLX_LOG_ERROR:    return "dialog-error-symbolic";
    case RLX_LOG_INFO:
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
    case ITEM_PROP_EVENT: g_value_set_string (value, rlx_event_item_get_event (self)); break;
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
  item_props[ITEM_PROP_KIND] = g_param_spec_int ("kind", NULL, NULL, 0, RLX_LOG_ERROR, 0, f);
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

RlxLogKind rlx_event_item_get_kind (RlxEventItem *self) { return self->kind; }
const char *rlx_event_item_get_time (RlxEventItem *self) { return self->time; }
const char *rlx_event_item_get_title (RlxEventItem *self) { return self->title; }
const char *rlx_event_item_get_detail (RlxEventItem *self) { return self->detail; }
const char *rlx_event_item_get_icon_name (RlxEventItem *self) { return icon_for_kind (self->kind); }
const char *
rlx_event_item_get_event (RlxEventItem *self)
{
  return self->source < RLX_EVENT_N_KINDS ? rlx_event_kind_name (self->source) : "app";
}
gboolean rlx_event_item_get_urgent (RlxEventItem *self) { return self->urgent; }

/* ── the log ───────────────────────────────────────────────────────────── */

struct _RlxEventLog
{
  GObject    parent_instance;
  GPtrArray *items;      /* RlxEventItem*, oldest first */
  char      *leader;     /* the last leader reported, for "changed" */
  char      *accuracy_title, *accuracy_detail;   /* the last evaluation, or NULL */
};

enum { LOG_PROP_0, LOG_PROP_ACCURACY_TITLE, LOG_PROP_ACCURACY_DETAIL, LOG_N_PROPS };
static GParamSpec *log_props[LOG_N_PROPS];

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
  g_free (self->accuracy_title);
  g_free (self->accuracy_detail);
  G_OBJECT_CLASS (rlx_event_log_parent_class)->finalize (object);
}

static void
rlx_event_log_get_property (GObject *object, guint id, GValue *value, GParamSpec *pspec)
{
  RlxEventLog *self = RLX_EVENT_LOG (object);

  switch (id)
    {
    case LOG_PROP_ACCURACY_TITLE: g_value_set_string (value, self->accuracy_title); break;
    case LOG_PROP_ACCURACY_DETAIL: g_value_set_string (value, self->accuracy_detail); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, pspec);
    }
}

static void
rlx_event_log_class_init (RlxEventLogClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  const GParamFlags f = G_PARAM_READABLE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS;

  object_class->finalize = rlx_event_log_finalize;
  object_class->get_property = rlx_event_log_get_property;
  log_props[LOG_PROP_ACCURACY_TITLE] = g_param_spec_string ("accuracy-title", NULL, NULL, NULL, f);
  log_props[LOG_PROP_ACCURACY_DETAIL] = g_param_spec_string ("accuracy-detail", NULL, NULL, NULL, f);
  g_object_class_install_properties (object_class, LOG_N_PROPS, log_props);
}

const char *rlx_event_log_get_accuracy_title (RlxEventLog *self) { return self->accuracy_title; }
const char *rlx_event_log_get_accuracy_detail (RlxEventLog *self) { return self->accuracy_detail; }

gboolean
rlx_event_item_is_warning (RlxEventItem *self)
{
  return self->kind == RLX_LOG_WARNING || self->kind == RLX_LOG_ERROR ||
         self->kind == RLX_LOG_FALLBACK || self->kind == RLX_LOG_MERGED;
}

gboolean
rlx_event_item_in_filter (RlxEventItem *self, RlxLogFilter filter)
{
  switch (filter)
    {
    case RLX_LOG_FILTER_MEMBERSHIP:
      return self->kind == RLX_LOG_JOINED || self->kind == RLX_LOG_LEFT ||
             self->kind == RLX_LOG_LEADER || self->kind == RLX_LOG_REFUSED ||
             self->kind == RLX_LOG_MERGED;
    case RLX_LOG_FILTER_WARNINGS:
      return rlx_event_item_is_warning (self);
    case RLX_LOG_FILTER_ALL:
    default:
      return TRUE;
    }
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

static RlxEventItem *
add_item (RlxEventLog *self, int source, RlxLogKind kind, gboolean urgent, const char *title,
          const char *detail)
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
  item->source = source;
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

RlxEventItem *
rlx_event_log_add (RlxEventLog *self, RlxLogKind kind, gboolean urgent, const char *title,
                   const char *detail)
{
  return add_item (self, RLX_EVENT_N_KINDS, kind, urgent, title, detail);
}

void
rlx_event_log_clear (RlxEventLog *self)
{
  guint n;

  g_return_if_fail (RLX_IS_EVENT_LOG (self));
  n = self->items->len;
  g_ptr_array_set_size (self->items, 0);
  g_clear_pointer (&self->leader, g_free);
  if (self->accuracy_title)
    {
      g_clear_pointer (&self->accuracy_title, g_free);
      g_clear_pointer (&self->accuracy_detail, g_free);
      g_object_notify_by_pspec (G_OBJECT (self), log_props[LOG_PROP_ACCURACY_TITLE]);
      g_object_notify_by_pspec (G_OBJECT (self), log_props[LOG_PROP_ACCURACY_DETAIL]);
    }
  if (n)
    g_list_model_items_changed (G_LIST_MODEL (self), 0, n, 0);
}

/* ── events in words ───────────────────────────────────────────────────── */

/* a string field, "" when there is none */
static const char *
str (const char *s)
{
  return s ? s : "";
}

/* "this node" for our own id, else the id */
static const char *
who (const char *node, const char *self_id)
{
  if (self_id && g_strcmp0 (node, self_id) == 0)
    return _("this node");
  return node && *node ? node : _("a rank");
}

/* A rank that computes on something slower than it could, and why. */
static RlxEventItem *
add_fallback (RlxEventLog *self, RlxEventKind source, const char *backend, const char *fallback,
              const char *node, const char *self_id)
{
  g_autofree char *title = NULL;

  if (fallback == NULL || *fallback == '\0')
    return NULL;
  if (g_strcmp0 (backend, "cpu") == 0)
    /* Translators: %s is "this node" or a node id */
    title = g_strdup_printf (_("%s fell back to the CPU"), who (node, self_id));
  else
    /* Translators: first %s is "this node" or a node id, second a backend name */
    title = g_strdup_printf (_("%s computes on %s, not the fastest candidate"),
                             who (node, self_id), str (backend));
  return add_item (self, source, RLX_LOG_FALLBACK, TRUE, title, fallback);
}

guint
rlx_event_log_add_event (RlxEventLog *self, const RlxEvent *e, const char *self_id,
                         GPtrArray **added)
{
  g_autoptr(GPtrArray) items = g_ptr_array_new ();
  g_autofree char *title = NULL;
  g_autofree char *detail = NULL;
  RlxLogKind kind = RLX_LOG_INFO;
  gboolean urgent = FALSE;
  RlxEventItem *item;

  g_return_val_if_fail (RLX_IS_EVENT_LOG (self), 0);
  g_return_val_if_fail (e != NULL, 0);

  switch (e->kind)
    {
    case RLX_EVENT_JOINED:
      {
        const RlxEventJoined *j = &e->u.joined;
        kind = RLX_LOG_JOINED;
        /* Translators: %s is a cohort name, e.g. "default" */
        title = g_strdup_printf (_("Joined cohort “%s” as %s"), str (j->cohort), str (j->role));
        /* Translators: first %s a backend ("cpu", "vulkan"), second the device */
        detail = g_strdup_printf (_("Computes on %s (%s), wire precision %s"), str (j->backend),
                                  str (j->device), str (j->precision));
        g_ptr_array_add (items, add_item (self, e->kind, kind, FALSE, title, detail));
        if ((item = add_fallback (self, e->kind, j->backend, j->fallback, j->node, self_id)))
          g_ptr_array_add (items, item);
        goto done;
      }
    case RLX_EVENT_MEMBER_JOINED:
      {
        const RlxEventMember *m = &e->u.member;
        kind = RLX_LOG_JOINED;
        /* Translators: first %s a node id, second a host name */
        title = g_strdup_printf (_("%s joined from %s"), str (m->node), str (m->host));
        detail = g_strdup_printf (_("Computes on %s (%s), wire precision %s"), str (m->backend),
                                  str (m->device), str (m->precision));
        g_ptr_array_add (items, add_item (self, e->kind, kind, FALSE, title, detail));
        if ((item = add_fallback (self, e->kind, m->backend, m->fallback, m->node, self_id)))
          g_ptr_array_add (items, item);
        goto done;
      }
    case RLX_EVENT_MEMBER_LEFT:
      kind = RLX_LOG_LEFT;
      urgent = TRUE;
      /* Translators: %s is a node id */
      title = g_strdup_printf (_("%s left the cohort"), str (e->u.member.node));
      /* Translators: %s is the reason a rank left, e.g. "interrupted" */
      detail = g_strdup_printf (_("Reason: %s (at step %" PRIu64 ")"),
                                str (e->u.member.reason), e->u.member.step);
      break;
    case RLX_EVENT_REFUSED:
      {
        const RlxEventRefused *r = &e->u.refused;
        kind = RLX_LOG_REFUSED;
        urgent = TRUE;
        if (g_strcmp0 (str (r->by), self_id) == 0)
          /* Translators: %s is a node id */
          title = g_strdup_printf (_("Refused %s"), str (r->node));
        else
          /* Translators: %s is a node id */
          title = g_strdup_printf (_("Refused by %s"), *str (r->by) ? r->by : str (r->node));
        detail = g_strdup (str (r->reason));
        break;
      }
    case RLX_EVENT_LEADER:
      {
        const char *node = str (e->u.leader.node);
        kind = RLX_LOG_LEADER;
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
        detail = g_strdup_printf (_("Term %" PRIu64 ", from step %" PRIu64),
                                  e->u.leader.term, e->u.leader.step);
        break;
      }
    case RLX_EVENT_MERGED:
      {
        const RlxEventMerged *m = &e->u.merged;
        kind = RLX_LOG_MERGED;
        urgent = TRUE;
        title = g_strdup_printf (ngettext ("Merged with another group: %" PRIu64
                                           " step discarded",
                                           "Merged with another group: %" PRIu64
                                           " steps discarded",
                                           (gulong) m->discarded),
                                 m->discarded);
        /* Translators: the steps a merge threw away, the leader kept and the rule */
        detail = g_strdup_printf (_("Steps %" PRIu64 "–%" PRIu64
                                    " were dropped; %s leads (%s)"),
                                  m->from_step, m->to_step, str (m->node), str (m->rule));
        break;
      }
    case RLX_EVENT_REJOINING:
      kind = RLX_LOG_WARNING;
      urgent = TRUE;
      title = g_strdup (_("Cut off from the cohort, rejoining"));
      detail = g_strdup (str (e->u.note.reason));
      break;
    case RLX_EVENT_REJECTED:
      kind = RLX_LOG_WARNING;
      urgent = TRUE;
      /* Translators: a gradient bucket was thrown away; %s is a node id */
      title = g_strdup_printf (_("Gradient of %s rejected at step %" PRIu64),
                               str (e->u.rejected.node), e->u.rejected.step);
      detail = g_strdup (str (e->u.rejected.reason));
      break;
    case RLX_EVENT_LATE:
      {
        const RlxEventNodeStep *l = &e->u.node_step;
        RlxEventItem *last = self->items->len
                               ? g_ptr_array_index (self->items, self->items->len - 1) : NULL;

        /* a slow rank misses many steps in a row: one line that counts them */
        if (last && last->source == RLX_EVENT_LATE && g_strcmp0 (last->node, l->node) == 0)
          {
            last->repeats++;
            g_free (last->title);
            /* Translators: %s is a node id; the steps its gradient came too late for */
            last->title = g_strdup_printf (ngettext ("Gradient of %s missed %u step, the last %"
                                                     PRIu64,
                                                     "Gradient of %s missed %u steps, the last %"
                                                     PRIu64,
                                                     last->repeats),
                                           str (l->node), last->repeats, l->step);
            g_object_notify_by_pspec (G_OBJECT (last), item_props[ITEM_PROP_TITLE]);
            goto done;
          }
        /* Translators: %s is a node id */
        title = g_strdup_printf (_("Gradient of %s missed step %" PRIu64),
                                 str (l->node), l->step);
        detail = g_strdup (str (l->reason));
        item = add_item (self, e->kind, RLX_LOG_INFO, FALSE, title, detail);
        item->node = g_strdup (str (l->node));
        item->repeats = 1;
        g_ptr_array_add (items, item);
        goto done;
      }
    case RLX_EVENT_DROPPED:
    case RLX_EVENT_SEND_FAILED:
      kind = RLX_LOG_WARNING;
      /* Translators: %s is a node id */
      title = g_strdup_printf (_("A message to %s was not sent"),
                               str (e->kind == RLX_EVENT_DROPPED ? e->u.dropped.node
                                                                  : e->u.note.node));
      detail = g_strdup (str (e->kind == RLX_EVENT_DROPPED ? e->u.dropped.reason
                                                            : e->u.note.reason));
      break;
    case RLX_EVENT_INVITE:
      /* Translators: %s is a port number */
      title = g_strdup_printf (_("Other machines can join on port %" PRIu64),
                               e->u.invite.port);
      /* a log shows no key: Copy Invite copies the whole invite */
      detail = rlx_invite_redact (str (e->u.invite.invite));
      break;
    case RLX_EVENT_LINK_FAILED:
      kind = RLX_LOG_WARNING;
      /* Translators: %s is a node id */
      title = g_strdup_printf (_("No connection to %s"), str (e->u.link_lost.node));
      detail = g_strdup (str (e->u.link_lost.reason));
      break;
    case RLX_EVENT_SIGNALLING:
      {
        const RlxEventSignalling *s = &e->u.signalling;
        /* (joined, or alone in the room once the others left: no trouble) */
        if (g_strcmp0 (s->state, "joined") == 0 || g_strcmp0 (s->state, "empty") == 0)
          goto done;
        kind = RLX_LOG_WARNING;
        /* not joined yet, and trying again: the joining page says so, no toast */
        urgent = g_strcmp0 (s->state, "unreachable") != 0;
        if (!urgent)
          title = s->server && *s->server
                    /* Translators: %s is HOST:PORT */
                    ? g_strdup_printf (_("Cannot reach the invite’s host %s yet"), s->server)
                    : g_strdup (_("Cannot reach the invite’s host yet"));
        else
          title = s->server && *s->server
                    /* Translators: %s is HOST:PORT */
                    ? g_strdup_printf (_("Lost the invite’s host %s"), s->server)
                    : g_strdup (_("Lost the invite’s host"));
        detail = g_strdup (str (s->reason));
        break;
      }
    case RLX_EVENT_SNAPSHOT:
      {
        const RlxEventSnapshot *s = &e->u.snapshot;
        if (s->from && *s->from)
          /* Translators: %s is a node id */
          title = g_strdup_printf (_("Took a snapshot from %s at step %" PRIu64),
                                   s->from, s->step);
        else
          /* Translators: %s is a node id */
          title = g_strdup_printf (_("Sent a snapshot to %s at step %" PRIu64),
                                   str (s->to), s->step);
        detail = g_strdup (str (s->reason));
        break;
      }
    case RLX_EVENT_PRECISION:
      /* Translators: first %s "this node" or a node id, second a precision */
      title = g_strdup_printf (_("Wire precision of %s is now %s"),
                               who (e->u.precision.node, self_id), str (e->u.precision.precision));
      break;
    case RLX_EVENT_RESUMED:
      title = g_strdup_printf (_("Resumed from the checkpoint at step %" PRIu64),
                               e->u.resumed.step);
      detail = g_strdup (str (e->u.resumed.path));
      break;
    case RLX_EVENT_EVALUATED:
      /* Evaluations are on the chart, and come many a second: one row that
       * updates (the log's accuracy-title and -detail), not an item each. */
      g_free (self->accuracy_title);
      g_free (self->accuracy_detail);
      /* Translators: test accuracy in percent, and the step it was measured at */
      self->accuracy_title = g_strdup_printf (_("Test accuracy %.1f%% at step %" PRIu64),
                                              100.0 * e->u.evaluated.accuracy,
                                              e->u.evaluated.step);
      self->accuracy_detail = g_strdup_printf (_("Test loss %.4f"), e->u.evaluated.test_loss);
      g_object_notify_by_pspec (G_OBJECT (self), log_props[LOG_PROP_ACCURACY_TITLE]);
      g_object_notify_by_pspec (G_OBJECT (self), log_props[LOG_PROP_ACCURACY_DETAIL]);
      goto done;
    case RLX_EVENT_ERROR:
      kind = RLX_LOG_ERROR;
      urgent = TRUE;
      /* Translators: %s is "this node" or a node id */
      title = g_strdup_printf (_("Error at %s"), who (e->u.note.node, self_id));
      detail = g_strdup (str (e->u.note.reason));
      break;
    case RLX_EVENT_DONE:
      title = g_strdup_printf (_("Stopped at step %" PRIu64), e->u.done.step);
      detail = g_strdup (str (e->u.done.message));
      break;
    case RLX_EVENT_STEP:
    case RLX_EVENT_CHECKPOINT:
    case RLX_EVENT_ACK_TIMEOUT:
    case RLX_EVENT_WAITING:
    case RLX_EVENT_LINK_UP:
    case RLX_EVENT_TIMING:
    case RLX_EVENT_LINK_DOWN:
    case RLX_EVENT_N_KINDS:
    default:
      /* step, checkpoint and other routine events stay out of the log */
      goto done;
    }
  g_ptr_array_add (items, add_item (self, e->kind, kind, urgent, title, detail));

done:
  if (added)
    *added = g_ptr_array_ref (items);
  return items->len;
}
