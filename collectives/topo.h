/* topo.h -- topology as pure functions: ring order, segment partition,
 * binary tree, binomial tree, recursive doubling and Bruck partners.  No
 * side effects; unit-tested in tests/check_topo.c. */
#ifndef FLX_COLLECTIVES_TOPO_H
#define FLX_COLLECTIVES_TOPO_H

#include <stddef.h>

/*  ring:   0 -> 1 -> 2 -> ... -> N-1 -> 0  */
int topo_ring_next(int rank, int size);
int topo_ring_prev(int rank, int size);
/* (a mod n) for any int a, n > 0 */
int topo_mod(int a, int n);

/* Split count elements into nseg contiguous segments whose lengths differ by
 * at most one (the first count % nseg are one longer). */
void topo_segment(size_t count, int nseg, int index, size_t *off_p, size_t *len_p);

/*  binary tree in heap order, rooted at 0:
 *
 *              0
 *            /   \
 *           1     2
 *          / \   / \
 *         3   4 5   6
 *
 *  parent(r) = (r-1)/2 (-1 for the root); children 2r+1, 2r+2 when < size.
 *  Returns the number of children written to children_p[2]. */
int topo_tree_parent(int rank);
int topo_tree_children(int rank, int size, int children_p[2]);
int topo_tree_depth(int size);

/*  binomial tree rooted at root (virtual rank v = rank - root mod N):
 *  v receives from v minus its lowest set bit and sends to v + 2^k for
 *  every 2^k below that bit.  For N = 8, root 0:
 *
 *      0 -> 4, 2, 1      4 -> 6, 5      2 -> 3      6 -> 7
 *
 *  Returns the parent (-1 at the root) and writes up to 32 children,
 *  farthest first, to children_p; *nchildren_p gets their number. */
int topo_binomial(int rank, int size, int root, int children_p[32], int *nchildren_p);

/*  recursive doubling over the largest power of two p <= N.  The first
 *  2(N-p) ranks pair up: even ranks hand their data to rank+1 and sit out.
 *  topo_rd_newrank: the rank's index among the p active ranks, or -1.
 *  topo_rd_oldrank: inverse mapping. */
int topo_pow2_floor(int n);
int topo_rd_newrank(int rank, int size);
int topo_rd_oldrank(int newrank, int size);

/* ceil(log2(n)) for n >= 1 */
int topo_log2_ceil(int n);

#endif
