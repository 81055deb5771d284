/* rlx-leadership.h — who leads: role, term, leader, members, and the rules
 *
 * The state a node holds about leadership (its role, the term, the leader's
 * id, the members in seniority order) and the protocol's three decisions
 * about it, as pure functions of what the node knows (docs/PROTOCOL.md):
 *
 *   successor  the most senior member still reachable takes over when the
 *              leader is gone (seniority = order of admission, which the
 *              leader assigns: the founder first, then members as admitted);
 *   founder    before any cohort exists, the node that may found (not
 *              join-only) with the newest checkpoint founds, ties broken by
 *              the smaller node id — never by wall clocks;
 *   merge      when two leaders of one cohort name meet (a split healed),
 *              the group with more members is kept, then — between two
 *              forks of one lineage — the older fork when it holds steps
 *              past where the newer one began (a resume never outranks
 *              the lineage's newer committed steps), then the one that
 *              has committed more steps, then the one whose leader has
 *              the smaller node id; the other yields.
 *
 * The coordinator changes the state only through its one transition
 * function, which calls rlx_leadership_set.
 *
 * Threads: the main context only.
 */
#pragma once

#include <glib-object.h>
#include "core/cohort/rlx-msg.h"

G_BEGIN_DECLS

#define RLX_TYPE_LEADERSHIP (rlx_leadership_get_type ())
G_DECLARE_FINAL_TYPE (RlxLeadership, rlx_leadership, RLX, LEADERSHIP, GObject)

RlxLeadership *rlx_leadership_new        (const char *self_id);
RlxRole        rlx_leadership_get_role   (RlxLeadership *self);
const char    *rlx_leadership_get_leader (RlxLeadership *self);
guint64        rlx_leadership_get_term   (RlxLeadership *self);
gboolean       rlx_leadership_is_leader  (RlxLeadership *self);
/* Returns which of role / leader / term changed (bit 0, 1, 2). */
guint          rlx_leadership_set        (RlxLeadership *self, RlxRole role, const char *leader,
                                          guint64 term);

/* Members, seniority order (char*; owned by the state). */
GPtrArray     *rlx_leadership_get_members (RlxLeadership *self);
/* Replace the members with @members (taken). */
void           rlx_leadership_set_members (RlxLeadership *self, GPtrArray *members);
gboolean       rlx_leadership_has_member  (RlxLeadership *self, const char *id);
/* Admit @id at the end (the least senior); FALSE if already a member. */
gboolean       rlx_leadership_add_member  (RlxLeadership *self, const char *id);
gboolean       rlx_leadership_remove_member (RlxLeadership *self, const char *id);

typedef gboolean (*RlxLeadershipAliveFunc) (const char *id, gpointer user_data);
/* The most senior member for which @alive is TRUE, or NULL. */
const char    *rlx_leadership_successor  (RlxLeadership *self, RlxLeadershipAliveFunc alive,
                                          gpointer user_data);

typedef struct {
  const char *id;
  guint64     checkpoint;   /* the newest state it could found with: its checkpoint
                             * step, or the step it holds (0: none) */
  gboolean    join_only;    /* it never founds */
} RlxFounderCandidate;
/* The index of the node that founds, or -1 when none may. */
int            rlx_leadership_pick_founder (const RlxFounderCandidate *c, guint n);

typedef struct {
  const char   *leader;
  guint         members;
  guint64       step;       /* committed steps */
  RlxMsgLineage lineage;    /* of its leader's state */
} RlxGroupInfo;
/* > 0: @a is kept, < 0: @b is kept (0 only for the same leader). */
int            rlx_leadership_merge_compare (const RlxGroupInfo *a, const RlxGroupInfo *b);
/* "more members", "committed steps past where the other's fork began",
 * "more committed steps" or "smaller leader id": the part of the rule that
 * decided between @a and @b. */
const char    *rlx_leadership_merge_reason  (const RlxGroupInfo *a, const RlxGroupInfo *b);

/* What of a group's claim (@claimed: its leader's hello) a node can check
 * (issue 29, item 9; docs/PROTOCOL.md, "Split and merge"): @seen, the
 * members it sees in that group (the leader and every peer whose own hello
 * says it follows that leader), and @backed, the newest step one of those
 * followers said it holds. The members count up to @seen; the committed
 * steps, with a follower, up to 2 × @backed + RLX_CLAIM_STEP_SLACK (hellos
 * are not all sent at the same moment); a group of one's steps are its own
 * word (there is nobody to back them, and nothing but one node to lose). */
#define RLX_CLAIM_STEP_SLACK 1024
RlxGroupInfo   rlx_leadership_check_claim (const RlxGroupInfo *claimed, guint seen, guint64 backed);

G_END_DECLS
