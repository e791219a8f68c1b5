/*
 * Cyclone DDS ping/pong with every round trip recorded: the reference for
 * `dds_perf --pingpong` (issue 17). ddsperf prints per-second 50/90/99/max only, so its
 * p99.9 and p99.99 cannot be read from it; this program measures the same exchange with
 * Cyclone's own C API and prints exact nearest-rank percentiles over every round trip.
 *
 *   pingpong pong DOMAIN TRIGGER SECONDS
 *   pingpong ping DOMAIN TRIGGER SIZE WARMUP ROUNDTRIPS SECONDS
 *
 * Two topics (`spindle_ref_ping`, `spindle_ref_pong`), RELIABLE, KEEP_LAST 1 (as ddsperf's
 * ping/pong), one sample in flight. TRIGGER is `listener` (the reply is written from the
 * data-available listener, ddsperf's default) or `waitset` (a thread waits in a WaitSet).
 * The ping side prints one JSON line. Both sides stop by themselves after SECONDS; the
 * ping side sends an empty-payload sample with the stop mark to end the pong side early.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dds/dds.h"
#include "Octets.h"

#define STOP_MARK 0xFFu

static int64_t now_ns(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void check(dds_return_t rc, const char *what)
{
  if (rc < 0) {
    fprintf(stderr, "pingpong: %s: %s\n", what, dds_strretcode(rc));
    exit(2);
  }
}

static dds_qos_t *pingpong_qos(void)
{
  dds_qos_t *q = dds_create_qos();
  dds_qset_reliability(q, DDS_RELIABILITY_RELIABLE, DDS_SECS(10));
  dds_qset_history(q, DDS_HISTORY_KEEP_LAST, 1);
  return q;
}

/* The participant of a side in `domain`, with the ping and the pong topic. */
static dds_entity_t open_domain(dds_domainid_t domain, dds_entity_t *tping, dds_entity_t *tpong)
{
  dds_entity_t pp = dds_create_participant(domain, NULL, NULL);
  check(pp, "participant");
  *tping = dds_create_topic(pp, &SpindleRef_Octets_desc, "spindle_ref_ping", NULL, NULL);
  *tpong = dds_create_topic(pp, &SpindleRef_Octets_desc, "spindle_ref_pong", NULL, NULL);
  check(*tping, "ping topic");
  check(*tpong, "pong topic");
  return pp;
}

/* ---- pong ------------------------------------------------------------------------ */

static dds_entity_t pong_writer;
static volatile int pong_stop;

/* Echoes every valid sample taken from `rd`; a one-byte payload holding the stop mark
 * ends the pong side. */
static void echo(dds_entity_t rd)
{
  void *s[16] = {NULL};
  dds_sample_info_t si[16];
  int n = dds_take(rd, s, si, 16, 16);
  for (int i = 0; i < n; i++) {
    if (!si[i].valid_data)
      continue;
    const SpindleRef_Octets *m = s[i];
    if (m->payload._length == 1 && m->payload._buffer[0] == STOP_MARK) {
      pong_stop = 1;
      continue;
    }
    check(dds_write(pong_writer, m), "pong write");
  }
  if (n > 0)
    dds_return_loan(rd, s, n);
}

static void on_ping(dds_entity_t rd, void *arg)
{
  (void)arg;
  echo(rd);
}

static int run_pong(dds_domainid_t domain, int listener, int seconds)
{
  dds_entity_t tping, tpong;
  dds_entity_t pp = open_domain(domain, &tping, &tpong);
  dds_qos_t *q = pingpong_qos();
  pong_writer = dds_create_writer(pp, tpong, q, NULL);
  check(pong_writer, "pong writer");
  dds_listener_t *l = NULL;
  if (listener) {
    l = dds_create_listener(NULL);
    dds_lset_data_available(l, on_ping);
  }
  dds_entity_t rd = dds_create_reader(pp, tping, q, l);
  check(rd, "pong reader");
  dds_entity_t ws = dds_create_waitset(pp);
  dds_entity_t rc = dds_create_readcondition(rd, DDS_ANY_STATE);
  if (!listener)
    check(dds_waitset_attach(ws, rc, 0), "attach");
  int64_t end = now_ns() + (int64_t)seconds * 1000000000;
  while (!pong_stop && now_ns() < end) {
    if (listener) {
      dds_sleepfor(DDS_MSECS(10));
    } else if (dds_waitset_wait(ws, NULL, 0, DDS_MSECS(100)) > 0) {
      echo(rd);
    }
  }
  dds_delete_qos(q);
  if (l)
    dds_delete_listener(l);
  dds_delete(pp);
  return 0;
}

/* ---- ping ------------------------------------------------------------------------ */

static int cmp_i64(const void *a, const void *b)
{
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Nearest rank: the smallest value with at least `ppm` parts per million of all values
 * at or below it (the same rule as spindle_examples::latency::nearest_rank). */
static int64_t nearest_rank(const int64_t *sorted, size_t n, uint64_t ppm)
{
  uint64_t rank = ((uint64_t)n * ppm + 999999) / 1000000;
  if (rank < 1)
    rank = 1;
  if (rank > n)
    rank = n;
  return sorted[rank - 1];
}

struct ping_state {
  dds_entity_t writer;
  SpindleRef_Octets msg;
  int64_t sent_ns;
  long done;
  long warmup;
  long total;
  int64_t *rtt_ns;
  volatile int finished;
};

static struct ping_state ps;

/* A pong arrived: records its round trip (past the warm-up) and sends the next ping. */
static void got_pong(dds_entity_t rd)
{
  void *s[16] = {NULL};
  dds_sample_info_t si[16];
  int n = dds_take(rd, s, si, 16, 16);
  int valid = 0;
  for (int i = 0; i < n; i++)
    valid += si[i].valid_data ? 1 : 0;
  if (n > 0)
    dds_return_loan(rd, s, n);
  if (valid == 0 || ps.finished)
    return;
  int64_t t = now_ns();
  if (ps.done >= ps.warmup)
    ps.rtt_ns[ps.done - ps.warmup] = t - ps.sent_ns;
  ps.done++;
  if (ps.done >= ps.warmup + ps.total) {
    ps.finished = 1;
    return;
  }
  ps.sent_ns = now_ns();
  check(dds_write(ps.writer, &ps.msg), "ping write");
}

static void on_pong(dds_entity_t rd, void *arg)
{
  (void)arg;
  got_pong(rd);
}

static int run_ping(dds_domainid_t domain, int listener, size_t size, long warmup, long total, int seconds)
{
  dds_entity_t tping, tpong;
  dds_entity_t pp = open_domain(domain, &tping, &tpong);
  dds_qos_t *q = pingpong_qos();
  ps.writer = dds_create_writer(pp, tping, q, NULL);
  check(ps.writer, "ping writer");
  ps.warmup = warmup;
  ps.total = total;
  ps.rtt_ns = calloc((size_t)total, sizeof(int64_t));
  unsigned char *payload = malloc(size > 0 ? size : 1);
  if (!ps.rtt_ns || !payload) {
    fprintf(stderr, "pingpong: out of memory\n");
    return 2;
  }
  memset(payload, 0x5A, size);
  ps.msg.payload._buffer = payload;
  ps.msg.payload._length = (uint32_t)size;
  ps.msg.payload._maximum = (uint32_t)size;
  ps.msg.payload._release = false;
  dds_listener_t *l = NULL;
  if (listener) {
    l = dds_create_listener(NULL);
    dds_lset_data_available(l, on_pong);
  }
  dds_entity_t rd = dds_create_reader(pp, tpong, q, l);
  check(rd, "ping reader");
  int64_t end = now_ns() + (int64_t)seconds * 1000000000;
  /* Both directions matched before the first ping. */
  for (;;) {
    dds_publication_matched_status_t pm;
    dds_subscription_matched_status_t sm;
    check(dds_get_publication_matched_status(ps.writer, &pm), "matched");
    check(dds_get_subscription_matched_status(rd, &sm), "matched");
    if (pm.current_count > 0 && sm.current_count > 0)
      break;
    if (now_ns() > end) {
      fprintf(stderr, "pingpong: no pong matched within %d s\n", seconds);
      return 1;
    }
    dds_sleepfor(DDS_MSECS(10));
  }
  dds_entity_t ws = dds_create_waitset(pp);
  dds_entity_t rc = dds_create_readcondition(rd, DDS_ANY_STATE);
  if (!listener)
    check(dds_waitset_attach(ws, rc, 0), "attach");
  int64_t start = now_ns();
  ps.sent_ns = now_ns();
  check(dds_write(ps.writer, &ps.msg), "ping write");
  while (!ps.finished && now_ns() < end) {
    if (listener) {
      dds_sleepfor(DDS_MSECS(1));
    } else if (dds_waitset_wait(ws, NULL, 0, DDS_MSECS(100)) > 0) {
      got_pong(rd);
    }
  }
  ps.finished = 1;
  dds_sleepfor(DDS_MSECS(20)); /* a listener call under way sees `finished` and returns */
  double secs = (double)(now_ns() - start) / 1e9;
  long measured = ps.done > ps.warmup ? ps.done - ps.warmup : 0;
  /* End the pong side. */
  unsigned char mark = STOP_MARK;
  SpindleRef_Octets stop = {.payload = {._buffer = &mark, ._length = 1, ._maximum = 1, ._release = false}};
  dds_write(ps.writer, &stop);
  dds_sleepfor(DDS_MSECS(100));
  printf("{\"reference\":\"cyclone-pingpong\",\"size\":%zu,\"trigger\":\"%s\",\"warmup\":%ld,"
         "\"roundtrips\":%ld,\"complete\":%s,\"seconds\":%.3f",
         size, listener ? "listener" : "waitset", warmup, measured,
         measured == total ? "true" : "false", secs);
  if (measured > 0) {
    qsort(ps.rtt_ns, (size_t)measured, sizeof(int64_t), cmp_i64);
    size_t n = (size_t)measured;
    static const struct { const char *key; uint64_t ppm; } ps_keys[] = {
      {"rtt_p50_us", 500000}, {"rtt_p90_us", 900000}, {"rtt_p99_us", 990000},
      {"rtt_p999_us", 999000}, {"rtt_p9999_us", 999900}};
    for (size_t i = 0; i < sizeof ps_keys / sizeof ps_keys[0]; i++)
      printf(",\"%s\":%.3f", ps_keys[i].key, (double)nearest_rank(ps.rtt_ns, n, ps_keys[i].ppm) / 1e3);
    printf(",\"rtt_max_us\":%.3f,\"rtt_min_us\":%.3f", (double)ps.rtt_ns[n - 1] / 1e3, (double)ps.rtt_ns[0] / 1e3);
  }
  printf("}\n");
  dds_delete_qos(q);
  if (l)
    dds_delete_listener(l);
  dds_delete(pp);
  free(ps.rtt_ns);
  free(payload);
  return measured == total ? 0 : 1;
}

static long arg_long(const char *s, const char *what, long lo, long hi)
{
  char *end = NULL;
  long v = strtol(s, &end, 10);
  if (!s[0] || *end || v < lo || v > hi) {
    fprintf(stderr, "pingpong: %s = '%s': an integer in %ld..=%ld\n", what, s, lo, hi);
    exit(2);
  }
  return v;
}

int main(int argc, char **argv)
{
  if (argc == 5 && strcmp(argv[1], "pong") == 0) {
    dds_domainid_t d = (dds_domainid_t)arg_long(argv[2], "DOMAIN", 0, 230);
    int listener = strcmp(argv[3], "listener") == 0;
    return run_pong(d, listener, (int)arg_long(argv[4], "SECONDS", 1, 3600));
  }
  if (argc == 8 && strcmp(argv[1], "ping") == 0) {
    dds_domainid_t d = (dds_domainid_t)arg_long(argv[2], "DOMAIN", 0, 230);
    int listener = strcmp(argv[3], "listener") == 0;
    size_t size = (size_t)arg_long(argv[4], "SIZE", 0, 1 << 24);
    long warmup = arg_long(argv[5], "WARMUP", 0, 10000000);
    long total = arg_long(argv[6], "ROUNDTRIPS", 1, 10000000);
    return run_ping(d, listener, size, warmup, total, (int)arg_long(argv[7], "SECONDS", 1, 3600));
  }
  fprintf(stderr,
          "usage: pingpong pong DOMAIN listener|waitset SECONDS\n"
          "       pingpong ping DOMAIN listener|waitset SIZE WARMUP ROUNDTRIPS SECONDS\n");
  return 2;
}
