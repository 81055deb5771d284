/* cohort-harness.h — real `rlx-rank join` processes for the cohort tests
 *
 * Every test gets its own temporary XDG_RUNTIME_DIR and XDG_DATA_HOME, so
 * cohorts of different tests never meet. Nodes are spawned with GSubprocess
 * ($RLX_RANK join --local --json …); their stdout is read line by line on
 * the main context and parsed as JSON events. Every wait has a timeout.
 */
#pragma once

#include <gio/gio.h>
#include <json-glib/json-glib.h>
#include "core/p2p/rlx-link.h"

G_BEGIN_DECLS

typedef struct {
  char             *label;
  GSubprocess      *proc;
  GDataInputStream *out;
  GPtrArray        *events;      /* JsonObject*, in arrival order */
  GArray           *times;       /* gint64 monotonic µs of each event */
  gint64            spawned;     /* monotonic µs */
  gint64            t0;          /* monotonic µs its harness began (node_dump's times) */
  gboolean          eof;
  gboolean          exited;
  gboolean          signaled;
  int               exit_code;
  int               term_sig;
} Node;

typedef struct {
  char       *dir;
  char       *run_dir;
  char       *data_dir;
  GPtrArray  *nodes;             /* Node* */
  GHashTable *env;               /* extra environment of later spawns */
  gint64      started;           /* monotonic µs */
} Harness;

Harness    *harness_new        (void);
void        harness_free       (Harness *h);

/* Extra environment for the nodes spawned from now on (NULL value: back to
 * the harness's default for @key). */
void        harness_setenv     (Harness *h, const char *key, const char *value);

/* Spawn `rlx-rank ARGS…` (NULL-terminated) in the harness's environment. */
Node       *harness_spawn      (Harness *h, const char *label, ...) G_GNUC_NULL_TERMINATED;
/* `rlx-rank join --local --json --threads 1 --backend cpu ARGS…` */
Node       *harness_join       (Harness *h, const char *label, ...) G_GNUC_NULL_TERMINATED;

typedef gboolean (*HarnessPred) (gpointer data);
/* Run the main context until @pred is TRUE or @timeout_ms passed. */
gboolean    harness_wait       (HarnessPred pred, gpointer data, guint timeout_ms);
/* Run the main context for @ms (events keep coming in meanwhile). */
void        harness_pause      (guint ms);

/* Wait until @n has exited and its stdout is read; FALSE on timeout. */
gboolean    node_wait_exit     (Node *n, guint timeout_ms);
/* Wait for an event named @event with integer member @key >= @min (key NULL:
 * any such event) among events from index @from; its index or -1. */
int         node_wait_event    (Node *n, const char *event, const char *key, gint64 min,
                                guint from, guint timeout_ms);
int         node_find_event    (Node *n, const char *event, guint from);
void        node_kill          (Node *n, int sig);
const char *node_id            (Node *n);     /* from its "joined" event, or NULL */
/* step → hash string, from the node's "step" events. */
GHashTable *node_step_hashes   (Node *n);
gint64      node_max_step      (Node *n);
gboolean    node_exited_ok     (Node *n);
/* Events of @n as text, each after its arrival time (seconds since the
 * harness began), for failure messages. */
char       *node_dump          (Node *n);

/* Every node's events into the test log (for a failure). */
void        harness_dump       (Harness *h);
/* node_wait_event from the start, or fail the test (with harness_dump). */
int         harness_wait_event (Harness *h, Node *n, const char *event, const char *key,
                                gint64 min, guint timeout_ms);
/* Wait until @n exited with status 0, or fail the test. */
void        harness_assert_exit_ok (Harness *h, Node *n, guint timeout_ms);
/* The node among @nodes that joined as the leader, or fail the test. */
Node       *harness_leader     (Harness *h, Node **nodes, guint k);
/* The two nodes of a three-node cohort that are not @leader, in order. */
void        harness_others     (Node **nodes, Node *leader, Node **first, Node **second);
/* The three @nodes joined, kill -9 their leader once it reports step @at
 * (within @step_ms), and the other two, in order in @rest, finish their
 * steps and exit 0 within @exit_ms each; returns the killed leader. */
Node       *harness_kill_leader_at (Harness *h, Node **nodes, gint64 at, guint step_ms,
                                    guint exit_ms, Node **rest);
/* Every "leader" event any of @nodes reported names @leader at term
 * @term (nobody took over), or fail the test. */
void        harness_assert_led_by (Node **nodes, guint k, Node *leader, gint64 term);
/* Every step @a and @b both report from @from on has the same hash, or
 * fail the test (with harness_dump); how many they both report. */
guint       harness_same_hashes (Harness *h, Node *a, Node *b, gint64 from);
/* Every node of @n (@k of them) reports, for every round @first..@last,
 * the same hash and outer hash as node 0, which reports an outer round of
 * @hh inner steps with all @k contributions, @samples samples and a finite
 * loss; or fail the test (with harness_dump). */
void        harness_assert_outer_rounds (Harness *h, Node **n, guint k, gint64 first,
                                         gint64 last, guint hh, gint64 samples);
/* Event @i of @n. */
JsonObject *node_ev            (Node *n, int i);
/* The index of @n's "step" event of @step, or -1. */
int         node_step          (Node *n, gint64 step);

/* Freeze @victim (SIGSTOP) of a three-node cohort until @leader times it
 * out by its heartbeats and goes on with two (@other 3 steps further), then
 * thaw it (SIGCONT) and wait until it says it rejoins and gets a snapshot
 * from @leader; the snapshot's step, or fail the test. */
gint64      harness_freeze_thaw (Harness *h, Node *leader, Node *victim, Node *other,
                                 guint timeout_ms);

/* The cohort's checkpoint (in the harness's data folder) holds @n_params
 * finite floats, or fail the test. */
void        harness_assert_checkpoint_finite (Harness *h, const char *cohort, gsize n_params);

/* A process's trace (RLX_TRACE=DIR: DIR/trace-PID.tsv): "what step" → the
 * first time it was recorded (ns); and one entry of it, or fail the test. */
GHashTable *harness_read_trace (const char *path);
gint64      harness_trace_at   (GHashTable *trace, const char *what, gint64 step);

/* A link (rlx-unix-link.h) to a bare socket that nothing reads unless the
 * caller does: its end in *@fd, for the caller to write to and close. The
 * link writes through the socket only, whose send buffer is 64 KiB, so a
 * frame of more than that stays in flight. */
RlxLink    *harness_stalled_link (const char *peer, int *fd);

gint64      ev_int             (JsonObject *o, const char *key);
const char *ev_str             (JsonObject *o, const char *key);
double      ev_num             (JsonObject *o, const char *key);

G_END_DECLS
