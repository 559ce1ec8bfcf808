/* The Q8_0 format: blocks of 32 values, each stored as round(x / d) with d = max|x| / 127. */
#include "demo.h"

#include <math.h>

void quantize_row_q8_0(const float *x, block_q8_0 *y, int64_t n) {
    for (int64_t b = 0; b < n / QK8_0; b++) {
        const float *xb = x + b * QK8_0;
        float amax = 0.0f;
        for (int i = 0; i < QK8_0; i++) {
            amax = fmaxf(amax, fabsf(xb[i]));
        }
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = d;
        for (int i = 0; i < QK8_0; i++) {
            y[b].qs[i] = (int8_t)lrintf(xb[i] * id);
        }
    }
}

void dequantize_row_q8_0(const block_q8_0 *x, float *y, int64_t n) {
    for (int64_t b = 0; b < n / QK8_0; b++) {
        for (int i = 0; i < QK8_0; i++) {
            y[b * QK8_0 + i] = x[b].d * (float)x[b].qs[i];
        }
    }
}
