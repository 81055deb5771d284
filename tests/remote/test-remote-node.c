/* test-remote-node.c — RlxRemoteNodes in one process over loopback
 *
 * A founder serves signalling; the others join with the invite. Checked:
 * every pair gets exactly one live link on each side and frames cross them;
 * a node with a wrong key is refused with the reason (and the founder
 * reports what it rejected); a node that leaves is removed everywhere and
 * the same node id coming back pairs again by itself; a replayed and a
 * tampered signalling message injected by a rogue room member are rejected
 * and change nothing; a peer linked locally is skipped.
 */
#include "rlx-config.h"
#include "remote-test.h"
#include "core/p2p/rlx-remote-node.h"
#include "core/p2p/rlx-signal-client.h"
#include "core/p2p/rlx-signal-msg.h"

#include <string.h>

typedef struct {
  char          *id;
  RlxRemoteNode *node;
  RlxIdentity   *identity;
  GHashTable    *links;     /* peer id → RlxLink* (ref) */
  guint          added;
  guint          removed;
  GPtrArray     *events;    /* char* "event node reason" */
  GError        *refused;
  GPtrArray     *frames;    /* GBytes* */
} N;

static RlxInvite *invite;

static void
on_frame (RlxLink *link, GBytes *frame, gpointer user_data)
{
  N *n = user_data;

  g_ptr_array_add (n->frames, g_bytes_ref (frame));
}

static void
on_added (RlxRemoteNode *node, RlxLink *link, const char *peer, gpointer user_data)
{
  N *n = user_data;

  g_assert_false (g_hash_table_contains (n->links, peer));
  g_hash_table_insert (n->links, g_strdup (peer), g_object_ref (link));
  g_signal_connect (link, "frame", G_CALLBACK (on_frame), n);
  n->added++;
}

static void
on_removed (RlxRemoteNode *node, RlxLink *link, const char *peer, gpointer user_data)
{
  N *n = user_data;

  g_assert_true (g_hash_table_lookup (n->links, peer) == link);
  g_signal_handlers_disconnect_by_data (link, n);
  g_hash_table_remove (n->links, peer);
  n->removed++;
}

static void
on_event (RlxRemoteNode *node, JsonObject *e, gpointer user_data)
{
  N *n = user_data;
  const char *ev = json_object_get_string_member (e, "event");
  const char *who = json_object_has_member (e, "node") ? json_object_get_string_member (e, "node") : "-";
  const char *why = json_object_has_member (e, "reason") ? json_object_get_string_member (e, "reason")
                    : json_object_has_member (e, "state") ? json_object_get_string_member (e, "state") : "";

  g_test_message ("%s: %s %s %s", n->id, ev, who, why);
  g_ptr_array_add (n->events, g_strdup_printf ("%s %s %s", ev, who, why));
}

static void
on_refused (RlxRemoteNode *node, const GError *error, gpointer user_data)
{
  N *n = user_data;

  g_clear_error (&n->refused);
  n->refused = g_error_copy (error);
}

static gboolean
skip_z (const char *peer, gpointer user_data)
{
  return g_str_equal (peer, (const char *) user_data);
}

static N *
node_new (const char *id, gboolean serve, const guint8 *key, const char *skip)
{
  g_autoptr(GError) error = NULL;
  N *n = g_new0 (N, 1);
  RlxRemoteNodeConfig c = { 0 };
  g_autoptr(RlxInvite) inv = rlx_invite_copy (invite);

  if (key)
    memcpy (inv->key, key, RLX_INVITE_KEY_LEN);
  n->id = g_strdup (id);
  n->identity = rlx_identity_new_ephemeral (&error);
  g_assert_no_error (error);
  n->links = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_object_unref);
  n->events = g_ptr_array_new_with_free_func (g_free);
  n->frames = g_ptr_array_new_with_free_func ((GDestroyNotify) g_bytes_unref);
  c.invite = inv;
  c.node_id = id;
  c.identity = n->identity;
  c.serve = serve;
  c.listen_address = serve ? "127.0.0.1" : NULL;
  c.connect_timeout_ms = 10000;
  n->node = rlx_remote_node_new (&c, &error);
  g_assert_no_error (error);
  if (skip)
    rlx_remote_node_set_skip_func (n->node, skip_z, (gpointer) skip);
  g_signal_connect (n->node, "link-added", G_CALLBACK (on_added), n);
  g_signal_connect (n->node, "link-removed", G_CALLBACK (on_removed), n);
  g_signal_connect (n->node, "event", G_CALLBACK (on_event), n);
  g_signal_connect (n->node, "refused", G_CALLBACK (on_refused), n);
  g_assert_true (rlx_remote_node_start (n->node, &error));
  g_assert_no_error (error);
  if (serve && invite->port == 0)
    invite->port = rlx_remote_node_get_port (n->node);
  return n;
}

static void
spin (guint ms)
{
  gboolean expired = FALSE;
  g_timeout_add (ms, remote_test_expired_cb, &expired);
  while (!expired)
    g_main_context_iteration (NULL, TRUE);
}


static void
node_free (N *n)
{
  GWeakRef weak;
  GHashTableIter it;
  gpointer v;
  g_autoptr(GPtrArray) links = g_ptr_array_new ();

  g_hash_table_iter_init (&it, n->links);
  while (g_hash_table_iter_next (&it, NULL, &v))
    g_ptr_array_add (links, g_object_ref (v));
  rlx_remote_node_stop (n->node);
  g_weak_ref_init (&weak, n->node);
  g_signal_handlers_disconnect_by_data (n->node, n);
  g_clear_object (&n->node);
  g_assert_null (g_weak_ref_get (&weak));
  g_weak_ref_clear (&weak);
  for (guint i = 0; i < links->len; i++)
    g_signal_handlers_disconnect_by_data (links->pdata[i], n);
  g_hash_table_unref (n->links);
  /* Let the links' I/O threads finish (each holds a reference until then). */
  for (guint i = 0; i < links->len; i++)
    {
      GWeakRef w;
      g_weak_ref_init (&w, links->pdata[i]);
      g_object_unref (links->pdata[i]);
      WAIT_FOR (({ GObject *o = g_weak_ref_get (&w); if (o) g_object_unref (o); o == NULL; }),
                10000, "a link to end");
      g_weak_ref_clear (&w);
    }
  g_ptr_array_unref (n->events);
  g_ptr_array_unref (n->frames);
  g_clear_error (&n->refused);
  g_clear_object (&n->identity);
  g_free (n->id);
  g_free (n);
}

static gboolean
has_event (N *n, const char *prefix, const char *contains)
{
  for (guint i = 0; i < n->events->len; i++)
    if (g_str_has_prefix (n->events->pdata[i], prefix) &&
        (contains == NULL || strstr (n->events->pdata[i], contains)))
      return TRUE;
  return FALSE;
}

static void
setup_invite (void)
{
  g_autoptr(GError) error = NULL;

  g_clear_pointer (&invite, rlx_invite_free);
  invite = rlx_invite_new ("127.0.0.1", 1, "test-cohort", &error);
  g_assert_no_error (error);
  invite->port = 0;   /* the founder picks a free port */
}

static void
test_pair_three (void)
{
  N *a, *b, *c;

  setup_invite ();
  a = node_new ("a", TRUE, NULL, NULL);
  b = node_new ("b", FALSE, NULL, NULL);
  c = node_new ("c", FALSE, NULL, NULL);
  WAIT_FOR (g_hash_table_size (a->links) == 2 && g_hash_table_size (b->links) == 2 &&
            g_hash_table_size (c->links) == 2, 30000, "a full mesh of three");
  g_assert_cmpuint (a->added + b->added + c->added, ==, 6);
  g_assert_true (has_event (a, "link-up b", NULL));
  {
    g_auto(GStrv) ids = rlx_remote_node_dup_peer_ids (a->node);
    g_assert_cmpuint (g_strv_length (ids), ==, 2);
    g_assert_cmpstr (ids[0], ==, "b");
    g_assert_cmpstr (ids[1], ==, "c");
  }
  /* Frames cross each link. */
  {
    g_autoptr(GBytes) f = g_bytes_new_static ("hello over QUIC", 15);
    g_autoptr(GError) error = NULL;
    g_assert_true (rlx_link_send (g_hash_table_lookup (a->links, "b"), f, &error));
    g_assert_true (rlx_link_send (g_hash_table_lookup (c->links, "b"), f, &error));
    WAIT_FOR (b->frames->len == 2, 10000, "b to get both frames");
  }

  /* c leaves: a and b lose it; the same id joins again and pairs by itself. */
  node_free (c);
  WAIT_FOR (g_hash_table_size (a->links) == 1 && g_hash_table_size (b->links) == 1, 30000,
            "a and b to lose c");
  c = node_new ("c", FALSE, NULL, NULL);
  WAIT_FOR (g_hash_table_size (a->links) == 2 && g_hash_table_size (b->links) == 2 &&
            g_hash_table_size (c->links) == 2, 30000, "c back in the mesh");
  node_free (c);
  node_free (b);
  node_free (a);
}

static void
test_wrong_key (void)
{
  static const guint8 other[RLX_INVITE_KEY_LEN] = { 9, 9, 9 };
  N *a, *b, *bad;

  setup_invite ();
  a = node_new ("a", TRUE, NULL, NULL);
  b = node_new ("b", FALSE, NULL, NULL);
  WAIT_FOR (g_hash_table_size (a->links) == 1, 30000, "a and b");
  bad = node_new ("m", FALSE, other, NULL);
  WAIT_FOR (bad->refused != NULL, 15000, "the wrong key to be refused");
  g_test_message ("%s", bad->refused->message);
  g_assert_error (bad->refused, RLX_REMOTE_ERROR, RLX_REMOTE_ERROR_KEY_REFUSED);
  g_assert_nonnull (strstr (bad->refused->message, "key"));
  g_assert_true (has_event (a, "rejected m", "cohort key"));
  g_assert_cmpuint (g_hash_table_size (bad->links), ==, 0);
  g_assert_cmpuint (g_hash_table_size (a->links), ==, 1);
  node_free (bad);
  node_free (b);
  node_free (a);
}

/* A rogue member of the room (it has no key): it captures what is broadcast
 * and sends it on, once as it was and once altered. */
typedef struct {
  GPtrArray *seen;   /* JsonNode* */
  gboolean   joined;
} Rogue;

static void
rogue_joined (RlxSignalClient *c, GStrv peers, gpointer user_data)
{
  ((Rogue *) user_data)->joined = TRUE;
}

static void
rogue_message (RlxSignalClient *c, const char *from, JsonNode *sealed, gpointer user_data)
{
  g_ptr_array_add (((Rogue *) user_data)->seen, json_node_copy (sealed));
}

static void
test_replayed_and_tampered (void)
{
  N *a, *b;
  Rogue r = { g_ptr_array_new_with_free_func ((GDestroyNotify) json_node_unref), FALSE };
  g_autoptr(RlxSignalClient) rogue = NULL;
  guint added_before;

  setup_invite ();
  a = node_new ("a", TRUE, NULL, NULL);
  rogue = rlx_signal_client_new ("127.0.0.1", invite->port, invite->cohort, "zz");
  g_signal_connect (rogue, "joined", G_CALLBACK (rogue_joined), &r);
  g_signal_connect (rogue, "message", G_CALLBACK (rogue_message), &r);
  rlx_signal_client_start (rogue);
  WAIT_FOR (r.joined, 10000, "the rogue to join");
  b = node_new ("b", FALSE, NULL, NULL);
  WAIT_FOR (g_hash_table_size (a->links) == 1 && g_hash_table_size (b->links) == 1, 30000,
            "a and b");
  WAIT_FOR (r.seen->len > 0, 10000, "the rogue to capture a broadcast");
  added_before = a->added + b->added;

  /* b's hello replayed to b's peer a, and to b itself. */
  for (guint i = 0; i < r.seen->len; i++)
    {
      rlx_signal_client_send (rogue, "a", r.seen->pdata[i]);
    }
  WAIT_FOR (has_event (a, "rejected zz", "replay") || has_event (a, "rejected zz", "already seen"),
            10000, "a to reject the replay");
  /* The same message, its body altered. */
  {
    JsonNode *copy = json_node_copy (r.seen->pdata[0]);
    JsonObject *o = json_node_get_object (copy);
    g_autofree char *body = g_strdup (json_object_get_string_member (o, "b"));
    char *p = strstr (body, "\"fp\":\"");
    g_assert_nonnull (p);
    p[6] = p[6] == '0' ? '1' : '0';
    json_object_set_string_member (o, "b", body);
    rlx_signal_client_send (rogue, "a", copy);
    json_node_unref (copy);
  }
  WAIT_FOR (has_event (a, "rejected zz", "failed authentication"), 10000,
            "a to reject the tampered message");
  spin (300);
  /* Nothing changed: the one link stays, no new pairing. */
  g_assert_cmpuint (a->added + b->added, ==, added_before);
  g_assert_cmpuint (g_hash_table_size (a->links), ==, 1);
  g_assert_null (a->refused);

  rlx_signal_client_stop (rogue);
  g_ptr_array_unref (r.seen);
  node_free (b);
  node_free (a);
}

static void
test_skip_local_peer (void)
{
  N *a, *b;

  setup_invite ();
  a = node_new ("a", TRUE, NULL, "b");   /* a reaches b over the local bus */
  b = node_new ("b", FALSE, NULL, "a");
  spin (2000);
  g_assert_cmpuint (a->added, ==, 0);
  g_assert_cmpuint (b->added, ==, 0);
  node_free (b);
  node_free (a);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/remote/node/pair-three", test_pair_three);
  g_test_add_func ("/remote/node/wrong-key", test_wrong_key);
  g_test_add_func ("/remote/node/replayed-and-tampered", test_replayed_and_tampered);
  g_test_add_func ("/remote/node/skip-local-peer", test_skip_local_peer);
  return g_test_run ();
}
