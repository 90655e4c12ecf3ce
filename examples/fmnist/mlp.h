/*
 * mlp.h - a multilayer perceptron (ReLU hidden layers, softmax cross-entropy) whose
 * forward and backward passes are cblas_sgemm calls.
 *
 * As in llm.c, every parameter lives in ONE contiguous float slab (params), every
 * gradient in a second slab of the same layout (grad) and the optimizer's momentum
 * in a third (mom). A gradient allreduce is then one call over grad, a state
 * broadcast one call over params, and a checkpoint one write per slab. The slab
 * layout is, for each layer l: W_l (in_l x out_l, row-major), then b_l (out_l).
 *
 * grad has one float more than params: grad[n_params] holds the scaled loss itself
 * (see fm_mlp_forward_backward), so that the loss travels with the gradients in the
 * same allreduce and a step costs one collective, not two.
 *
 * This module never talks to Tide; it computes on the samples it is given.
 */
#ifndef FM_MLP_H
#define FM_MLP_H

#include <stddef.h>
#include <stdint.h>

#define FM_MLP_MAX_LAYERS 8

typedef struct {
    int n_layers;                     /* weight layers; n_layers + 1 widths */
    int width[FM_MLP_MAX_LAYERS + 1]; /* width[0] inputs ... width[n_layers] classes */
    size_t w_off[FM_MLP_MAX_LAYERS];  /* offsets of W_l and b_l in the slabs */
    size_t b_off[FM_MLP_MAX_LAYERS];
    size_t n_params;
    size_t max_batch;

    float *params; /* n_params */
    float *grad;   /* n_params + 1 (see above) */
    float *mom;    /* n_params */

    /* Activations for up to max_batch rows: act[0] is the input, act[l] the output
     * of layer l (after ReLU for hidden layers, logits for the last); dact is the
     * gradient at one width, reused layer by layer. */
    float *act[FM_MLP_MAX_LAYERS + 1];
    float *dact[2];
} fm_mlp_t;

/* widths[0..n_layers]; returns 0, or -1 on bad widths or allocation failure. The
 * slabs are zeroed; call fm_mlp_init_params to draw the weights. */
int fm_mlp_init(fm_mlp_t *m, int n_layers, const int *widths, size_t max_batch);
void fm_mlp_free(fm_mlp_t *m);

/* He-uniform weights, zero biases, zero momentum, all from seed alone: every rank
 * given the same seed draws the same slab. */
void fm_mlp_init_params(fm_mlp_t *m, uint64_t seed);

/* The rows of the input buffer act[0]; fill rows * width[0] floats, then call. */
static inline float *fm_mlp_input(fm_mlp_t *m)
{
    return m->act[0];
}

/* Forward pass over `rows` inputs already in act[0] (rows <= max_batch). Returns
 * the SUM over the rows of the cross-entropy loss against labels; writes the number
 * of correct arg-max predictions to *correct when it is not NULL. */
double fm_mlp_forward(fm_mlp_t *m, size_t rows, const uint8_t *labels, size_t *correct);

/* Called during the backward pass once the gradient of layer l is final: the floats
 * grad[off .. off + len) will not be written again in this pass. Layers come last
 * to first, and each range is contiguous and ends where the previous one began, so
 * a caller can start an asynchronous allreduce on it while the pass goes on. The
 * range of the last layer includes the loss slot grad[n_params]. */
typedef void (*fm_layer_done_fn)(void *ctx, int layer, size_t off, size_t len);

/* Forward and backward pass: overwrites grad[0..n_params) with
 * scale * (the sum over the rows of d loss / d params), and grad[n_params] with
 * scale * (the summed loss). With scale = 1/B for a global batch of B split over
 * ranks, the sum of every rank's grad is the gradient of the mean loss over the
 * global batch, and its last entry that mean loss. rows may be 0 (grad becomes
 * zero). done, when not NULL, is called for every layer, also when rows is 0.
 * Returns the summed loss as fm_mlp_forward does. */
double fm_mlp_forward_backward(fm_mlp_t *m, size_t rows, const uint8_t *labels, float scale,
                               size_t *correct, fm_layer_done_fn done, void *ctx);

/* SGD with momentum (PyTorch's form: mom = mu * mom + (grad + wd * param);
 * param -= lr * mom). */
void fm_mlp_sgd(fm_mlp_t *m, float lr, float momentum, float weight_decay);

#endif /* FM_MLP_H */
