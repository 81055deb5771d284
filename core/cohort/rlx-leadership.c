/* rlx-leadership.c — see rlx-leadership.h */
#include "rlx-config.h"
#include "rlx-leadership.h"

#include <string.h>

struct _RlxLeadership {
  GObject    parent_instance;
  char      *self_id;
  RlxRole    role;
  char      *leader;
  guint64    term;
  GPtrArray *members;
};

G_DEFINE_FINAL_TYPE (RlxLeadership, rlx_leadership, G_TYPE_OBJECT)

static void
rlx_leadership_finalize (GObject *object)
{
  RlxLeadership *self = RLX_LEADERSHIP (object);

  g_free (self->self_id);
  g_free (self->leader);
  g_ptr_array_unref (self->members);
  G_OBJECT_CLASS (rlx_leadership_parent_class)->finalize (object);
}

static void
rlx_leadership_class_init (RlxLeadershipClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = rlx_leadership_finalize;
}

static void
rlx_leadership_init (RlxLeadership *self)
{
  self->members = g_ptr_array_new_with_free_func (g_free);
}

RlxLeadership *
rlx_leadership_new (const char *self_id)
{
  RlxLeadership *self = g_object_new (RLX_TYPE_LEADERSHIP, NULL);

  self->self_id = g_strdup (self_id);
  return self;
}

RlxRole rlx_leadership_get_role (RlxLeadership *self) { return self->role; }
const char *rlx_leadership_get_leader (RlxLeadership *self) { return self->leader; }
guint64 rlx_leadership_get_term (RlxLeadership *self) { return self->term; }
GPtrArray *rlx_leadership_get_members (RlxLeadership *self) { return self->members; }

gboolean
rlx_leadership_is_leader (RlxLeadership *self)
{
  return self->role == RLX_ROLE_LEADER;
}

guint
rlx_leadership_set (RlxLeadership *self, RlxRole role, const char *leader, guint64 term)
{
  guint changed = 0;

  if (self->role != role)
    {
      self->role = role;
      changed |= 1;
    }
  if (g_strcmp0 (self->leader, leader) != 0)
    {
      g_free (self->leader);
      self->leader = g_strdup (leader);
      changed |= 2;
    }
  if (self->term != term)
    {
      self->term = term;
      changed |= 4;
    }
  return changed;
}

void
rlx_leadership_set_members (RlxLeadership *self, GPtrArray *members)
{
  g_return_if_fail (members != NULL);
  g_ptr_array_unref (self->members);
  self->members = members;
}

static gint
index_of (GPtrArray *a, const char *id)
{
  for (guint i = 0; id && i < a->len; i++)
    if (strcmp (g_ptr_array_index (a, i), id) == 0)
      return (gint) i;
  return -1;
}

gboolean
rlx_leadership_has_member (RlxLeadership *self, const char *id)
{
  return index_of (self->members, id) >= 0;
}

gboolean
rlx_leadership_add_member (RlxLeadership *self, const char *id)
{
  if (index_of (self->members, id) >= 0)
    return FALSE;
  g_ptr_array_add (self->members, g_strdup (id));
  return TRUE;
}

gboolean
rlx_leadership_remove_member (RlxLeadership *self, const char *id)
{
  gint i = index_of (self->members, id);

  if (i < 0)
    return FALSE;
  g_ptr_array_remove_index (self->members, (guint) i);
  return TRUE;
}

const char *
rlx_leadership_successor (RlxLeadership *self, RlxLeadershipAliveFunc alive, gpointer user_data)
{
  for (guint i = 0; i < self->members->len; i++)
    {
      const char *id = g_ptr_array_index (self->members, i);
      if (alive (id, user_data))
        return id;
    }
  return NULL;
}

int
rlx_leadership_pick_founder (const RlxFounderCandidate *c, guint n)
{
  int best = -1;

  for (guint i = 0; i < n; i++)
    {
      if (c[i].join_only)
        continue;
      if (best < 0 || c[i].checkpoint > c[best].checkpoint ||
          (c[i].checkpoint == c[best].checkpoint && strcmp (c[i].id, c[best].id) < 0))
        best = (int) i;
    }
  return best;
}

/* Between two forks of one lineage (docs/PROTOCOL.md, "Lineages"): > 0
 * when @a's began earlier and it holds steps past where @b's began (@b
 * resumed from an older state of the lineage, or led on from one), < 0 the
 * other way round, 0 when this does not decide. */
static int
fork_order (const RlxGroupInfo *a, const RlxGroupInfo *b)
{
  const RlxMsgLineage *x = &a->lineage, *y = &b->lineage;

  if (x->lin == 0 || x->lin != y->lin || x->base == y->base)
    return 0;
  if (x->base < y->base)
    return a->step > y->base ? 1 : 0;
  return b->step > x->base ? -1 : 0;
}

int
rlx_leadership_merge_compare (const RlxGroupInfo *a, const RlxGroupInfo *b)
{
  int f;

  if (a->members != b->members)
    return a->members > b->members ? 1 : -1;
  if ((f = fork_order (a, b)) != 0)
    return f;
  if (a->step != b->step)
    return a->step > b->step ? 1 : -1;
  return -strcmp (a->leader, b->leader);
}

RlxGroupInfo
rlx_leadership_check_claim (const RlxGroupInfo *claimed, guint seen, guint64 backed)
{
  RlxGroupInfo c = *claimed;

  c.members = MIN (c.members, MAX (seen, 1));
  if (seen > 1 && backed <= (G_MAXUINT64 - RLX_CLAIM_STEP_SLACK) / 2)
    c.step = MIN (c.step, 2 * backed + RLX_CLAIM_STEP_SLACK);
  return c;
}

const char *
rlx_leadership_merge_reason (const RlxGroupInfo *a, const RlxGroupInfo *b)
{
  if (a->members != b->members)
    return "more members";
  if (fork_order (a, b) != 0)
    return "committed steps past where the other's fork began";
  if (a->step != b->step)
    return "more committed steps";
  return "smaller leader id";
}
