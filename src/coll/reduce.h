/*
 * reduce.h - the element-wise reduction kernels every algorithm shares.
 *
 * float16 and bfloat16 are widened to float32, reduced, and rounded back to
 * nearest even. Integer sums and products wrap (two's complement) rather than
 * overflow, so that no input is undefined behaviour. The kernels never allocate.
 */
#ifndef TIDE_COLL_REDUCE_H
#define TIDE_COLL_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "tide.h"

/* dst[i] = a[i] op b[i]; dst may alias a or b. AVG reduces as SUM here; the
 * division by the world size happens once, in tide__reduce_finish. */
void tide__reduce2(void *dst, const void *a, const void *b, size_t count, tide_dtype_t dtype,
                   tide_op_t op);

/* dst[i] = op over srcs[0..nsrc-1][i], in that order (so every rank that reduces
 * the same sources gets bit-identical results), also stored to dst2 when it is
 * not NULL. dst may alias any source. When divisor > 1 and op is AVG the result
 * is divided by it, with half types rounded once. */
void tide__reduce_n(void *dst, void *dst2, const void *const *srcs, int nsrc, size_t count,
                    tide_dtype_t dtype, tide_op_t op, int divisor);

/* For AVG: buf[i] /= n. No-op for the other ops. */
void tide__reduce_finish(void *buf, size_t count, tide_dtype_t dtype, tide_op_t op, int n);

float tide__half_to_float(uint16_t h);
uint16_t tide__float_to_half(float f);
float tide__bf16_to_float(uint16_t h);
uint16_t tide__float_to_bf16(float f);

#endif
