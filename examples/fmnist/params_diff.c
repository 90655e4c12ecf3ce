/*
 * params_diff.c - fmnist-params-diff: compares two parameter files written by
 * fmnist-train --save-params (params.h) and says whether they agree within a
 * tolerance.
 *
 * The relative difference is taken against the scale of the whole slab,
 * max_i |a_i - b_i| / max_i max(|a_i|, |b_i|), not element by element: many
 * parameters (biases, weights that training pushed through zero) are near 0, and
 * there a rounding difference of 1e-9 would be an element-wise relative difference
 * of 100%. The element-wise maximum is printed too, for information.
 *
 * Exit status: 0 within --rtol, 1 not (or different parameter counts), 2 bad
 * arguments or a file that is not a well-formed parameter file.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "params.h"

/* Runs with the same options and seed but a different membership history differ
 * only in float summation order (4 ranks or 3 add the slices' gradients in a
 * different order). Within one basin such runs agree to about 1e-7 (measured, seed
 * 1, 360 steps: 1.8e-7 to 7.7e-7), but they may also end in different basins,
 * 1e-2 and more apart (4 against 3 undisturbed ranks: 5.6e-7 at 200 steps, 2.4e-2
 * at 360), where no tolerance separates a correct run from a broken one
 * (docs/example-fmnist.md, "Basins, not drift"). 1e-5 sits between the two. */
#define DEFAULT_RTOL 1e-5

static const char *prog = "fmnist-params-diff";

static void usage(FILE *f)
{
    fprintf(f,
            "usage: %s [--rtol X] A B\n"
            "  compares two files of fmnist-train --save-params; prints the number of\n"
            "  parameters, the max absolute and max relative difference (relative to the\n"
            "  largest parameter magnitude) and exits 0 if the relative difference is\n"
            "  at most X (default %g), 1 if not, 2 on bad arguments or a bad file\n",
            prog, DEFAULT_RTOL);
}

static _Noreturn void bad_arg(const char *what)
{
    fprintf(stderr, "%s: %s\n(see %s --help)\n", prog, what, prog);
    exit(2);
}

int main(int argc, char **argv)
{
    double rtol = DEFAULT_RTOL;
    const char *path[2] = {NULL, NULL};
    int npaths = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(a, "--rtol") == 0 || strncmp(a, "--rtol=", 7) == 0) {
            const char *v = a[6] == '=' ? a + 7 : (i + 1 < argc ? argv[++i] : NULL);
            char *end;
            errno = 0;
            double x = v && *v ? strtod(v, &end) : NAN;
            if (!v || !*v || errno || *end || !(x >= 0.0 && x <= 1e6)) {
                fprintf(stderr, "%s: --rtol needs a number in [0, 1e6], got '%s'\n", prog,
                        v ? v : "");
                exit(2);
            }
            rtol = x;
            continue;
        }
        if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "%s: unknown option '%s'\n(see %s --help)\n", prog, a, prog);
            exit(2);
        }
        if (npaths == 2) bad_arg("give exactly two files");
        path[npaths++] = a;
    }
    if (npaths != 2) bad_arg("give exactly two files");

    float *p[2] = {NULL, NULL};
    size_t n[2] = {0, 0};
    char err[1024];
    for (int k = 0; k < 2; k++)
        if (fm_params_load(path[k], &p[k], &n[k], err, sizeof err) != 0) {
            fprintf(stderr, "%s: %s\n", prog, err);
            free(p[0]);
            return 2;
        }
    if (n[0] != n[1]) {
        printf("params %zu vs %zu: different models\n", n[0], n[1]);
        free(p[0]);
        free(p[1]);
        return 1;
    }

    /* A NaN anywhere makes the files disagree: fmax would silently drop it. */
    double max_abs = 0.0, scale = 0.0, max_elem = 0.0;
    size_t worst = 0, nan = 0;
    for (size_t i = 0; i < n[0]; i++) {
        double a = p[0][i], b = p[1][i];
        if (isnan(a) || isnan(b)) {
            nan++;
            continue;
        }
        double d = fabs(a - b), m = fmax(fabs(a), fabs(b));
        if (d > max_abs) {
            max_abs = d;
            worst = i;
        }
        if (m > scale) scale = m;
        if (m > 0 && d / m > max_elem) max_elem = d / m;
    }
    double max_rel = scale > 0 ? max_abs / scale : (max_abs > 0 ? INFINITY : 0.0);
    int ok = nan == 0 && max_rel <= rtol;
    printf("params %zu  max_abs %.3e (index %zu)  max_rel %.3e  (of max |param| %.4g; "
           "element-wise max %.3e)  nan %zu  rtol %.1e: %s\n",
           n[0], max_abs, worst, max_rel, scale, max_elem, nan, rtol,
           ok ? "within tolerance" : "DIFFERENT");
    free(p[0]);
    free(p[1]);
    return ok ? 0 : 1;
}
