/* flx-example -- the smallest complete flexcoll program (also in README.md):
 * every rank contributes rank+1, the allreduce returns the sum everywhere.
 *
 *   flxrun -n 4 ./flx-example          # or: mpirun -np 4 -x FLX_ROOT=host:port ./flx-example
 */
#include <flexcoll.h>
#include <stdio.h>

int main(void)
{
    flx_comm_h comm;
    flx_status_t st = flx_comm_create(NULL, &comm);   /* rank/size/root from the environment */
    float x[4];
    int rank, size;

    if (st != FLX_OK) {
        fprintf(stderr, "flx_comm_create: %s\n", flx_status_string(st));
        return 1;
    }
    rank = flx_comm_rank(comm);
    size = flx_comm_size(comm);
    for (int i = 0; i < 4; i++)
        x[i] = (float)(rank + 1);
    st = flx_allreduce(comm, x, x, 4, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO);  /* in place */
    if (st != FLX_OK) {
        fprintf(stderr, "flx_allreduce: %s\n", flx_status_string(st));
        flx_comm_destroy(comm);
        return 1;
    }
    printf("rank %d of %d: sum = %g (expected %d)\n", rank, size, x[0], size * (size + 1) / 2);
    flx_comm_destroy(comm);
    return x[0] == (float)(size * (size + 1) / 2) ? 0 : 1;
}
