/* async.c -- non-blocking collectives: a background thread per
 * communicator runs queued requests in issue order, so a trainer can
 * overlap communication with computation.  The thread starts with the
 * first non-blocking call. */
#include "collectives/coll.h"
#include "common/dtype.h"
#include "common/log.h"
#include "common/thread.h"

#include <stdint.h>
#include <stdlib.h>

/* Every request handed out and not yet ended by flx_wait or flx_test (nor
 * freed by flx_comm_destroy).  The caller's handle is the request's serial
 * number, not its address: serials are never reused in the process, so a
 * handle that is no longer pending (a second flx_wait, a wait after the
 * communicator is gone) is refused with one log line, however soon a new
 * request takes the old one's memory.  Few requests are live at a time: a
 * list will do. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t live_cond = PTHREAD_COND_INITIALIZER; /* a claim let go */
enum { CLAIM_NONE, CLAIM_WAIT, CLAIM_TEST };
static flx_request_t *live_head;
static uint64_t live_serial; /* the last serial handed out (0: none) */

static void live_unlink(flx_request_t *req) /* live_lock held */
{
    if (req->live_prev)
        req->live_prev->live_next = req->live_next;
    else
        live_head = req->live_next;
    if (req->live_next)
        req->live_next->live_prev = req->live_prev;
}

/* The live request behind handle, taken for fn (how: CLAIM_WAIT or
 * CLAIM_TEST); NULL (and one log line) if there is none, or another thread
 * waits for it.  A flx_test only looks and lets go at once: its claim is
 * waited out, and the request may be gone afterwards (that test ended it). */
static flx_request_t *live_claim(flx_request_h handle, const char *fn, int how)
{
    const uint64_t serial = (uint64_t)(uintptr_t)handle;
    flx_request_t *r;
    int rank = -1, busy = 0;

    pthread_mutex_lock(&live_lock);
    for (;;) {
        for (r = live_head; r != NULL && r->serial != serial; r = r->live_next)
            ;
        if (r == NULL || r->claimed != CLAIM_TEST)
            break;
        pthread_cond_wait(&live_cond, &live_lock);
    }
    if (r != NULL && r->claimed) {
        rank = r->comm->rank;
        busy = 1;
        r = NULL;
    } else if (r != NULL) {
        r->claimed = how;
    }
    pthread_mutex_unlock(&live_lock);
    if (busy)
        flx_error(COLL, rank, "%s: request %llu is being waited for in another thread", fn,
                  (unsigned long long)serial);
    else if (r == NULL)
        flx_error(COLL, -1, "%s: request %llu is not pending (already ended by flx_wait or "
                  "flx_test, or its communicator destroyed)", fn, (unsigned long long)serial);
    return r;
}

/* End a claimed request: out of the list, freed. */
static void live_end(flx_request_t *req)
{
    pthread_mutex_lock(&live_lock);
    live_unlink(req);
    pthread_cond_broadcast(&live_cond); /* a claim waiting for this test's */
    pthread_mutex_unlock(&live_lock);
    free(req);
}

static void *async_worker(void *arg)
{
    flx_comm_h comm = arg;

    pthread_mutex_lock(&comm->lock);
    for (;;) {
        flx_request_t *req;
        flx_status_t st;

        while (comm->q_head == NULL && !comm->worker_stop)
            pthread_cond_wait(&comm->cond, &comm->lock);
        if (comm->q_head == NULL)
            break;
        req = comm->q_head;
        comm->q_head = req->next;
        if (comm->q_head == NULL)
            comm->q_tail = NULL;
        pthread_mutex_unlock(&comm->lock);

        pthread_mutex_lock(&comm->exec);
        comm_sync_abort(comm);
        st = comm->err != FLX_OK && comm_aborted(comm) ? FLX_ERR_ABORTED : comm->err;
        if (st == FLX_OK) {
            st = req->kind == COLL_ALLREDUCE
                     ? comm_run_allreduce(comm, req->sendbuf, req->recvbuf, req->count,
                                          req->dtype, req->op, req->algo)
                     : comm_run_allgather(comm, req->sendbuf, req->recvbuf, req->count,
                                          req->dtype, req->algo);
            comm_record_error(comm, st);
            coll_end(comm);
            comm_sync_abort(comm); /* as comm_leave */
        }
        comm_exec_unlock(comm);

        pthread_mutex_lock(&comm->lock);
        req->status = st;
        req->done = 1;
        comm->pending--;
        pthread_cond_broadcast(&comm->cond);
    }
    pthread_mutex_unlock(&comm->lock);
    return NULL;
}

static flx_status_t async_submit(flx_comm_h comm, flx_request_t *req, flx_request_h *req_p)
{
    uint64_t serial;

    if (comm_aborted(comm)) { /* no request: the call itself fails */
        free(req);
        return FLX_ERR_ABORTED;
    }
    pthread_mutex_lock(&comm->lock);
    if (!comm->worker_started) {
        int rc = flx_thread_start(&comm->worker, async_worker, comm, 0);
        if (rc != 0) {
            pthread_mutex_unlock(&comm->lock);
            flx_error(COLL, comm->rank, "cannot start the progress thread (error %d)", rc);
            free(req);
            return FLX_ERR_SYSTEM;
        }
        comm->worker_started = 1;
    }
    req->comm = comm;
    if (comm->q_tail)
        comm->q_tail->next = req;
    else
        comm->q_head = req;
    comm->q_tail = req;
    comm->pending++;
    pthread_mutex_lock(&live_lock); /* live before the caller can hold it */
    req->serial = serial = ++live_serial;
    req->live_prev = NULL;
    req->live_next = live_head;
    if (live_head)
        live_head->live_prev = req;
    live_head = req;
    pthread_mutex_unlock(&live_lock);
    pthread_cond_broadcast(&comm->cond);
    pthread_mutex_unlock(&comm->lock);
    *req_p = (flx_request_h)(uintptr_t)serial; /* a number, never an address */
    return FLX_OK;
}

flx_status_t flx_iallreduce(flx_comm_h comm, const void *sendbuf, void *recvbuf, size_t count,
                            flx_dtype_t dtype, flx_op_t op, flx_algo_t algo,
                            flx_request_h *req_p)
{
    flx_request_t *req;
    flx_status_t st;

    if (req_p == NULL) {
        flx_error(COLL, comm ? comm->rank : -1, "flx_iallreduce: req_p is NULL");
        return FLX_ERR_INVALID_ARG;
    }
    /* same checks as the blocking call, without running it */
    st = flx_allreduce_check("flx_iallreduce", comm, sendbuf, recvbuf, count, dtype, op, algo);
    if (st != FLX_OK)
        return st;
    req = calloc(1, sizeof(*req));
    if (req == NULL) {
        flx_error(COLL, comm->rank, "out of memory for a non-blocking request");
        return FLX_ERR_NO_MEMORY;
    }
    *req = (flx_request_t){.kind = COLL_ALLREDUCE, .sendbuf = sendbuf, .recvbuf = recvbuf,
                           .count = count, .dtype = dtype, .op = op, .algo = algo};
    return async_submit(comm, req, req_p);
}

flx_status_t flx_iallgather(flx_comm_h comm, const void *sendbuf, void *recvbuf, size_t count,
                            flx_dtype_t dtype, flx_algo_t algo, flx_request_h *req_p)
{
    flx_request_t *req;
    flx_status_t st;

    if (req_p == NULL) {
        flx_error(COLL, comm ? comm->rank : -1, "flx_iallgather: req_p is NULL");
        return FLX_ERR_INVALID_ARG;
    }
    st = flx_allgather_check("flx_iallgather", comm, sendbuf, recvbuf, count, dtype, algo);
    if (st != FLX_OK)
        return st;
    req = calloc(1, sizeof(*req));
    if (req == NULL) {
        flx_error(COLL, comm->rank, "out of memory for a non-blocking request");
        return FLX_ERR_NO_MEMORY;
    }
    *req = (flx_request_t){.kind = COLL_ALLGATHER, .sendbuf = sendbuf, .recvbuf = recvbuf,
                           .count = count, .dtype = dtype, .algo = algo};
    return async_submit(comm, req, req_p);
}

flx_status_t flx_test(flx_request_h handle)
{
    flx_request_t *req;
    flx_comm_h comm;
    flx_status_t st;

    if (handle == NULL) {
        flx_error(COLL, -1, "flx_test: request is NULL");
        return FLX_ERR_INVALID_ARG;
    }
    if ((req = live_claim(handle, "flx_test", CLAIM_TEST)) == NULL)
        return FLX_ERR_INVALID_ARG;
    comm = req->comm;
    pthread_mutex_lock(&comm->lock);
    if (!req->done) {
        pthread_mutex_unlock(&comm->lock);
        pthread_mutex_lock(&live_lock);
        req->claimed = CLAIM_NONE;
        pthread_cond_broadcast(&live_cond);
        pthread_mutex_unlock(&live_lock);
        return FLX_INPROGRESS;
    }
    pthread_mutex_unlock(&comm->lock);
    st = req->status;
    live_end(req);
    return st;
}

flx_status_t flx_wait(flx_request_h handle)
{
    flx_request_t *req;
    flx_comm_h comm;
    flx_status_t st;

    if (handle == NULL) {
        flx_error(COLL, -1, "flx_wait: request is NULL");
        return FLX_ERR_INVALID_ARG;
    }
    if ((req = live_claim(handle, "flx_wait", CLAIM_WAIT)) == NULL)
        return FLX_ERR_INVALID_ARG;
    comm = req->comm;
    pthread_mutex_lock(&comm->lock);
    while (!req->done)
        pthread_cond_wait(&comm->cond, &comm->lock);
    pthread_mutex_unlock(&comm->lock);
    st = req->status;
    live_end(req);
    return st;
}

void comm_async_stop(flx_comm_h comm)
{
    pthread_mutex_lock(&comm->lock);
    if (!comm->worker_started) {
        pthread_mutex_unlock(&comm->lock);
        return;
    }
    comm->worker_stop = 1;
    pthread_cond_broadcast(&comm->cond);
    pthread_mutex_unlock(&comm->lock);
    pthread_join(comm->worker, NULL);
    comm->worker_started = 0;
    /* every request has ended: those the caller did not end go with comm */
    pthread_mutex_lock(&live_lock);
    for (flx_request_t *r = live_head, *next; r != NULL; r = next) {
        next = r->live_next;
        if (r->comm == comm && !r->claimed) {
            live_unlink(r);
            free(r);
        }
    }
    pthread_mutex_unlock(&live_lock);
}
