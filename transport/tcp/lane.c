/* lane.c -- the higher rank's choice of connection for long messages
 * (see lane.h). */
#include "transport/tcp/lane.h"

int tcp_lane_bucket(uint64_t len)
{
    int b = 0;

    for (len >>= 17; len > 0 && b < TCP_LANE_BUCKETS - 1; len >>= 1)
        b++;
    return b; /* [2^16, 2^17): 0, [2^17, 2^18): 1, ... */
}

/* The lane taken for class bucket when both are measured. */
static int lane_best(const double *cost)
{
    return cost[TCP_LANE_SHARED] < TCP_LANE_FAVOR * cost[TCP_LANE_SPLIT] ? TCP_LANE_SHARED
                                                                         : TCP_LANE_SPLIT;
}

int tcp_lane_pick(const tcp_lane_t *l, int bucket)
{
    const double *cost = l->cost[bucket];
    double lo, hi;
    int best;
    unsigned long every;

    if (cost[TCP_LANE_SPLIT] == 0)
        return TCP_LANE_SPLIT;
    if (cost[TCP_LANE_SHARED] == 0)
        return TCP_LANE_SHARED;
    best = lane_best(cost);
    lo = cost[best];
    hi = cost[!best];
    every = hi > TCP_LANE_CLEAR * lo ? TCP_LANE_EXPLORE_FAR : TCP_LANE_EXPLORE;
    return l->count[bucket] % every == every - 1 ? !best : best;
}

void tcp_lane_note(tcp_lane_t *l, int bucket, int lane, double seconds, uint64_t bytes)
{
    double *cost = &l->cost[bucket][lane];
    double c;

    if (bytes == 0 || !(seconds > 0))
        return;
    if (!l->warm[bucket]) {
        l->warm[bucket] = 1;
        return;
    }
    c = seconds / (double)bytes;
    if (*cost == 0 || l->cost[bucket][!lane] == 0 || lane != lane_best(l->cost[bucket]))
        *cost = c; /* the first, or a tried lane: what it had is old */
    else
        *cost = (1 - TCP_LANE_WEIGHT) * *cost + TCP_LANE_WEIGHT * c;
    l->used[lane]++;
}

size_t tcp_write_cap(size_t write_max, long mss)
{
    if (write_max == 0)
        return SIZE_MAX;
    if (mss <= 0)
        return write_max;
    if (write_max <= (size_t)mss)
        return (size_t)mss;
    return write_max - write_max % (size_t)mss;
}

size_t tcp_write_room(size_t done, size_t cap)
{
    return cap == SIZE_MAX ? SIZE_MAX : cap - done % cap;
}
