/* test-ice-servers.c — a remote node's STUN and TURN servers as numeric
 * addresses (core/p2p/rlx-ice-servers.h): numeric ones at once, a host
 * name looked up (IPv4 preferred; "localhost" needs no network), a spec
 * that is not HOST[:PORT] refused with the server named, and a cancelled
 * lookup that calls nothing and lets its owner go.
 */
#include "rlx-config.h"
#include "core/p2p/rlx-ice-servers.h"

typedef struct {
  guint  ready;
  guint  failed;
} Counts;

static Counts counts;

static void
on_failed (GObject *owner, const char *spec, const char *message)
{
  g_test_message ("%s: %s", spec, message);
  counts.failed++;
}

static void
on_ready (GObject *owner)
{
  g_assert_true (G_IS_OBJECT (owner));
  counts.ready++;
}

static void
test_numeric (void)
{
  g_autoptr(GObject) owner = g_object_new (G_TYPE_OBJECT, NULL);
  g_autoptr(GCancellable) cancel = g_cancellable_new ();
  RlxIceServers *ice = rlx_ice_servers_new (owner, cancel, on_failed, on_ready);
  g_autoptr(GError) error = NULL;

  counts = (Counts) { 0 };
  g_assert_true (rlx_ice_servers_resolve (ice, "192.0.2.7", "[2001:db8::1]:5349", &error));
  g_assert_no_error (error);
  /* no lookup: ready at once, inside the call */
  g_assert_cmpuint (counts.ready, ==, 1);
  g_assert_cmpstr (rlx_ice_servers_get_stun_ip (ice), ==, "192.0.2.7");
  g_assert_cmpuint (rlx_ice_servers_get_stun_port (ice), ==, 3478);
  g_assert_cmpstr (rlx_ice_servers_get_turn_ip (ice), ==, "2001:db8::1");
  g_assert_cmpuint (rlx_ice_servers_get_turn_port (ice), ==, 5349);
  rlx_ice_servers_free (ice);

  /* none at all is ready too */
  ice = rlx_ice_servers_new (owner, cancel, on_failed, on_ready);
  g_assert_true (rlx_ice_servers_resolve (ice, NULL, NULL, &error));
  g_assert_cmpuint (counts.ready, ==, 2);
  g_assert_null (rlx_ice_servers_get_stun_ip (ice));
  g_assert_null (rlx_ice_servers_get_turn_ip (ice));
  rlx_ice_servers_free (ice);
  g_assert_cmpuint (counts.failed, ==, 0);
}

static void
test_lookup (void)
{
  g_autoptr(GObject) owner = g_object_new (G_TYPE_OBJECT, NULL);
  g_autoptr(GCancellable) cancel = g_cancellable_new ();
  RlxIceServers *ice = rlx_ice_servers_new (owner, cancel, on_failed, on_ready);
  g_autoptr(GError) error = NULL;
  gint64 until = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;

  counts = (Counts) { 0 };
  g_assert_true (rlx_ice_servers_resolve (ice, "localhost:3479", "192.0.2.9", &error));
  g_assert_no_error (error);
  /* the name is looked up off this call: not ready yet */
  g_assert_cmpuint (counts.ready, ==, 0);
  g_assert_cmpstr (rlx_ice_servers_get_turn_ip (ice), ==, "192.0.2.9");
  while (counts.ready == 0 && g_get_monotonic_time () < until)
    g_main_context_iteration (NULL, TRUE);
  g_assert_cmpuint (counts.ready, ==, 1);
  g_assert_cmpuint (counts.failed, ==, 0);
  /* IPv4 preferred where the name has both */
  g_assert_cmpstr (rlx_ice_servers_get_stun_ip (ice), ==, "127.0.0.1");
  g_assert_cmpuint (rlx_ice_servers_get_stun_port (ice), ==, 3479);
  rlx_ice_servers_free (ice);
}

static void
test_bad_spec (void)
{
  g_autoptr(GObject) owner = g_object_new (G_TYPE_OBJECT, NULL);
  g_autoptr(GCancellable) cancel = g_cancellable_new ();
  RlxIceServers *ice = rlx_ice_servers_new (owner, cancel, on_failed, on_ready);
  g_autoptr(GError) error = NULL;

  counts = (Counts) { 0 };
  g_assert_false (rlx_ice_servers_resolve (ice, NULL, "turn.example:notaport", &error));
  g_assert_nonnull (error);
  g_test_message ("%s", error->message);
  g_assert_true (g_str_has_prefix (error->message, "TURN server 'turn.example:notaport': "));
  g_assert_cmpuint (counts.ready, ==, 0);
  rlx_ice_servers_free (ice);
}

static void
test_cancelled (void)
{
  GObject *owner = g_object_new (G_TYPE_OBJECT, NULL);
  g_autoptr(GCancellable) cancel = g_cancellable_new ();
  RlxIceServers *ice = rlx_ice_servers_new (owner, cancel, on_failed, on_ready);
  g_autoptr(GError) error = NULL;
  gint64 until = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;

  counts = (Counts) { 0 };
  g_object_add_weak_pointer (owner, (gpointer *) &owner);
  g_assert_true (rlx_ice_servers_resolve (ice, "localhost", NULL, &error));
  g_cancellable_cancel (cancel);
  /* the lookup holds the owner until it ends; then it goes, and nothing
   * was called */
  g_object_unref (owner);
  g_assert_nonnull (owner);
  while (owner != NULL && g_get_monotonic_time () < until)
    g_main_context_iteration (NULL, TRUE);
  g_assert_null (owner);
  g_assert_cmpuint (counts.ready, ==, 0);
  g_assert_cmpuint (counts.failed, ==, 0);
  rlx_ice_servers_free (ice);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/remote/ice-servers/numeric", test_numeric);
  g_test_add_func ("/remote/ice-servers/lookup", test_lookup);
  g_test_add_func ("/remote/ice-servers/bad-spec", test_bad_spec);
  g_test_add_func ("/remote/ice-servers/cancelled", test_cancelled);
  return g_test_run ();
}
