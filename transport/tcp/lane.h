/* lane.h -- which of a pair's two connections the higher rank's long
 * messages take, chosen while the job runs (FLX_TCP_LANE=auto), and how
 * much of a long message one write takes (tcp_write_cap, at the end).
 *
 * Split (the second connection, see tcp.h) lets the two directions of an
 * exchange overlap; that is the faster way while the two ranks' cores
 * share a cache.  Where they do not (two sockets of a machine, or a
 * virtual machine whose host has moved its CPUs apart) each core's copy
 * into the socket writes pages the other core has just read, and the
 * overlapping directions slow each other down: shared (everything on the
 * first connection, where the two sendmsg calls take turns) was then the
 * faster one (a 2-rank 32 MiB allgather, median of 13 rounds: 12.7 ms
 * against 17.7 split; with the cores near, 67 rounds: 11.1 against 9.8).  The placement can change while a job
 * runs, so the higher rank measures both.
 *
 * A period is a stretch in which a long message (TCP_SPLIT_MIN and up)
 * is being sent or received on the pair, either way; it is timed, and
 * its seconds per byte moved, smoothed per size class of its first
 * message and per lane, pick the lane of the next period of that class.
 * Every TCP_LANE_EXPLORE-th period tries the other lane (every
 * TCP_LANE_EXPLORE_FAR-th when one lane costs TCP_LANE_CLEAR times the
 * other), so a change of placement is noticed within a few periods.
 *
 * Pure functions and plain state: tcp.c keeps the clock, tests call them
 * with the costs they choose. */
#ifndef FLX_TRANSPORT_TCP_LANE_H
#define FLX_TRANSPORT_TCP_LANE_H

#include <stddef.h>
#include <stdint.h>

enum { TCP_LANE_SPLIT = 0, TCP_LANE_SHARED = 1 };

#define TCP_LANE_BUCKETS 24       /* size classes 2^16 .. 2^39 bytes and up */
#define TCP_LANE_EXPLORE 16       /* try the other lane every 16th period   */
#define TCP_LANE_EXPLORE_FAR 32   /* ... or every 32nd when the gap is clear */
#define TCP_LANE_CLEAR 1.3        /* a gap this large (ratio) is clear       */
#define TCP_LANE_WEIGHT 0.5       /* weight of a new period in the estimate;
                                     a tried lane's replaces it (what it had
                                     is old) */
#define TCP_LANE_FAVOR 0.9        /* shared is taken when it costs less than
                                     this times split: wrongly shared costs
                                     less than wrongly split, see above */
/* Socket buffers of the first connection in auto and shared lane modes
 * (with FLX_TCP_SOCKBUF=0): both directions' long messages pass there
 * when shared, which ran faster with buffers this large (12.9 ms against
 * 13.8 autotuned for the exchange above; no slower split). */
#define TCP_LANE_SHARED_BUF ((size_t)4 << 20)

typedef struct {
    double t0;                  /* start of the current period (0: none)  */
    uint64_t bytes;             /* long bytes finished in it, both ways   */
    int lane;                   /* its lane                               */
    int bucket;                 /* its size class                         */
    unsigned long count[TCP_LANE_BUCKETS]; /* per class: its exploration clock */
    unsigned long used[2];      /* periods measured on each lane          */
    double cost[TCP_LANE_BUCKETS][2]; /* seconds per byte; 0: not yet     */
    unsigned char warm[TCP_LANE_BUCKETS]; /* the class's first period is over */
} tcp_lane_t;

/* The size class of a period whose first long message has len bytes. */
int tcp_lane_bucket(uint64_t len);

/* The lane of the next period of class bucket, l->count[bucket] periods
 * of that class begun before it: an unmeasured lane first (split before shared), then the
 * cheaper one (shared only when clearly: TCP_LANE_FAVOR), the other one
 * now and then. */
int tcp_lane_pick(const tcp_lane_t *l, int bucket);

/* A period of class bucket on lane moved bytes in seconds.  The first
 * period of a class counts for nothing: it often pays for fresh pages
 * and cold caches that later ones do not. */
void tcp_lane_note(tcp_lane_t *l, int bucket, int lane, double seconds, uint64_t bytes);

/* How many bytes of a long message one sendmsg() call writes
 * (FLX_TCP_WRITE_MAX, tcp.c): at most write_max, rounded down to whole
 * segments of mss bytes (at least one), so each write but a message's
 * last leaves in full segments; write_max itself where mss is not known
 * (<= 0); SIZE_MAX (no limit) for write_max 0.
 *
 * One call per 512 KiB chunk left up to half of it queued behind the
 * congestion window on loopback, sent later from the peer's CPU as its
 * acknowledgements came in, so a connection's segments reached the
 * receiver through two CPUs' queues out of order: about 600 spurious
 * fast retransmits in 4000 calls of a 4-rank 2 MiB allgather, 60 with
 * writes of two segments (the ring's 2 MiB allgather, 6 alternating
 * rounds: 1.12 ms -> 0.99).
 * A write that is not whole segments ends in a short one, which cost
 * more than the order gained (2 x 65483-byte segments: 0.99 ms; 128 KiB,
 * one 106-byte segment more: 1.95 ms). */
size_t tcp_write_cap(size_t write_max, long mss);

/* Bytes the next write of a message may take, done of it written, in
 * pieces of cap (tcp_write_cap): up to the next multiple of cap from the
 * message's start, so a write the socket cut short does not shift the
 * later ones; SIZE_MAX for no limit. */
size_t tcp_write_room(size_t done, size_t cap);

#endif
