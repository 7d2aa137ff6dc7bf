/* status.c -- names and strings of flx_status_t, generated from one X-macro. */
#include "flexcoll.h"

const char *flx_status_string(flx_status_t status)
{
    switch (status) {
#define FLX_STATUS_TEXT_(name, value, text) case name: return text;
    FLX_STATUS_LIST(FLX_STATUS_TEXT_)
#undef FLX_STATUS_TEXT_
    }
    return "unknown status";
}

const char *flx_status_name(flx_status_t status)
{
    switch (status) {
#define FLX_STATUS_NAME_(name, value, text) case name: return #name;
    FLX_STATUS_LIST(FLX_STATUS_NAME_)
#undef FLX_STATUS_NAME_
    }
    return "FLX_UNKNOWN_STATUS";
}
