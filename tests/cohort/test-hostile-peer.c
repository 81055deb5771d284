/* test-hostile-peer.c — a member with the key that lies, against a real
 * cohort (issue 29, item 8), and a peer that holds frames half-sent
 *
 *   /cohort/hostile/claimed-speed   a member whose gradients claim they took
 *       1 µs (--fault-claim-fast) while each really takes 30 ms more
 *       (--fault-slow-ms) does not get most of each round: the leader
 *       measures every member's speed itself (from the step frame that
 *       assigned the slice to the bucket's arrival), so the liar's share
 *       falls to what it really does, and no member ever gets more than
 *       half of a round of three.
 */
#include "rlx-config.h"
#include "cohort-harness.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <glib/gstdio.h>
#include <glib-unix.h>
#include "core/p2p/rlx-link-stream.h"
#include "core/wire/rlx-wire.h"

#define T 60000

static void
test_claimed_speed (void)
{
  Harness *h = harness_new ();
  Node *a, *b, *c;
  gint64 sum = 0, n = 0, most = 0;

  a = harness_join (h, "a", "--cohort", "liar", "--batch", "16", "--steps", "100000",
                    "--wait-members", "3", NULL);
  harness_wait_event (h, a, "joined", NULL, 0, T);
  b = harness_join (h, "b", "--cohort", "liar", "--batch", "16", "--steps", "100000", NULL);
  c = harness_join (h, "c", "--cohort", "liar", "--batch", "16", "--steps", "100000",
                    "--fault-claim-fast", "--fault-slow-ms", "30", NULL);
  harness_wait_event (h, c, "step", "step", 100, T);
  for (gint64 s = 60; s <= 100; s++)
    {
      int e = node_step (c, s);
      if (e < 0)
        continue;
      sum += ev_int (node_ev (c, e), "assigned");
      most = MAX (most, ev_int (node_ev (c, e), "assigned"));
      n++;
    }
  g_assert_cmpint (n, >, 20);
  /* Less than a fair third on average (it is 30 times slower), and never
   * more than half a round. Before the leader measured, it got 23 or 24
   * of 48 every step (the half cap; all of them without it). */
  if (sum >= 16 * n || most > 24)
    {
      harness_dump (h);
      g_error ("the member that lies about its speed got %" G_GINT64_FORMAT " samples a step "
               "on average (at most %" G_GINT64_FORMAT ") of 48", sum / n, most);
    }
  for (guint k = 0; k < h->nodes->len; k++)
    node_kill (g_ptr_array_index (h->nodes, k), SIGTERM);
  for (guint k = 0; k < h->nodes->len; k++)
    harness_assert_exit_ok (h, g_ptr_array_index (h->nodes, k), 20000);
  (void) b;
  harness_free (h);
}

static gboolean
never (gpointer data)
{
  return FALSE;
}

/* Index of the first event @event of @n from @from whose "node" is @node
 * and whose "reason" holds @text (NULL: any), or -1. */
static int
find_about (Node *n, const char *event, guint from, const char *node, const char *text)
{
  for (int i = node_find_event (n, event, from); i >= 0; i = node_find_event (n, event, (guint) i + 1))
    if (g_strcmp0 (ev_str (node_ev (n, i), "node"), node) == 0 &&
        (text == NULL || strstr (ev_str (node_ev (n, i), "reason"), text)))
      return i;
  return -1;
}

/* Issue 29, item 9: a node with the key leads a group of its own (it was
 * cut off from the cohort, --fault-partition) and its hellos claim 256
 * members and step 10^8 (--fault-claim-members, --fault-claim-step). When
 * the cut heals, the honest group of three meets it. Before the claims
 * were checked, its leader yielded (the rule: more members) and all three
 * adopted the liar's parameters ("merged", discarding their steps). Now
 * the leader counts only the members it sees following the claimant (none
 * but itself), says so ("rejected" naming it), and the three train on
 * with one hash; the liar's announcements of a new term move nobody. */
static void
test_claimed_group (void)
{
  Harness *h = harness_new ();
  g_autofree char *cut = g_build_filename (h->dir, "partition", NULL);
  static const char *const ids[] = { "a", "b", "c" };
  Node *n[3], *d;
  guint mark[3];
  gint64 at;
  int i;

  g_assert_true (g_file_set_contents (cut, "a b c\nd\n", -1, NULL));
  for (guint k = 0; k < 3; k++)
    {
      n[k] = harness_join (h, ids[k], "--cohort", "grab", "--node", ids[k], "--batch", "8",
                           "--steps", "100000", "--wait-members", k == 0 ? "3" : "1",
                           "--heartbeat-timeout-ms", "1000", "--fault-partition", cut, NULL);
      harness_wait_event (h, n[k], "joined", NULL, 0, T);
    }
  harness_wait_event (h, n[0], "step", "step", 5, T);
  d = harness_join (h, "d", "--cohort", "grab", "--node", "d", "--batch", "8", "--steps", "100000",
                    "--heartbeat-timeout-ms", "1000", "--fault-partition", cut,
                    "--fault-claim-members", "256", "--fault-claim-step", "100000000", NULL);
  harness_wait_event (h, d, "step", "step", 3, T);
  for (guint k = 0; k < 3; k++)
    mark[k] = n[k]->events->len;
  g_assert_cmpint (g_unlink (cut), ==, 0);

  /* a meets d's claim, cannot check it, and says so */
  for (gint64 waited = 0; find_about (n[0], "rejected", mark[0], "d", "cannot check") < 0; waited += 100)
    {
      if (waited > T || find_about (n[0], "merged", mark[0], "d", NULL) >= 0 ||
          find_about (n[1], "merged", mark[1], "d", NULL) >= 0)
        {
          harness_dump (h);
          g_error ("the honest group did not refuse the claim it cannot check (it yielded, "
                   "or said nothing)");
        }
      harness_wait (never, NULL, 100);
    }
  /* ... and trains on, three of them, while d keeps announcing itself */
  i = node_find_event (n[0], "step", mark[0]);
  g_assert_cmpint (i, >=, 0);
  at = node_max_step (n[0]);
  harness_wait_event (h, n[0], "step", "step", at + 40, T);
  harness_wait_event (h, n[2], "step", "step", at + 40, T);
  for (guint k = 0; k < 3; k++)
    {
      if (find_about (n[k], "merged", mark[k], "d", NULL) >= 0 ||
          find_about (n[k], "leader", mark[k], "d", NULL) >= 0)
        {
          harness_dump (h);
          g_error ("%s followed the node whose claim could not be checked", ids[k]);
        }
    }
  i = node_wait_event (n[0], "step", "step", at + 40, mark[0], T);
  g_assert_cmpint (ev_int (node_ev (n[0], i), "members"), ==, 3);
  for (guint k = 0; k < 3; k++)
    node_kill (n[k], SIGTERM);
  node_kill (d, SIGTERM);
  for (guint k = 0; k < 3; k++)
    harness_assert_exit_ok (h, n[k], 20000);
  /* one hash: the honest group kept its own history */
  for (guint k = 1; k < 3; k++)
    {
      g_autoptr(GHashTable) x = node_step_hashes (n[0]);
      g_autoptr(GHashTable) y = node_step_hashes (n[k]);
      guint same = 0;
      for (gint64 s = at; s <= at + 40; s++)
        {
          const char *hx = g_hash_table_lookup (x, &s), *hy = g_hash_table_lookup (y, &s);
          if (hx && hy)
            {
              g_assert_cmpstr (hx, ==, hy);
              same++;
            }
        }
      g_assert_cmpuint (same, >=, 30);
    }
  node_wait_exit (d, 20000);
  harness_free (h);
}

/* A member whose heartbeats say it follows another leader (zz, at our
 * term: --fault-claim-follows) is not counted in the group its leader
 * leads: the leader takes it out, saying whom it follows, while the
 * honest member stays. A joiner that asked two leaders and took the
 * other's snapshot was counted by both until the end of a 60-minute chaos
 * run, and the leader it did not follow claimed it in every merge (issue
 * 29, item 13). Before heartbeats said where a node stands, nothing
 * after the hello did. */
static void
test_claimed_follows (void)
{
  Harness *h = harness_new ();
  Node *a, *b, *c;
  int left = -1;

  a = harness_join (h, "a", "--cohort", "follows", "--node", "a", "--batch", "8", "--steps",
                    "100000", "--wait-members", "3", NULL);
  harness_wait_event (h, a, "joined", NULL, 0, T);
  b = harness_join (h, "b", "--cohort", "follows", "--node", "b", "--batch", "8", "--steps",
                    "100000", NULL);
  c = harness_join (h, "c", "--cohort", "follows", "--node", "c", "--batch", "8", "--steps",
                    "100000", "--fault-claim-follows", "zz", NULL);
  harness_wait_event (h, a, "step", "step", 3, T);
  for (gint64 waited = 0; (left = find_about (a, "member-left", 0, "c", "follows zz")) < 0;
       waited += 100)
    {
      if (waited > 10000)
        {
          harness_dump (h);
          g_error ("the leader still counts a member whose heartbeats say it follows zz");
        }
      harness_wait (never, NULL, 100);
    }
  harness_wait_event (h, a, "step", "step", node_max_step (a) + 20, T);
  g_assert_cmpint (find_about (a, "member-left", 0, "b", NULL), <, 0);
  g_assert_cmpuint (harness_same_hashes (h, a, b, 1), >=, 20);
  for (guint k = 0; k < h->nodes->len; k++)
    node_kill (g_ptr_array_index (h->nodes, k), SIGTERM);
  for (guint k = 0; k < h->nodes->len; k++)
    harness_assert_exit_ok (h, g_ptr_array_index (h->nodes, k), 20000);
  (void) c;
  harness_free (h);
}

/* A member whose gradients have an absurd norm from step 30 (one value of
 * 1e20, finite: --fault-huge) is refused by the leader with the reason
 * ("rejected" naming it), and the update never takes it: the commits from
 * then on count two contributors, the loss stays finite, and all three
 * keep one hash. Before, the leader summed it like any other. */
static void
test_huge_gradient (void)
{
  Harness *h = harness_new ();
  Node *a, *b, *c;
  int i;
  guint refused = 0;

  a = harness_join (h, "a", "--cohort", "huge", "--node", "a", "--batch", "16", "--steps", "100000",
                    "--wait-members", "3", NULL);
  harness_wait_event (h, a, "joined", NULL, 0, T);
  b = harness_join (h, "b", "--cohort", "huge", "--node", "b", "--batch", "16", "--steps", "100000",
                    NULL);
  c = harness_join (h, "c", "--cohort", "huge", "--node", "c", "--batch", "16", "--steps", "100000",
                    "--fault-huge", "30", NULL);
  harness_wait_event (h, a, "step", "step", 80, T);
  for (i = node_find_event (a, "rejected", 0); i >= 0; i = node_find_event (a, "rejected", (guint) i + 1))
    if (g_strcmp0 (ev_str (node_ev (a, i), "node"), "c") == 0 &&
        strstr (ev_str (node_ev (a, i), "reason"), "norm"))
      refused++;
  if (refused < 10)
    {
      harness_dump (h);
      g_error ("the leader refused %u of c's gradients of absurd norm (steps 30-80)", refused);
    }
  for (gint64 s = 40; s <= 80; s++)
    {
      int e = node_step (a, s);
      if (e < 0)
        continue;
      g_assert_cmpint (ev_int (node_ev (a, e), "contributors"), <=, 2);
      g_assert_true (isfinite (json_object_get_double_member (node_ev (a, e), "loss")));
    }
  g_assert_cmpuint (harness_same_hashes (h, a, b, 40), >=, 20);
  g_assert_cmpuint (harness_same_hashes (h, a, c, 40), >=, 20);
  for (guint k = 0; k < h->nodes->len; k++)
    node_kill (g_ptr_array_index (h->nodes, k), SIGTERM);
  for (guint k = 0; k < h->nodes->len; k++)
    harness_assert_exit_ok (h, g_ptr_array_index (h->nodes, k), 20000);
  harness_free (h);
}

/* The same liar with another seed: the groups cannot merge, and the one
 * the rule keeps goes on while the other ends "as a refused joiner
 * would". Before the claim was checked there too, d's hello (256 members)
 * made the honest leader exit ("cannot join cohort"); now it says why it
 * does not believe it and the three train on. */
static void
test_claimed_refused (void)
{
  Harness *h = harness_new ();
  g_autofree char *cut = g_build_filename (h->dir, "partition", NULL);
  static const char *const ids[] = { "a", "b", "c" };
  Node *n[3], *d;
  guint mark;

  g_assert_true (g_file_set_contents (cut, "a b c\nd\n", -1, NULL));
  for (guint k = 0; k < 3; k++)
    {
      n[k] = harness_join (h, ids[k], "--cohort", "grab2", "--node", ids[k], "--batch", "8",
                           "--steps", "100000", "--wait-members", k == 0 ? "3" : "1",
                           "--heartbeat-timeout-ms", "1000", "--fault-partition", cut, NULL);
      harness_wait_event (h, n[k], "joined", NULL, 0, T);
    }
  harness_wait_event (h, n[0], "step", "step", 5, T);
  d = harness_join (h, "d", "--cohort", "grab2", "--node", "d", "--batch", "8", "--steps", "100000",
                    "--seed", "7", "--heartbeat-timeout-ms", "1000", "--fault-partition", cut,
                    "--fault-claim-members", "256", NULL);
  harness_wait_event (h, d, "step", "step", 3, T);
  mark = n[0]->events->len;
  g_assert_cmpint (g_unlink (cut), ==, 0);
  for (gint64 waited = 0; find_about (n[0], "rejected", mark, "d", "refused claim") < 0; waited += 100)
    {
      if (waited > T || n[0]->exited)
        {
          harness_dump (h);
          g_error ("the honest leader did not refuse the claim it cannot check (it exited, or "
                   "said nothing)");
        }
      harness_wait (never, NULL, 100);
    }
  harness_wait_event (h, n[2], "step", "step", node_max_step (n[0]) + 20, T);
  g_assert_false (n[0]->exited);
  for (guint k = 0; k < 3; k++)
    node_kill (n[k], SIGTERM);
  node_kill (d, SIGTERM);
  for (guint k = 0; k < 3; k++)
    harness_assert_exit_ok (h, n[k], 20000);
  node_wait_exit (d, 20000);
  harness_free (h);
}

/* A connection to @path's bus socket, past the bus handshake as node @id. */
static int
bus_connect (const char *path, const char *id)
{
  struct sockaddr_un addr = { .sun_family = AF_UNIX };
  g_autofree char *hello = g_strconcat ("rlx-bus/1 hello ", id, NULL);
  guint8 word[4];
  char reply[300];
  gsize got = 0, want = 4;
  int fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

  g_assert_cmpint (fd, >=, 0);
  g_assert_cmpuint (strlen (path), <, sizeof addr.sun_path);
  strcpy (addr.sun_path, path);
  g_assert_cmpint (connect (fd, (struct sockaddr *) &addr, sizeof addr), ==, 0);
  rlx_link_stream_put_word (word, RLX_LINK_LANE_CONTROL, strlen (hello), FALSE, FALSE);
  g_assert_cmpint (write (fd, word, 4), ==, 4);
  g_assert_cmpint (write (fd, hello, strlen (hello)), ==, (gssize) strlen (hello));
  /* the answer: one record "rlx-bus/1 accept NODE" */
  while (got < want)
    {
      gssize n = read (fd, reply + got, want - got);

      g_assert_cmpint (n, >, 0);
      got += n;
      if (got == 4 && want == 4)
        {
          want = 4 + ((guint32) (guint8) reply[0] | (guint32) (guint8) reply[1] << 8);
          g_assert_cmpuint (want, <, sizeof reply);
        }
    }
  g_assert_nonnull (g_strstr_len (reply + 4, got - 4, " accept "));
  return fd;
}

static gboolean
on_socket (int fd, GIOCondition condition, gpointer user_data)
{
  return G_SOURCE_CONTINUE;
}

/* The node hung up on @fd (what it sent before is read and dropped). */
static gboolean
hung_up (gpointer data)
{
  int fd = GPOINTER_TO_INT (data);
  char buf[4096];

  for (;;)
    {
      gssize n = recv (fd, buf, sizeof buf, MSG_DONTWAIT);

      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
        return TRUE;
      if (n < 0 && errno == EAGAIN)
        return FALSE;
    }
}

/* A peer that announces a frame over a lane's cap — on the control lane
 * more than RLX_LINK_MAX_CONTROL_FRAME, on the bulk lane more than the
 * cohort's parser takes (RLX_WIRE_DEFAULT_MAX_FRAME) — is hung up on at
 * its header, before it could make the node hold the frame; the node
 * trains on with a real member. Before the caps, both were read into
 * memory (up to 64 MiB each per link, scripts/frame-pin.py). */
static void
test_half_sent_frames (void)
{
  Harness *h = harness_new ();
  Node *a, *b;
  g_autofree char *path = NULL;
  const struct { RlxLinkLane lane; gsize len; } over[] = {
    { RLX_LINK_LANE_CONTROL, RLX_LINK_MAX_CONTROL_FRAME + 1 },
    { RLX_LINK_LANE_BULK, RLX_WIRE_DEFAULT_MAX_FRAME + 1 },
  };

  /* A link that brings no bytes is dropped after the heartbeat timeout
   * (any bytes count, so a peer that trickles them keeps it): a long one,
   * so only the cap can hang up within the wait below. */
  a = harness_join (h, "a", "--cohort", "pin", "--node", "a", "--batch", "8", "--steps", "100000",
                    "--wait-members", "2", "--heartbeat-timeout-ms", "60000", NULL);
  harness_wait_event (h, a, "joined", NULL, 0, T);
  path = g_build_filename (h->run_dir, "rlx-cluster", "pin", "a.sock", NULL);
  for (guint i = 0; i < G_N_ELEMENTS (over); i++)
    {
      g_autofree char *id = g_strdup_printf ("attacker%u", i);
      int fd = bus_connect (path, id);
      guint8 word[4];

      gint64 t0 = g_get_monotonic_time ();
      guint watch;
      gboolean gone;

      rlx_link_stream_put_word (word, over[i].lane, over[i].len, TRUE, FALSE);
      g_assert_cmpint (write (fd, word, 4), ==, 4);
      /* (a source on the socket wakes the wait when the node writes or
       * hangs up) */
      watch = g_unix_fd_add (fd, G_IO_IN | G_IO_HUP | G_IO_ERR, on_socket, NULL);
      gone = harness_wait (hung_up, GINT_TO_POINTER (fd), 20000);
      g_source_remove (watch);
      g_test_message ("%s frame of %" G_GSIZE_FORMAT " bytes: %s after %.0f ms",
                      over[i].lane == RLX_LINK_LANE_CONTROL ? "control" : "bulk", over[i].len,
                      gone ? "hung up" : "kept", (g_get_monotonic_time () - t0) / 1e3);
      if (!gone)
        {
          harness_dump (h);
          g_error ("the node kept a link whose peer announced a %s frame of %" G_GSIZE_FORMAT
                   " bytes", over[i].lane == RLX_LINK_LANE_CONTROL ? "control" : "bulk",
                   over[i].len);
        }
      close (fd);
    }
  b = harness_join (h, "b", "--cohort", "pin", "--node", "b", "--batch", "8", "--steps", "100000",
                    "--heartbeat-timeout-ms", "60000", NULL);
  harness_wait_event (h, b, "step", "step", 5, T);
  g_assert_false (a->exited);
  node_kill (a, SIGTERM);
  node_kill (b, SIGTERM);
  harness_assert_exit_ok (h, a, 20000);
  harness_assert_exit_ok (h, b, 20000);
  harness_free (h);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/cohort/hostile/claimed-speed", test_claimed_speed);
  g_test_add_func ("/cohort/hostile/claimed-group", test_claimed_group);
  g_test_add_func ("/cohort/hostile/claimed-follows", test_claimed_follows);
  g_test_add_func ("/cohort/hostile/huge-gradient", test_huge_gradient);
  g_test_add_func ("/cohort/hostile/claimed-refused", test_claimed_refused);
  g_test_add_func ("/cohort/hostile/half-sent-frames", test_half_sent_frames);
  return g_test_run ();
}
