/* rlx-timeline.c — membership and leader timeline, and the hash light (see
 * the header) */
#include "rlx-config.h"
#include "rlx-timeline.h"

#include <glib/gi18n.h>
#include <inttypes.h>
#include <stdlib.h>

/* ── marks ─────────────────────────────────────────────────────────────── */

struct _RlxTimelineMark
{
  GObject     parent_instance;
  guint64     step;
  RlxMarkKind kind;
  char       *title;
};

G_DEFINE_FINAL_TYPE (RlxTimelineMark, rlx_timeline_mark, G_TYPE_OBJECT)

enum { MARK_PROP_0, MARK_PROP_STEP, MARK_PROP_KIND, MARK_PROP_TITLE, MARK_PROP_ICON_NAME,
       MARK_N_PROPS };

static const char *
mark_icon (RlxMarkKind kind)
{
  switch (kind)
    {
    case RLX_MARK_JOIN:   return "list-add-symbolic";
    case RLX_MARK_LEAVE:  return "list-remove-symbolic";
    case RLX_MARK_LEADER: return "starred-symbolic";
    case RLX_MARK_MERGE:
    default:              return "dialog-warning-symbolic";
    }
}

static void
rlx_timeline_mark_finalize (GObject *object)
{
  g_free (RLX_TIMELINE_MARK (object)->title);
  G_OBJECT_CLASS (rlx_timeline_mark_parent_class)->finalize (object);
}

static void
rlx_timeline_mark_get_property (GObject *object, guint id, GValue *value, GParamSpec *pspec)
{
  RlxTimelineMark *self = RLX_TIMELINE_MARK (object);

  switch (id)
    {
    case MARK_PROP_STEP: g_value_set_uint64 (value, self->step); break;
    case MARK_PROP_KIND: g_value_set_int (value, self->kind); break;
    case MARK_PROP_TITLE: g_value_set_string (value, self->title); break;
    case MARK_PROP_ICON_NAME: g_value_set_string (value, mark_icon (self->kind)); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, pspec);
    }
}

static void
rlx_timeline_mark_class_init (RlxTimelineMarkClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  const GParamFlags f = G_PARAM_READABLE | G_PARAM_STATIC_STRINGS;

  object_class->finalize = rlx_timeline_mark_finalize;
  object_class->get_property = rlx_timeline_mark_get_property;
  g_object_class_install_property (object_class, MARK_PROP_STEP,
                                   g_param_spec_uint64 ("step", NULL, NULL, 0, G_MAXUINT64, 0, f));
  g_object_class_install_property (object_class, MARK_PROP_KIND,
                                   g_param_spec_int ("kind", NULL, NULL, 0, RLX_MARK_MERGE, 0, f));
  g_object_class_install_property (object_class, MARK_PROP_TITLE,
                                   g_param_spec_string ("title", NULL, NULL, NULL, f));
  g_object_class_install_property (object_class, MARK_PROP_ICON_NAME,
                                   g_param_spec_string ("icon-name", NULL, NULL, NULL, f));
}

static void
rlx_timeline_mark_init (RlxTimelineMark *self)
{
}

guint64 rlx_timeline_mark_get_step (RlxTimelineMark *self) { return self->step; }
RlxMarkKind rlx_timeline_mark_get_kind (RlxTimelineMark *self) { return self->kind; }
const char *rlx_timeline_mark_get_title (RlxTimelineMark *self) { return self->title; }

/* ── the timeline ──────────────────────────────────────────────────────── */

struct _RlxTimeline
{
  GObject    parent_instance;
  GPtrArray *marks;          /* RlxTimelineMark*, oldest first (the model is newest first) */
  char      *leader;         /* who leads, and in which term, as last marked */
  guint64    term;

  /* the hash light */
  gboolean   seen_step;
  guint64    step;           /* the last committed step */
  gboolean   by_leader;      /* its agreement was counted (we lead) */
  guint64    agree, members;
  gboolean   alarm;
  char      *diverged_node;  /* the last divergence reported */
  guint64    diverged_step;
  char      *hash_text;      /* made on demand */
  gboolean   hash_text_stale;

  GHashTable *ranks;         /* node id → RankCounts*: late and rejected gradients */
};

typedef struct {
  guint64  late, rejected;
  guint64  last_late;        /* the step it last missed */
} RankCounts;

static void rlx_timeline_model_init (GListModelInterface *iface);
G_DEFINE_FINAL_TYPE_WITH_CODE (RlxTimeline, rlx_timeline, G_TYPE_OBJECT,
                               G_IMPLEMENT_INTERFACE (G_TYPE_LIST_MODEL, rlx_timeline_model_init))

enum { PROP_0, PROP_HASH_TEXT, PROP_HASH_ALARM, N_PROPS };
static GParamSpec *props[N_PROPS];

static GType
model_item_type (GListModel *model)
{
  return RLX_TYPE_TIMELINE_MARK;
}

static guint
model_n_items (GListModel *model)
{
  return RLX_TIMELINE (model)->marks->len;
}

static gpointer
model_item (GListModel *model, guint position)
{
  GPtrArray *marks = RLX_TIMELINE (model)->marks;

  if (position >= marks->len)
    return NULL;
  return g_object_ref (g_ptr_array_index (marks, marks->len - 1 - position));
}

static void
rlx_timeline_model_init (GListModelInterface *iface)
{
  iface->get_item_type = model_item_type;
  iface->get_n_items = model_n_items;
  iface->get_item = model_item;
}

static void
rlx_timeline_finalize (GObject *object)
{
  RlxTimeline *self = RLX_TIMELINE (object);

  g_ptr_array_unref (self->marks);
  g_free (self->leader);
  g_free (self->diverged_node);
  g_free (self->hash_text);
  g_hash_table_unref (self->ranks);
  G_OBJECT_CLASS (rlx_timeline_parent_class)->finalize (object);
}

static void
rlx_timeline_get_property (GObject *object, guint id, GValue *value, GParamSpec *pspec)
{
  RlxTimeline *self = RLX_TIMELINE (object);

  switch (id)
    {
    case PROP_HASH_TEXT: g_value_set_string (value, rlx_timeline_get_hash_text (self)); break;
    case PROP_HASH_ALARM: g_value_set_boolean (value, self->alarm); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, pspec);
    }
}

static void
rlx_timeline_class_init (RlxTimelineClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  const GParamFlags f = G_PARAM_READABLE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS;

  object_class->finalize = rlx_timeline_finalize;
  object_class->get_property = rlx_timeline_get_property;
  props[PROP_HASH_TEXT] = g_param_spec_string ("hash-text", NULL, NULL, NULL, f);
  props[PROP_HASH_ALARM] = g_param_spec_boolean ("hash-alarm", NULL, NULL, FALSE, f);
  g_object_class_install_properties (object_class, N_PROPS, props);
}

static void
rlx_timeline_init (RlxTimeline *self)
{
  self->marks = g_ptr_array_new_with_free_func (g_object_unref);
  self->ranks = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
}

static RankCounts *
rank (RlxTimeline *self, const char *node)
{
  RankCounts *c = g_hash_table_lookup (self->ranks, node);

  if (c == NULL)
    {
      c = g_new0 (RankCounts, 1);
      g_hash_table_insert (self->ranks, g_strdup (node), c);
    }
  return c;
}

static int
by_name (gconstpointer a, gconstpointer b)
{
  return g_strcmp0 (*(const char *const *) a, *(const char *const *) b);
}

char *
rlx_timeline_dup_ranks_text (RlxTimeline *self)
{
  g_autofree gpointer *names = NULL;
  g_autoptr(GString) s = NULL;
  guint n;

  g_return_val_if_fail (RLX_IS_TIMELINE (self), NULL);
  if (g_hash_table_size (self->ranks) == 0)
    return NULL;
  names = g_hash_table_get_keys_as_array (self->ranks, &n);
  qsort (names, n, sizeof *names, by_name);
  s = g_string_new (NULL);
  for (guint i = 0; i < n; i++)
    {
      const char *node = names[i];
      RankCounts *c = g_hash_table_lookup (self->ranks, node);

      if (s->len)
        g_string_append (s, "; ");
      /* Translators: a node id, its gradients that came too late and that
       * were thrown away */
      g_string_append_printf (s, _("%s: %" PRIu64 " late, %" PRIu64 " rejected"), node, c->late,
                              c->rejected);
      if (c->late > 0 && c->last_late + RLX_STRAGGLER_STEPS >= self->step)
        /* Translators: appended to a rank that missed a deadline lately */
        g_string_append (s, _(", holds rounds up"));
    }
  return g_string_free (g_steal_pointer (&s), FALSE);
}

RlxTimeline *
rlx_timeline_new (void)
{
  return g_object_new (RLX_TYPE_TIMELINE, NULL);
}

static void
add_mark (RlxTimeline *self, RlxMarkKind kind, guint64 step, char *title)
{
  RlxTimelineMark *m = g_object_new (RLX_TYPE_TIMELINE_MARK, NULL);
  guint dropped = 0;

  m->kind = kind;
  m->step = step;
  m->title = title;
  if (self->marks->len >= RLX_TIMELINE_MAX)
    {
      dropped = self->marks->len - RLX_TIMELINE_MAX + 1;
      g_ptr_array_remove_range (self->marks, 0, dropped);
      /* the oldest are the model's last */
      g_list_model_items_changed (G_LIST_MODEL (self), self->marks->len, dropped, 0);
    }
  g_ptr_array_add (self->marks, m);
  g_list_model_items_changed (G_LIST_MODEL (self), 0, 0, 1);
}

static const char *
who (const char *node, const char *self_id)
{
  if (self_id && g_strcmp0 (node, self_id) == 0)
    return _("this node");
  return node && *node ? node : _("a rank");
}

static void
set_alarm (RlxTimeline *self, gboolean alarm)
{
  if (self->alarm == alarm)
    return;
  self->alarm = alarm;
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_HASH_ALARM]);
}

static void
hash_changed (RlxTimeline *self, gboolean notify)
{
  self->hash_text_stale = TRUE;
  /* the step itself moves hundreds of times a second: a view reads the
   * text when it draws (rlx_timeline_get_hash_text); only a change of what
   * it says besides the step is notified */
  if (notify)
    g_object_notify_by_pspec (G_OBJECT (self), props[PROP_HASH_TEXT]);
}

static void
note_step (RlxTimeline *self, const RlxEventStep *s)
{
  gboolean news = !self->seen_step || s->has_agree != self->by_leader ||
                  (s->has_agree && (s->agree != self->agree || s->members != self->members));

  self->seen_step = TRUE;
  self->step = s->step;
  self->by_leader = s->has_agree;
  self->agree = s->agree;
  self->members = s->members;
  /* agreeing again after a divergence: every rank (on the leader), or any
   * later commit applied here (on a member) */
  if (self->alarm && s->step > self->diverged_step &&
      (!s->has_agree || s->agree >= s->members))
    {
      set_alarm (self, FALSE);
      news = TRUE;
    }
  hash_changed (self, news);
}

gboolean
rlx_timeline_add_event (RlxTimeline *self, const RlxEvent *e, const char *self_id)
{
  g_return_val_if_fail (RLX_IS_TIMELINE (self), FALSE);
  g_return_val_if_fail (e != NULL, FALSE);

  switch (e->kind)
    {
    case RLX_EVENT_STEP:
      note_step (self, &e->u.step);
      return FALSE;
    case RLX_EVENT_LATE:
      {
        RankCounts *c = rank (self, e->u.node_step.node ? e->u.node_step.node : "?");
        c->late++;
        c->last_late = MAX (c->last_late, e->u.node_step.step);
        return FALSE;
      }
    case RLX_EVENT_REJECTED:
      /* a gradient the leader threw away (not a signalling message) */
      if (e->u.rejected.has_step && e->u.rejected.by == NULL)
        rank (self, e->u.rejected.node ? e->u.rejected.node : "?")->rejected++;
      return FALSE;
    case RLX_EVENT_DIVERGED:
      g_free (self->diverged_node);
      self->diverged_node = g_strdup (e->u.diverged.node);
      self->diverged_step = e->u.diverged.step;
      set_alarm (self, TRUE);
      hash_changed (self, TRUE);
      return FALSE;
    case RLX_EVENT_JOINED:
      /* Translators: %s is a cohort name, the second its role */
      add_mark (self, RLX_MARK_JOIN, e->u.joined.step,
                g_strdup_printf (_("This node joined “%s” as %s"),
                                 e->u.joined.cohort ? e->u.joined.cohort : "",
                                 e->u.joined.role ? e->u.joined.role : ""));
      return TRUE;
    case RLX_EVENT_MEMBER_JOINED:
      /* Translators: %s is a node id */
      add_mark (self, RLX_MARK_JOIN, e->u.member.step,
                g_strdup_printf (_("%s joined"), who (e->u.member.node, self_id)));
      return TRUE;
    case RLX_EVENT_MEMBER_LEFT:
      if (e->u.member.node)
        g_hash_table_remove (self->ranks, e->u.member.node);
      /* Translators: a node id, and why it left */
      add_mark (self, RLX_MARK_LEAVE, e->u.member.step,
                g_strdup_printf (_("%s left: %s"), who (e->u.member.node, self_id),
                                 e->u.member.reason ? e->u.member.reason : ""));
      return TRUE;
    case RLX_EVENT_LEADER:
      /* the same leader in the same term is no change */
      if (self->leader && g_strcmp0 (self->leader, e->u.leader.node) == 0 &&
          self->term == e->u.leader.term)
        return FALSE;
      g_free (self->leader);
      self->leader = g_strdup (e->u.leader.node);
      self->term = e->u.leader.term;
      /* Translators: the term's number, then "this node" or a node id */
      add_mark (self, RLX_MARK_LEADER, e->u.leader.step,
                g_strdup_printf (_("Term %" PRIu64 ": %s leads"), e->u.leader.term,
                                 who (e->u.leader.node, self_id)));
      return TRUE;
    case RLX_EVENT_MERGED:
      /* Translators: the steps a merge threw away, and the leader kept */
      add_mark (self, RLX_MARK_MERGE, e->u.merged.from_step,
                g_strdup_printf (_("Merged: steps %" PRIu64 "–%" PRIu64
                                   " dropped, %s leads"),
                                 e->u.merged.from_step, e->u.merged.to_step,
                                 who (e->u.merged.node, self_id)));
      return TRUE;
    default:
      return FALSE;
    }
}

void
rlx_timeline_clear (RlxTimeline *self)
{
  guint n;

  g_return_if_fail (RLX_IS_TIMELINE (self));
  n = self->marks->len;
  g_ptr_array_set_size (self->marks, 0);
  g_clear_pointer (&self->leader, g_free);
  self->term = 0;
  self->seen_step = FALSE;
  g_clear_pointer (&self->diverged_node, g_free);
  g_hash_table_remove_all (self->ranks);
  set_alarm (self, FALSE);
  hash_changed (self, TRUE);
  if (n)
    g_list_model_items_changed (G_LIST_MODEL (self), 0, n, 0);
}

const char *
rlx_timeline_get_hash_text (RlxTimeline *self)
{
  g_autoptr(GString) s = NULL;

  g_return_val_if_fail (RLX_IS_TIMELINE (self), NULL);
  if (!self->hash_text_stale)
    return self->hash_text;
  self->hash_text_stale = FALSE;
  g_clear_pointer (&self->hash_text, g_free);
  if (!self->seen_step && self->diverged_node == NULL)
    return NULL;
  s = g_string_new (NULL);
  if (self->alarm)
    /* Translators: a node id and the step its parameters parted at */
    g_string_printf (s, _("%s diverged at step %" PRIu64), self->diverged_node,
                     self->diverged_step);
  else if (self->by_leader)
    /* Translators: "3 of 3 agree at step 120": ranks whose parameter hashes match */
    g_string_printf (s, _("%" PRIu64 " of %" PRIu64 " agree at step %"
                          PRIu64),
                     self->agree, MAX (self->members, self->agree), self->step);
  else
    g_string_printf (s, _("Agrees with the leader at step %" PRIu64), self->step);
  if (!self->alarm && self->diverged_node)
    /* Translators: appended: the last divergence, healed since */
    g_string_append_printf (s, _(" (%s diverged at step %" PRIu64 ")"),
                            self->diverged_node, self->diverged_step);
  self->hash_text = g_string_free (g_steal_pointer (&s), FALSE);
  return self->hash_text;
}

gboolean
rlx_timeline_get_hash_alarm (RlxTimeline *self)
{
  g_return_val_if_fail (RLX_IS_TIMELINE (self), FALSE);
  return self->alarm;
}
