/* rlx-lineage.h — which history this node's steps belong to, across merges
 *
 * Two groups of one cohort that meet (founded apart, or a split that
 * healed) merge: the merge rule (rlx-leadership.h) keeps one group, and
 * the nodes of the other adopt its state through a snapshot, discarding
 * the steps they made since the groups parted. The lineage holds what that
 * needs, between the moment a node starts following a leader from outside
 * its cohort and the moment it has adopted that leader's snapshot:
 *
 *   changing    this node follows a leader from outside its cohort (its
 *               join says "merge"; the other side's term starts no new base)
 *   term base   this node's step when its current term began: where the
 *               histories part when their hashes do not tell
 *   rule        why the other group was kept (the "merged" event says it)
 *   former      the members that followed this node when its group
 *               yielded: told who leads once the winner announces its term
 *   identity    the lineage and fork of this node's state (RlxMsgLineage;
 *               docs/PROTOCOL.md, "Lineages"): made when it founds, taken
 *               from a snapshot it adopts
 *
 * State only: the coordinator decides the merge (rlx-coordinator-roles.c)
 * and the follower (rlx-follower.h) adopts the snapshot.
 *
 * Threads: the coordinator's (its thread-default main context).
 */
#pragma once

#include <json-glib/json-glib.h>
#include "core/cohort/rlx-msg.h"
#include "core/event/rlx-event.h"

G_BEGIN_DECLS

typedef struct _RlxLineage RlxLineage;

RlxLineage *rlx_lineage_new  (void);
void        rlx_lineage_free (RlxLineage *self);

/* This node follows a leader from outside its cohort (until the snapshot
 * is adopted: rlx_lineage_adopted). */
gboolean    rlx_lineage_is_changing (RlxLineage *self);
void        rlx_lineage_change      (RlxLineage *self);
/* This node's group yields in a merge: it changes lineage, @rule (taken)
 * says why, and @former (taken: our members, without us) are told who
 * leads later (rlx_lineage_take_former). */
void        rlx_lineage_yield       (RlxLineage *self, char *rule, GPtrArray *former);
/* The members to tell (taken), or NULL. */
GPtrArray  *rlx_lineage_take_former (RlxLineage *self);

/* The identity of this node's state (all zero before it founds or joins). */
const RlxMsgLineage *rlx_lineage_id (RlxLineage *self);
/* Whether @other is of this node's fork (terms comparable). */
gboolean    rlx_lineage_same_fork   (RlxLineage *self, const RlxMsgLineage *other);
/* This node founds a new fork at step @base: of lineage @lin (a resume:
 * the checkpoint's), else of a new lineage (@lin 0); its term base is
 * @base. */
void        rlx_lineage_found       (RlxLineage *self, guint64 lin, guint64 base);
/* This node leads on alone in its fork with the state it holds, at
 * @applied (its term base; a merge it was following is over, and the
 * members it had when it yielded are no longer told who leads). */
void        rlx_lineage_lead_on     (RlxLineage *self, guint64 applied);

/* A new term began with this node's replica at @applied: it is the base,
 * unless this node is changing lineage (the steps since its own term
 * began are what the merge discards). */
void        rlx_lineage_term_began  (RlxLineage *self, guint64 applied);
guint64     rlx_lineage_term_base   (RlxLineage *self);

/* The snapshot @s from @from is adopted; before it this node had @had
 * steps, its history (from step @history_from) and the snapshot's agreed
 * last at step @common (-1: at none), its hash at a step of the snapshot's
 * sparse hashes last agreed at @sparse_common (-1: at none; the newest such
 * step), and its term base was @term_base.
 * Returns the "merged" event when steps of ours were discarded (or the
 * lineage changed) — always when @had is past the snapshot's step — else NULL; from here the lineage is the snapshot's
 * (its identity, and its term base the sender's: where that term began). */
RlxEvent   *rlx_lineage_adopted     (RlxLineage *self, const char *from,
                                     const RlxMsgSnapshot *s, guint64 had, gint64 common,
                                     gint64 sparse_common, guint64 term_base,
                                     guint64 history_from, guint64 applied);

G_END_DECLS
