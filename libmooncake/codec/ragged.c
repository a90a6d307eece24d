/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The typed-ragged layout of structured non-tensor fields
 * (include/mooncake/codec.h).
 *
 * Packing is two passes over the row descriptors: mc_codec_ragged_measure()
 * checks every row and sizes the outputs, mc_codec_ragged_pack() checks
 * again (the caller may have changed nothing, but the outputs must never be
 * half written) and then fills the small arrays and hands the data copy to
 * mc_fastcopy_gather(), which splits large copies across threads.
 * mc_codec_ragged_describe() is pack without the data copy, for a writer
 * that sends the rows from their own memory.  The
 * reading side never trusts what it was given: mc_codec_ragged_check()
 * bounds every field before the Python decoder slices the data with it,
 * and mc_codec_blob_check() does the same for the byte-string codecs.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <mooncake/codec.h>
#include <mooncake/fastcopy.h>
#include <mooncake/store.h>

#include "common/log.h"

/* Elements of one row, or SIZE_MAX with a detail set when its shape and
 * bytes disagree. */
static size_t row_elems(const mc_codec_row_t *r, size_t i, size_t itemsize)
{
    size_t elems = 1;

    if (r->is_null) {
        if ((r->nbytes != 0) || (r->ndim != 0)) {
            mc_set_error_detail("row %zu is null but has %zu bytes and %u dimensions", i,
                                r->nbytes, r->ndim);
            return SIZE_MAX;
        }
        return 0;
    }
    if (r->ndim > MC_CODEC_MAX_NDIM) {
        mc_set_error_detail("row %zu has %u dimensions (at most %d)", i, r->ndim,
                            MC_CODEC_MAX_NDIM);
        return SIZE_MAX;
    }
    if ((r->ndim > 0) && (r->shape == NULL)) {
        mc_set_error_detail("row %zu has %u dimensions but no shape", i, r->ndim);
        return SIZE_MAX;
    }
    for (uint32_t d = 0; d < r->ndim; d++) {
        int64_t dim = r->shape[d];
        if (dim < 0) {
            mc_set_error_detail("row %zu has a negative dimension", i);
            return SIZE_MAX;
        }
        if ((dim > 0) && (elems > SIZE_MAX / 2 / (uint64_t)dim)) {
            mc_set_error_detail("row %zu has too many elements", i);
            return SIZE_MAX;
        }
        elems *= (size_t)dim;
    }
    if ((elems > SIZE_MAX / itemsize) || (elems * itemsize != r->nbytes)) {
        mc_set_error_detail("row %zu has %zu bytes, its shape makes %zu elements of %zu bytes",
                            i, r->nbytes, elems, itemsize);
        return SIZE_MAX;
    }
    if ((r->nbytes > 0) && (r->base == NULL)) {
        mc_set_error_detail("row %zu has %zu bytes at NULL", i, r->nbytes);
        return SIZE_MAX;
    }
    return elems;
}

MC_API mc_status_t mc_codec_ragged_measure(const mc_codec_row_t *rows, size_t n,
                                           size_t itemsize, size_t *elems_p,
                                           uint32_t *max_ndim_p)
{
    size_t total     = 0;
    uint32_t max_ndim = 0;

    if (itemsize == 0) {
        mc_set_error_detail("itemsize is 0");
        return MC_INVALID_PARAMS;
    }
    if ((n > 0) && (rows == NULL)) {
        mc_set_error_detail("rows is NULL");
        return MC_INVALID_PARAMS;
    }
    for (size_t i = 0; i < n; i++) {
        size_t e = row_elems(&rows[i], i, itemsize);
        if (e == SIZE_MAX)
            return MC_INVALID_PARAMS;
        if (e > (SIZE_MAX / itemsize) - total) {
            mc_set_error_detail("the rows hold too many elements");
            return MC_INVALID_PARAMS;
        }
        total += e;
        if (rows[i].ndim > max_ndim)
            max_ndim = rows[i].ndim;
    }
    if (elems_p != NULL)
        *elems_p = total;
    if (max_ndim_p != NULL)
        *max_ndim_p = max_ndim;
    return MC_OK;
}

/* The checks of describe and pack: the rows, the outputs and the width
 * (sets *elems_p); a detail is set on failure. */
static mc_status_t check_outputs(const mc_codec_row_t *rows, size_t n, size_t itemsize,
                                 const int64_t *offsets_out, const int64_t *shapes_out,
                                 size_t width, const int16_t *ndims_out,
                                 const uint8_t *nulls_out, size_t *elems_p)
{
    uint32_t max_ndim = 0;
    mc_status_t st    = mc_codec_ragged_measure(rows, n, itemsize, elems_p, &max_ndim);

    if (st != MC_OK)
        return st;
    if ((offsets_out == NULL) || ((n > 0) && ((shapes_out == NULL) || (ndims_out == NULL) ||
                                              (nulls_out == NULL)))) {
        mc_set_error_detail("an output array is NULL");
        return MC_INVALID_PARAMS;
    }
    if ((width < 1) || (width < max_ndim)) {
        mc_set_error_detail("shape width %zu is below the largest ndim %u (or 1)", width,
                            max_ndim);
        return MC_INVALID_PARAMS;
    }
    return MC_OK;
}

/* Fill the small arrays of checked rows. */
static void fill_layout(const mc_codec_row_t *rows, size_t n, size_t itemsize,
                        int64_t *offsets_out, int64_t *shapes_out, size_t width,
                        int16_t *ndims_out, uint8_t *nulls_out)
{
    if (n > 0)
        memset(shapes_out, 0, n * width * sizeof(*shapes_out));
    offsets_out[0] = 0;
    for (size_t i = 0; i < n; i++) {
        const mc_codec_row_t *r = &rows[i];
        offsets_out[i + 1] = offsets_out[i] + (int64_t)(r->nbytes / itemsize);
        ndims_out[i] = (int16_t)r->ndim;
        nulls_out[i] = r->is_null ? 1 : 0;
        for (uint32_t d = 0; d < r->ndim; d++)
            shapes_out[i * width + d] = r->shape[d];
    }
}

MC_API mc_status_t mc_codec_ragged_describe(const mc_codec_row_t *rows, size_t n,
                                            size_t itemsize, int64_t *offsets_out,
                                            int64_t *shapes_out, size_t width,
                                            int16_t *ndims_out, uint8_t *nulls_out,
                                            size_t *elems_p)
{
    size_t elems = 0;
    mc_status_t st = check_outputs(rows, n, itemsize, offsets_out, shapes_out, width,
                                   ndims_out, nulls_out, &elems);

    if (st != MC_OK)
        return st;
    fill_layout(rows, n, itemsize, offsets_out, shapes_out, width, ndims_out, nulls_out);
    if (elems_p != NULL)
        *elems_p = elems;
    return MC_OK;
}

MC_API mc_status_t mc_codec_ragged_pack(const mc_codec_row_t *rows, size_t n, size_t itemsize,
                                        void *data_out, size_t data_size,
                                        int64_t *offsets_out, int64_t *shapes_out,
                                        size_t width, int16_t *ndims_out, uint8_t *nulls_out,
                                        unsigned nthreads)
{
    size_t elems = 0, copied = 0;
    mc_iov_t *iov = NULL;
    mc_status_t st = check_outputs(rows, n, itemsize, offsets_out, shapes_out, width,
                                   ndims_out, nulls_out, &elems);

    if (st != MC_OK)
        return st;
    if (elems * itemsize > data_size) {
        mc_set_error_detail("data buffer too small: %zu bytes for %zu", data_size,
                            elems * itemsize);
        return MC_INVALID_PARAMS;
    }
    if (n > 0) {
        iov = malloc(n * sizeof(*iov));
        if (iov == NULL) {
            mc_set_error_detail("out of memory for %zu row descriptors", n);
            return MC_NO_AVAILABLE_HANDLE;
        }
    }
    for (size_t i = 0; i < n; i++)
        iov[i] = (mc_iov_t){rows[i].base, rows[i].nbytes};
    fill_layout(rows, n, itemsize, offsets_out, shapes_out, width, ndims_out, nulls_out);
    st = mc_fastcopy_gather(data_out, data_size, iov, n, nthreads, &copied);
    free(iov);
    return st;
}

MC_API mc_status_t mc_codec_ragged_check(const int64_t *offsets, const int64_t *shapes,
                                         size_t width, const int16_t *ndims,
                                         const uint8_t *nulls, size_t n, size_t data_elems)
{
    if ((offsets == NULL) || ((n > 0) && ((shapes == NULL) || (ndims == NULL) ||
                                          (nulls == NULL)))) {
        mc_set_error_detail("a layout array is NULL");
        return MC_INVALID_PARAMS;
    }
    if (offsets[0] != 0) {
        mc_set_error_detail("typed ragged offsets start at %lld, not 0", (long long)offsets[0]);
        return MC_INVALID_PARAMS;
    }
    for (size_t i = 0; i < n; i++) {
        int64_t count = offsets[i + 1] - offsets[i];
        uint64_t elems = 1;
        if ((offsets[i + 1] < offsets[i]) || ((uint64_t)offsets[i + 1] > data_elems)) {
            mc_set_error_detail("typed ragged offsets of row %zu are out of order or past the "
                                "%zu data elements", i, data_elems);
            return MC_INVALID_PARAMS;
        }
        if ((ndims[i] < 0) || ((size_t)ndims[i] > width)) {
            mc_set_error_detail("typed ragged row %zu has ndim %d (width %zu)", i, ndims[i],
                                width);
            return MC_INVALID_PARAMS;
        }
        if (nulls[i]) {
            if (count != 0) {
                mc_set_error_detail("typed ragged row %zu is null but has %lld elements", i,
                                    (long long)count);
                return MC_INVALID_PARAMS;
            }
            continue;
        }
        for (int d = 0; d < ndims[i]; d++) {
            int64_t dim = shapes[i * width + (size_t)d];
            if ((dim < 0) || __builtin_mul_overflow(elems, (uint64_t)dim, &elems)) {
                mc_set_error_detail("typed ragged row %zu has a bad shape", i);
                return MC_INVALID_PARAMS;
            }
        }
        if (elems != (uint64_t)count) {
            mc_set_error_detail("typed ragged row %zu has shape of %llu elements but %lld "
                                "stored", i, (unsigned long long)elems, (long long)count);
            return MC_INVALID_PARAMS;
        }
    }
    if ((uint64_t)offsets[n] != data_elems) {
        mc_set_error_detail("typed ragged offsets end at %lld, the data has %zu elements",
                            (long long)offsets[n], data_elems);
        return MC_INVALID_PARAMS;
    }
    return MC_OK;
}

MC_API mc_status_t mc_codec_ragged_select(const int64_t *offsets, size_t n, const int64_t *idx,
                                          size_t nidx, int64_t *runs_out, size_t *nruns_p,
                                          int64_t *offsets_out)
{
    size_t nruns = 0;

    if ((offsets == NULL) || (offsets_out == NULL) ||
        ((nidx > 0) && ((idx == NULL) || (runs_out == NULL)))) {
        mc_set_error_detail("an array is NULL");
        return MC_INVALID_PARAMS;
    }
    for (size_t k = 0; k < nidx; k++) {
        if ((idx[k] < 0) || ((uint64_t)idx[k] >= n)) {
            mc_set_error_detail("row index %lld out of range for %zu rows", (long long)idx[k],
                                n);
            return MC_INVALID_PARAMS;
        }
        if (offsets[idx[k] + 1] < offsets[idx[k]]) {
            mc_set_error_detail("offsets of row %lld decrease", (long long)idx[k]);
            return MC_INVALID_PARAMS;
        }
    }
    offsets_out[0] = 0;
    for (size_t k = 0; k < nidx; k++) {
        int64_t lo = offsets[idx[k]], count = offsets[idx[k] + 1] - lo;
        offsets_out[k + 1] = offsets_out[k] + count;
        if (count == 0)
            continue;
        /* a row that starts where the previous run ends extends it */
        if ((nruns > 0) && (runs_out[2 * nruns - 2] + runs_out[2 * nruns - 1] == lo)) {
            runs_out[2 * nruns - 1] += count;
            continue;
        }
        runs_out[2 * nruns]     = lo;
        runs_out[2 * nruns + 1] = count;
        nruns++;
    }
    if (nruns_p != NULL)
        *nruns_p = nruns;
    return MC_OK;
}

MC_API mc_status_t mc_codec_blob_check(const int64_t *offsets, size_t n, size_t data_bytes)
{
    if (n == 0)
        return MC_OK;
    if (offsets == NULL) {
        mc_set_error_detail("ragged offsets do not match the data: offsets is NULL");
        return MC_INVALID_PARAMS;
    }
    if (offsets[0] != 0) {
        mc_set_error_detail("ragged offsets do not match the data: they start at %lld, not 0",
                            (long long)offsets[0]);
        return MC_INVALID_PARAMS;
    }
    for (size_t i = 0; i < n; i++) {
        if (offsets[i + 1] < offsets[i]) {
            mc_set_error_detail("ragged offsets do not match the data: row %zu ends at %lld, "
                                "before it starts (%lld)", i, (long long)offsets[i + 1],
                                (long long)offsets[i]);
            return MC_INVALID_PARAMS;
        }
    }
    if ((uint64_t)offsets[n] != data_bytes) {
        mc_set_error_detail("ragged offsets do not match the data: they end at %lld, the data "
                            "has %zu bytes", (long long)offsets[n], data_bytes);
        return MC_INVALID_PARAMS;
    }
    return MC_OK;
}
