/* topo.c -- pure topology functions (see topo.h for the pictures). */
#include "collectives/topo.h"

int topo_mod(int a, int n)
{
    int m = a % n;
    return m < 0 ? m + n : m;
}

int topo_ring_next(int rank, int size) { return topo_mod(rank + 1, size); }
int topo_ring_prev(int rank, int size) { return topo_mod(rank - 1, size); }

void topo_segment(size_t count, int nseg, int index, size_t *off_p, size_t *len_p)
{
    size_t base = count / (size_t)nseg;
    size_t extra = count % (size_t)nseg;
    size_t i = (size_t)index;

    *len_p = base + (i < extra ? 1 : 0);
    *off_p = i * base + (i < extra ? i : extra);
}

int topo_tree_parent(int rank) { return rank == 0 ? -1 : (rank - 1) / 2; }

int topo_tree_children(int rank, int size, int children_p[2])
{
    int n = 0;

    for (int c = 2 * rank + 1; c <= 2 * rank + 2; c++)
        if (c < size)
            children_p[n++] = c;
    return n;
}

int topo_tree_depth(int size)
{
    int depth = 0;

    for (int last = size - 1; last > 0; last = (last - 1) / 2)
        depth++;
    return depth;
}

int topo_binomial(int rank, int size, int root, int children_p[32], int *nchildren_p)
{
    int v = topo_mod(rank - root, size);
    int parent = -1;
    int mask = 1;
    int n = 0;

    while (mask < size) {
        if (v & mask) {
            parent = topo_mod(v - mask + root, size);
            break;
        }
        mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1)
        if (v + mask < size)
            children_p[n++] = topo_mod(v + mask + root, size);
    *nchildren_p = n;
    return parent;
}

int topo_pow2_floor(int n)
{
    int p = 1;

    while (p <= n / 2)
        p *= 2;
    return p;
}

int topo_rd_newrank(int rank, int size)
{
    int rem = size - topo_pow2_floor(size);

    if (rank < 2 * rem)
        return rank % 2 ? rank / 2 : -1;
    return rank - rem;
}

int topo_rd_oldrank(int newrank, int size)
{
    int rem = size - topo_pow2_floor(size);

    return newrank < rem ? newrank * 2 + 1 : newrank + rem;
}

int topo_log2_ceil(int n)
{
    int l = 0;

    while (l < 30 && (1 << l) < n)
        l++;
    if ((1 << l) < n)
        l++;
    return l;
}
