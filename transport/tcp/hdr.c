/* hdr.c -- decoding and matching of the tcp wire header (see hdr.h). */
#include "transport/tcp/hdr.h"

#include <string.h>

_Static_assert(sizeof(tcp_hdr_t) == TCP_HDR_BYTES, "the wire header is 48 bytes");

flx_status_t tcp_hdr_decode(const void *buf, size_t len, tcp_hdr_t *hdr_p,
                            const char **why_p)
{
    tcp_hdr_t h;

    if (buf == NULL || len != sizeof(h)) {
        *why_p = "truncated header";
        return FLX_ERR_PROTOCOL;
    }
    memcpy(&h, buf, sizeof(h));
    if (h.magic != TCP_MAGIC) {
        *why_p = "bad magic";
        return FLX_ERR_PROTOCOL;
    }
    if (h.type != TCP_MSG_DATA && h.type != TCP_MSG_ERROR && h.type != TCP_MSG_BYE &&
        h.type != TCP_MSG_SWITCH) {
        *why_p = "unknown message type";
        return FLX_ERR_PROTOCOL;
    }
    *hdr_p = h;
    return FLX_OK;
}

int tcp_hdr_match(const tcp_hdr_t *h, const tl_tag_t *tag, size_t expected)
{
    if (h->seq != tag->seq)
        return TCP_HDR_OTHER;
    if (h->kind != tag->kind || h->dtype != tag->dtype || h->op != tag->op ||
        h->count != tag->count)
        return FLX_ERR_MISMATCH;
    if (h->step != tag->step)
        return TCP_HDR_OTHER;
    if (h->len != expected)
        return FLX_ERR_PROTOCOL;
    return FLX_OK;
}
