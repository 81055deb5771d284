/* rlx-round-stats.c — what the "done" event says about a node's rounds
 * (rlx-round-stats.h) */
#include "rlx-config.h"
#include "rlx-round-stats.h"

#include <sys/resource.h>
#include <time.h>

/* Rounds and steps at the start that are not measured (warm-up). */
#define WARMUP 5

struct _RlxRoundStats {
  guint64 late, rejected;
  /* the leader's rounds after the first WARMUP */
  guint64 rounds;
  double  round_us, compute_us, busy_us, send_us;
  guint64 samples;
  gint64  cpu0_us;          /* process CPU time when measuring began (0: not yet) */
  gint64  cur_busy_us, cur_send_us;   /* of the round in progress */
  /* steps whose backend counters were noted; those counters after the
   * WARMUP-th, and after the last */
  guint64 backend_seen;
  guint64 host_bytes0, ahead0, upd_ahead0, worker_wait0;
  guint64 host_bytes1, ahead1, upd_ahead1, worker_wait1;
  /* the leader's path per step, summed from the WARMUP-th noted step on */
  double  own_us, finish_us, hop_us, dev_finish_us, dev_grad_us;
};

/* CPU time of the whole process (every thread), µs. */
static gint64
process_cpu_us (void)
{
  struct rusage ru;

  if (getrusage (RUSAGE_SELF, &ru) != 0)
    return 0;
  return (gint64) (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 +
         ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
}

gint64
rlx_round_stats_now (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_THREAD_CPUTIME_ID, &ts);
  return (gint64) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

RlxRoundStats *
rlx_round_stats_new (void)
{
  return g_new0 (RlxRoundStats, 1);
}

void
rlx_round_stats_free (RlxRoundStats *self)
{
  g_free (self);
}

void
rlx_round_stats_add_busy (RlxRoundStats *self, gint64 us)
{
  self->cur_busy_us += us;
}

void
rlx_round_stats_add_send (RlxRoundStats *self, gint64 us)
{
  self->cur_send_us += us;
}

void
rlx_round_stats_round (RlxRoundStats *self, guint measured, gint64 round_us, guint64 samples,
                       double max_compute_us)
{
  if (measured == WARMUP)
    self->cpu0_us = process_cpu_us ();
  if (measured > WARMUP)
    {
      self->rounds++;
      self->samples += samples;
      self->round_us += round_us;
      self->compute_us += max_compute_us;
      self->busy_us += self->cur_busy_us;
      self->send_us += self->cur_send_us;
    }
  self->cur_busy_us = self->cur_send_us = 0;
}

void
rlx_round_stats_backend (RlxRoundStats *self, guint64 host_bytes, guint64 ahead,
                         guint64 update_ahead, guint64 worker_wait_us)
{
  if (++self->backend_seen == WARMUP)
    {
      self->host_bytes0 = host_bytes;
      self->ahead0 = ahead;
      self->upd_ahead0 = update_ahead;
      self->worker_wait0 = worker_wait_us;
    }
  self->host_bytes1 = host_bytes;
  self->ahead1 = ahead;
  self->upd_ahead1 = update_ahead;
  self->worker_wait1 = worker_wait_us;
}

void
rlx_round_stats_own_path (RlxRoundStats *self, gint64 run_us)
{
  /* the own gradient of the step whose finish is the first measured */
  if (self->backend_seen >= WARMUP)
    self->own_us += run_us;
}

void
rlx_round_stats_finish_path (RlxRoundStats *self, gint64 run_us, gint64 ran_at,
                             double dev_finish_us, double dev_grad_us)
{
  if (self->backend_seen <= WARMUP)
    return;
  self->finish_us += run_us;
  self->hop_us += g_get_monotonic_time () - ran_at;
  self->dev_finish_us += dev_finish_us;
  self->dev_grad_us += dev_grad_us;
}

void rlx_round_stats_late (RlxRoundStats *self) { self->late++; }
void rlx_round_stats_rejected (RlxRoundStats *self) { self->rejected++; }
guint64 rlx_round_stats_get_late (RlxRoundStats *self) { return self->late; }
guint64 rlx_round_stats_get_rejected (RlxRoundStats *self) { return self->rejected; }

void
rlx_round_stats_write (RlxRoundStats *self, RlxEventDone *o)
{
  if (self->rounds > 0)
    {
      double r = (double) self->rounds;
      o->has_rounds = TRUE;
      o->rounds_measured = self->rounds;
      o->round_ms = self->round_us / r / 1000.0;
      o->compute_ms = self->compute_us / r / 1000.0;
      /* main-loop time of the leader's handlers per round (CPU time of the
       * main thread), socket sends included (send_ms: those alone) */
      o->coordinator_ms = self->busy_us / r / 1000.0;
      o->send_ms = self->send_us / r / 1000.0;
      /* This process's CPU time (all threads) per round and per sample: a
       * figure other load on the machine disturbs less than wall time. */
      if (self->cpu0_us > 0)
        {
          gint64 cpu = process_cpu_us () - self->cpu0_us;
          o->has_cpu = TRUE;
          o->cpu_ms = cpu / r / 1000.0;
          if (cpu > 0)
            {
              o->has_cpu_rate = TRUE;
              o->samples_per_cpu_second = self->samples * 1e6 / (double) cpu;
            }
        }
    }
  if (self->backend_seen > WARMUP)
    {
      double s = (double) (self->backend_seen - WARMUP);
      /* what the rank's backend moved through the host per step (parameter-
       * sized copies: updates in, codes out), and how many of the leader's
       * own gradients were computed behind the previous finish (a GPU that
       * never waited for the host between rounds) */
      o->has_backend = TRUE;
      o->steps_measured = (guint64) s;
      o->host_bytes_per_step = (double) (self->host_bytes1 - self->host_bytes0) / s;
      o->own_ahead = (double) (self->ahead1 - self->ahead0) / s;
      /* ... and how many of its updates were made right behind that
       * gradient, before the host asked (a lone leader on a GPU) */
      o->update_ahead = (double) (self->upd_ahead1 - self->upd_ahead0) / s;
      /* how long the compute worker waited for its next operation per step
       * (the host turnaround that a device waited out too) */
      o->worker_wait_ms = (double) (self->worker_wait1 - self->worker_wait0) / s / 1000.0;
      /* the leader's path (0 on a member): its own gradient's and its
       * finish's time on the worker, the hop from a finish's end there to
       * its handling on the main loop, and on a GPU the device's own time
       * for the finish and the gradient */
      o->own_run_ms = self->own_us / s / 1000.0;
      o->finish_run_ms = self->finish_us / s / 1000.0;
      o->finish_hop_ms = self->hop_us / s / 1000.0;
      o->device_finish_ms = self->dev_finish_us / s / 1000.0;
      o->device_grad_ms = self->dev_grad_us / s / 1000.0;
    }
}
