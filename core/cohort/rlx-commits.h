/* rlx-commits.h — the leader's commits waiting for acknowledgements
 *
 * A commit is "committed" once the members have acknowledged it, not when
 * it was written to a socket. The leader publishes a commit here with the
 * members it waits for; acknowledgements take members off it; the oldest
 * commits every member acknowledged (members that left are not waited
 * for) are reported in order: the "step" event (ops->committed), then a
 * checkpoint if one is due (the last step: always, then finishing). A
 * member that does not acknowledge within twice the heartbeat timeout, or
 * more than 64 commits waiting, reports the oldest without it
 * ("ack-timeout").
 *
 * It also keeps what each member acknowledged (and a bucket it sent that
 * waits for the acknowledgement it builds on).
 *
 * Threads: the coordinator's (the context's).
 */
#pragma once

#include "core/cohort/rlx-cohort-context.h"
#include "core/cohort/rlx-round.h"

G_BEGIN_DECLS

typedef struct _RlxCommits RlxCommits;

/* What the leader knows about a member's state. */
typedef struct {
  guint64  step, hash;             /* its last acknowledgement */
  gboolean known;
  RlxMsg   held;                   /* a grad waiting for the ack it builds on */
  gboolean has_held;
  gboolean timed_out;              /* reported "ack-timeout" since its last acknowledgement:
                                    * the commits after are reported without it silently */
} RlxMemberAcks;

RlxCommits *rlx_commits_new     (RlxCohortContext *ctx);
void        rlx_commits_free    (RlxCommits *self);
/* Commit @step (parameters @hash after it; after an outer round, θ and the
 * outer momentum @outer_hash, else 0) of @round (its loss, samples,
 * contributors, late and rejected buckets are copied) in a cohort of
 * @n_members, waiting for @waiting (taken); @final: the last step. */
void        rlx_commits_publish (RlxCommits *self, guint64 step, guint64 hash,
                                 guint64 outer_hash, RlxRound *round, guint n_members,
                                 gboolean final, GPtrArray *waiting);
/* What @id acknowledged (created, unknown, on first use). */
RlxMemberAcks *rlx_commits_member (RlxCommits *self, const char *id);
/* @id has @step with @hash (acknowledged, or sent to it in a snapshot):
 * noted, and it waits no more for that commit and those before. The
 * acknowledgement of a published commit is checked: @hash against its
 * hash, then — when both are known (not 0) — @outer_hash against its outer
 * hash; the first that differs is reported ("diverged", with outer when it
 * is the outer hash) and the member does not count as agreeing. */
void        rlx_commits_member_acked  (RlxCommits *self, const char *id, guint64 step,
                                       guint64 hash, guint64 outer_hash);
void        rlx_commits_forget_member (RlxCommits *self, const char *id);
/* The members holding a bucket (a copy of their ids). */
GPtrArray  *rlx_commits_members_holding (RlxCommits *self);
/* Report what can be reported. */
void        rlx_commits_check   (RlxCommits *self);
/* Forget every commit not reported and every member's state (the leader
 * stepped down). */
void        rlx_commits_clear   (RlxCommits *self);

G_END_DECLS
