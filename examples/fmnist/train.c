/*
 * train.c - fmnist-train: a data-parallel MLP on Fashion-MNIST through Tide's
 * elastic API.
 *
 * Every rank holds the whole model. Each step takes the next global batch of B
 * samples from Tide's elastic sampler (the same on every rank, whatever the world
 * size), computes the gradient over its own slice of it, scaled by 1/B, and one
 * allreduce(SUM) over the gradient slab then gives every rank the gradient of the
 * mean loss over the global batch. Every rank applies the same update, so the
 * parameter slabs stay identical; the run ends by checking that they are (a
 * CRC-32 of each rank's slab).
 *
 * The training state is registered with Tide (parameters, momentum, the sampler's
 * cursor, the step and epoch statistics), and the loop runs in tide_elastic_run:
 * when a rank is lost, the others re-form and go on from the newest step any of
 * them completed; a rank given notice (SIGTERM) leaves at a step boundary; a new
 * rank joins at a step boundary and receives the state in memory. Each elastic
 * step is a training step, or, after an epoch's last batch, the evaluation that
 * prints its line: a step never changes the state before its collectives succeed.
 *
 * Run alone it is a job of one; under `tide run -n N -- fmnist-train ...` it is N
 * ranks (`--min/--max` for an elastic job). Rank 0 prints the log. Exit status: 0
 * done (or left the job), 1 failed (data, Tide), 2 bad arguments.
 */
#include <cblas.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "idx.h"
#include "mlp.h"
#include "params.h"
#include "rng.h"
#include "tide.h"

#define CLASSES 10
#define EVAL_CHUNK 500
/* Fashion-MNIST's training-set pixel mean and standard deviation (in [0, 1]). */
#define PIXEL_MEAN 0.2860f
#define PIXEL_STD 0.3530f

typedef struct {
    uint64_t epochs;
    uint64_t batch;
    uint64_t max_steps; /* 0: no limit */
    uint64_t seed;
    float lr;
    float momentum;
    float weight_decay;
    int cosine; /* cosine decay of lr to 0 over the run, else constant */
    int n_hidden;
    int hidden[FM_MLP_MAX_LAYERS - 1];
    const char *data_dir;
    const char *save_params; /* NULL: none */
    int quiet;
    int json;
    int blas_threads;
    int overlap; /* per-layer tide_iallreduce during the backward pass */
} opts_t;

static const char *prog = "fmnist-train";
static int my_rank = 0;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: %s [options]\n"
            "  --epochs N         passes over the training set (default 10)\n"
            "  --batch B          global batch, split across the ranks (default 128)\n"
            "  --lr X             learning rate (default 0.05)\n"
            "  --momentum X       SGD momentum (default 0.9)\n"
            "  --weight-decay X   L2 weight decay (default 0)\n"
            "  --schedule S       learning-rate schedule: cosine (default) or constant\n"
            "  --hidden W,W,...   hidden layer widths (default 256,128)\n"
            "  --seed S           seed of the initial weights and the sample order (default 1)\n"
            "  --data-dir DIR     the IDX files (default /usr/share/datasets/fashion-mnist)\n"
            "  --max-steps N      stop after N global steps (the schedule still spans --epochs)\n"
            "  --save-params FILE rank 0 writes the final parameters to FILE (float32;\n"
            "                     compare two with fmnist-params-diff)\n"
            "  --blas-threads N   OpenBLAS threads per rank (default 1)\n"
            "  --overlap          allreduce each layer's gradient (tide_iallreduce) while the\n"
            "                     backward pass goes on, instead of one allreduce after it\n"
            "  --quiet            no per-epoch lines (the final line is still printed)\n"
            "  --json             per-epoch and final lines as JSON\n"
            "  --help             this text\n",
            prog);
}

static _Noreturn void bad_arg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static _Noreturn void bad_arg(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(see %s --help)\n", prog);
    exit(2);
}

static _Noreturn void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static _Noreturn void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: rank %d: ", prog, my_rank);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

static uint64_t parse_u64(const char *name, const char *s, uint64_t lo, uint64_t hi)
{
    char *end;
    errno = 0;
    if (!s || !*s || *s == '-' || *s == '+')
        bad_arg("--%s needs an integer in [%" PRIu64 ", %" PRIu64 "], got '%s'", name, lo, hi,
                s ? s : "");
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        bad_arg("--%s needs an integer in [%" PRIu64 ", %" PRIu64 "], got '%s'", name, lo, hi, s);
    return (uint64_t)v;
}

static float parse_float(const char *name, const char *s, double lo, double hi)
{
    char *end;
    errno = 0;
    double v = s && *s ? strtod(s, &end) : NAN;
    if (!s || !*s || errno || *end || !(v >= lo && v <= hi))
        bad_arg("--%s needs a number in [%g, %g], got '%s'", name, lo, hi, s ? s : "");
    return (float)v;
}

static void parse_hidden(opts_t *o, const char *s)
{
    char buf[256];
    if (strlen(s) >= sizeof buf) bad_arg("--hidden: list too long");
    strcpy(buf, s);
    o->n_hidden = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (o->n_hidden == FM_MLP_MAX_LAYERS - 1)
            bad_arg("--hidden: at most %d hidden layers", FM_MLP_MAX_LAYERS - 1);
        o->hidden[o->n_hidden++] = (int)parse_u64("hidden", tok, 1, 65536);
    }
    if (o->n_hidden == 0) bad_arg("--hidden needs widths such as 256,128");
}

/* --save-params FILE is written only at the end of the run, so a path that cannot
 * be written is refused now, before any work, rather than after the training. Every
 * worker checks: whichever is rank 0 at the end writes it. */
static void check_save_path(const char *path)
{
    if (!*path) bad_arg("--save-params needs a file name");
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        bad_arg("--save-params: '%s' is a directory, not a file", path);
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash)
        strcpy(dir, ".");
    else if (slash == path)
        strcpy(dir, "/");
    else if ((size_t)(slash - path) < sizeof dir)
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    else
        bad_arg("--save-params: path too long");
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        bad_arg("--save-params: no directory '%s' for '%s'", dir, path);
    if (access(dir, W_OK) != 0)
        bad_arg("--save-params: cannot write in directory '%s': %s", dir, strerror(errno));
}

static void parse_args(opts_t *o, int argc, char **argv)
{
    *o = (opts_t){.epochs = 10,
                  .batch = 128,
                  .seed = 1,
                  .lr = 0.05f,
                  .momentum = 0.9f,
                  .cosine = 1,
                  .n_hidden = 2,
                  .hidden = {256, 128},
                  .data_dir = "/usr/share/datasets/fashion-mnist",
                  .blas_threads = 1};
    enum { EPOCHS = 256, BATCH, LR, MOMENTUM, WD, SCHEDULE, HIDDEN, SEED, DATA, STEPS, THREADS, SAVE };
    static const struct option longopts[] = {
        {"epochs", required_argument, NULL, EPOCHS},
        {"batch", required_argument, NULL, BATCH},
        {"lr", required_argument, NULL, LR},
        {"momentum", required_argument, NULL, MOMENTUM},
        {"weight-decay", required_argument, NULL, WD},
        {"schedule", required_argument, NULL, SCHEDULE},
        {"hidden", required_argument, NULL, HIDDEN},
        {"seed", required_argument, NULL, SEED},
        {"data-dir", required_argument, NULL, DATA},
        {"max-steps", required_argument, NULL, STEPS},
        {"blas-threads", required_argument, NULL, THREADS},
        {"save-params", required_argument, NULL, SAVE},
        {"overlap", no_argument, NULL, 'o'},
        {"quiet", no_argument, NULL, 'q'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    opterr = 0; /* we word the messages ourselves */
    int c;
    while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        switch (c) {
        case EPOCHS:
            o->epochs = parse_u64("epochs", optarg, 1, 100000);
            break;
        case BATCH:
            o->batch = parse_u64("batch", optarg, 1, 65536);
            break;
        case LR:
            o->lr = parse_float("lr", optarg, 1e-9, 100.0);
            break;
        case MOMENTUM:
            o->momentum = parse_float("momentum", optarg, 0.0, 0.999999);
            break;
        case WD:
            o->weight_decay = parse_float("weight-decay", optarg, 0.0, 1.0);
            break;
        case SCHEDULE:
            if (strcmp(optarg, "cosine") == 0)
                o->cosine = 1;
            else if (strcmp(optarg, "constant") == 0)
                o->cosine = 0;
            else
                bad_arg("--schedule is cosine or constant, got '%s'", optarg);
            break;
        case HIDDEN:
            parse_hidden(o, optarg);
            break;
        case SEED:
            o->seed = parse_u64("seed", optarg, 0, UINT64_MAX);
            break;
        case DATA:
            if (!*optarg) bad_arg("--data-dir needs a directory");
            o->data_dir = optarg;
            break;
        case STEPS:
            o->max_steps = parse_u64("max-steps", optarg, 1, UINT64_MAX);
            break;
        case THREADS:
            o->blas_threads = (int)parse_u64("blas-threads", optarg, 1, 256);
            break;
        case SAVE:
            check_save_path(optarg);
            o->save_params = optarg;
            break;
        case 'o':
            o->overlap = 1;
            break;
        case 'q':
            o->quiet = 1;
            break;
        case 'j':
            o->json = 1;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        case ':':
            bad_arg("%s needs a value", argv[optind - 1]);
        default:
            if (optopt == 'q' || optopt == 'j' || optopt == 'h' || optopt == 'o')
                bad_arg("%s takes no value", argv[optind - 1]);
            bad_arg("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) bad_arg("unexpected argument '%s'", argv[optind]);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void check(int rc, const char *what)
{
    if (rc != TIDE_OK) die("%s: %s: %s", what, tide_errname(rc), tide_strerror(rc));
}

/* Pixel bytes to normalized floats, through a table of the 256 values. */
static float pixel_lut[256];

static void gather(fm_mlp_t *m, const fm_dataset_t *d, const uint32_t *idx, size_t n,
                   uint8_t *labels)
{
    size_t px = (size_t)d->rows * d->cols;
    float *x = fm_mlp_input(m);
    for (size_t i = 0; i < n; i++) {
        const uint8_t *src = d->images + (size_t)idx[i] * px;
        for (size_t j = 0; j < px; j++)
            x[i * px + j] = pixel_lut[src[j]];
        labels[i] = d->labels[idx[i]];
    }
}

/* Test loss and accuracy: each rank evaluates its slice of the test set and the
 * sums are allreduced, so every rank returns the same figures. */
static int evaluate(tide_comm_t *comm, fm_mlp_t *m, const fm_dataset_t *test, uint32_t *idx,
                    uint8_t *labels, double *loss, double *accuracy)
{
    size_t begin, count;
    tide_sampler_slice(test->n, tide_rank(comm), tide_size(comm), &begin, &count);
    double sums[2] = {0.0, 0.0}; /* loss, correct */
    for (size_t done = 0; done < count;) {
        size_t n = count - done < EVAL_CHUNK ? count - done : EVAL_CHUNK;
        for (size_t i = 0; i < n; i++)
            idx[i] = (uint32_t)(begin + done + i);
        gather(m, test, idx, n, labels);
        size_t right;
        sums[0] += fm_mlp_forward(m, n, labels, &right);
        sums[1] += (double)right;
        done += n;
    }
    int rc = tide_allreduce(comm, sums, sums, 2, TIDE_FLOAT64, TIDE_SUM);
    if (rc != TIDE_OK) return rc;
    *loss = sums[0] / (double)test->n;
    *accuracy = sums[1] / (double)test->n;
    return TIDE_OK;
}

typedef struct {
    tide_comm_t *comm;
    float *grad;
    tide_request_t *req[FM_MLP_MAX_LAYERS];
    int rc;
} bucket_t;

static void start_bucket(void *ctx, int layer, size_t off, size_t len)
{
    bucket_t *b = ctx;
    int rc = tide_iallreduce(b->comm, b->grad + off, b->grad + off, len, TIDE_FLOAT32, TIDE_SUM,
                             &b->req[layer]);
    if (rc != TIDE_OK) {
        b->req[layer] = NULL;
        if (b->rc == TIDE_OK) b->rc = rc;
    }
}

static float lr_at(const opts_t *o, uint64_t step, uint64_t total)
{
    if (!o->cosine || total == 0) return o->lr;
    return o->lr * 0.5f * (1.0f + cosf((float)M_PI * (float)step / (float)total));
}

/* What the members keep identical besides the slabs and the sampler's cursor: the
 * step and the statistics of the epoch in progress (registered as one buffer). */
typedef struct {
    uint64_t step;          /* training steps done */
    uint64_t eval_step;     /* the step of the last evaluation */
    double loss_sum;        /* this epoch: sum of loss x global batch */
    uint64_t samples;       /* this epoch's samples */
    uint64_t samples_total;
    double last_loss, last_test_loss, last_acc;
} stats_t;

typedef struct {
    opts_t *o;
    tide_comm_t *comm;
    fm_mlp_t *m;
    fm_dataset_t *train, *test;
    tide_sampler_t *sampler;
    uint32_t *idx;
    uint8_t *labels;
    stats_t st;
    uint64_t total, schedule;
    /* This process's own clock, for the rates it prints. */
    double t_epoch, train_time, t_start;
    uint64_t samples_here;
} trainer_t;

/* One evaluation step: the epoch's line. It only reads the state until its
 * collective has succeeded. */
static int eval_step(trainer_t *t)
{
    double test_loss, acc;
    int rc = evaluate(t->comm, t->m, t->test, t->idx, t->labels, &test_loss, &acc);
    if (rc != TIDE_OK) return rc;
    uint64_t epoch, cstep;
    tide_sampler_cursor(t->sampler, &epoch, &cstep);
    /* At an epoch boundary the epoch just finished is `epoch`, 1-based; a run cut
     * short by --max-steps reports the epoch in progress. */
    uint64_t shown = cstep == 0 ? epoch : epoch + 1;
    stats_t *st = &t->st;
    st->last_loss = st->samples ? st->loss_sum / (double)st->samples : NAN;
    st->last_test_loss = test_loss;
    st->last_acc = acc;
    double now = now_s(), dt = now - t->t_epoch;
    double rate = dt > 0 ? (double)st->samples / dt : 0.0;
    if (tide_rank(t->comm) == 0) {
        if (t->o->json)
            printf("{\"epoch\":%" PRIu64 ",\"step\":%" PRIu64 ",\"train_loss\":%.6f,"
                   "\"test_loss\":%.6f,\"test_accuracy\":%.4f,\"samples_per_s\":%.1f,"
                   "\"epoch_s\":%.3f,\"ranks\":%d}\n",
                   shown, st->step, st->last_loss, test_loss, acc, rate, dt, tide_size(t->comm));
        else if (!t->o->quiet)
            printf("epoch %3" PRIu64 "  step %6" PRIu64 "  train_loss %.4f  test_loss %.4f  "
                   "test_accuracy %.4f  %8.0f samples/s  %.2f s\n",
                   shown, st->step, st->last_loss, test_loss, acc, rate, dt);
        fflush(stdout);
        tide_log_metric(t->comm, "test_loss", test_loss);
        tide_log_metric(t->comm, "test_accuracy", acc);
    }
    st->eval_step = st->step;
    st->loss_sum = 0.0;
    st->samples = 0;
    t->t_epoch = now;
    return st->step >= t->total ? TIDE_STEP_LAST : TIDE_OK;
}

static int train_step(trainer_t *t)
{
    fm_mlp_t *m = t->m;
    int rank = tide_rank(t->comm), size = tide_size(t->comm);
    size_t count, global;
    double t0 = now_s();
    int rc = tide_sampler_batch(t->sampler, rank, size, t->idx, t->o->batch, &count, &global);
    if (rc != TIDE_OK) return rc;
    gather(m, t->train, t->idx, count, t->labels);
    if (t->o->overlap) {
        /* One allreduce per layer, each started as soon as the backward pass has
         * finished that layer, so communication overlaps compute. */
        bucket_t bk = {t->comm, m->grad, {0}, TIDE_OK};
        fm_mlp_forward_backward(m, count, t->labels, 1.0f / (float)global, NULL, start_bucket, &bk);
        for (int l = m->n_layers - 1; l >= 0; l--)
            if (bk.req[l]) {
                int w = tide_wait(bk.req[l]);
                if (w != TIDE_OK && bk.rc == TIDE_OK) bk.rc = w;
            }
        rc = bk.rc;
    } else {
        fm_mlp_forward_backward(m, count, t->labels, 1.0f / (float)global, NULL, NULL, NULL);
        rc = tide_allreduce(t->comm, m->grad, m->grad, m->n_params + 1, TIDE_FLOAT32, TIDE_SUM);
    }
    if (rc != TIDE_OK) return rc; /* the step is dropped: nothing was changed */
    /* The loss is the allreduced one, so every rank stops at the same step. */
    float loss = m->grad[m->n_params];
    if (!isfinite(loss))
        die("the loss diverged (%g) at step %" PRIu64 "; try a lower --lr", (double)loss,
            t->st.step + 1);
    fm_mlp_sgd(m, lr_at(t->o, t->st.step, t->schedule), t->o->momentum, t->o->weight_decay);
    tide_sampler_advance(t->sampler);
    t->st.loss_sum += (double)loss * (double)global;
    t->st.samples += global;
    t->st.samples_total += global;
    t->st.step++;
    t->samples_here += global;
    t->train_time += now_s() - t0;
    if (rank == 0) tide_log_metric(t->comm, "loss", (double)loss);
    return TIDE_OK;
}

/* One elastic step: the evaluation, when an epoch ended (or the run did), else
 * one training step. */
static int step(tide_comm_t *comm, void *arg)
{
    trainer_t *t = arg;
    uint64_t epoch, cstep;
    tide_sampler_cursor(t->sampler, &epoch, &cstep);
    if (t->st.step > t->st.eval_step && (cstep == 0 || t->st.step >= t->total)) return eval_step(t);
    return train_step(t);
}

static void on_reset(tide_comm_t *comm, void *arg)
{
    trainer_t *t = arg;
    my_rank = tide_rank(comm);
    if (my_rank == 0 && !t->o->quiet)
        fprintf(stderr, "%s: generation %u: %d rank(s), resuming at step %" PRIu64 "\n", prog,
                tide_generation(comm), tide_size(comm), t->st.step);
}

int main(int argc, char **argv)
{
    opts_t o;
    parse_args(&o, argc, argv);

    /* One BLAS thread per rank: N ranks on fewer cores must not each start a
     * thread per core. */
    openblas_set_num_threads(o.blas_threads);

    tide_comm_t *comm = NULL;
    int rc = tide_init(&comm);
    if (rc == TIDE_ESTOPPED) return 0; /* the job finished before this worker joined */
    check(rc, "tide_init");
    my_rank = tide_rank(comm);

    char err[1024];
    fm_dataset_t train, test;
    if (fm_dataset_load(o.data_dir, "train", CLASSES, &train, err, sizeof err) != 0) die("%s", err);
    if (fm_dataset_load(o.data_dir, "t10k", CLASSES, &test, err, sizeof err) != 0) die("%s", err);
    for (int v = 0; v < 256; v++)
        pixel_lut[v] = ((float)v / 255.0f - PIXEL_MEAN) / PIXEL_STD;

    int widths[FM_MLP_MAX_LAYERS + 1];
    widths[0] = (int)(train.rows * train.cols);
    for (int i = 0; i < o.n_hidden; i++)
        widths[i + 1] = o.hidden[i];
    widths[o.n_hidden + 1] = CLASSES;
    size_t max_rows = o.batch > EVAL_CHUNK ? o.batch : EVAL_CHUNK;
    fm_mlp_t m;
    if (fm_mlp_init(&m, o.n_hidden + 1, widths, max_rows) != 0) die("out of memory for the model");
    /* Every rank draws the same weights from the seed; the first state sync makes
     * rank 0's slabs authoritative all the same, as they are for a member joining
     * later. */
    fm_mlp_init_params(&m, o.seed);

    trainer_t t = {0};
    t.o = &o;
    t.comm = comm;
    t.m = &m;
    t.train = &train;
    t.test = &test;
    if (tide_sampler_create(train.n, o.batch, o.seed, &t.sampler) != TIDE_OK)
        die("cannot start the sampler");
    t.idx = malloc(max_rows * sizeof *t.idx);
    t.labels = malloc(max_rows);
    if (!t.idx || !t.labels) die("out of memory");
    check(tide_state_register(comm, "params", m.params, m.n_params * sizeof(float)),
          "tide_state_register(params)");
    check(tide_state_register(comm, "momentum", m.mom, m.n_params * sizeof(float)),
          "tide_state_register(momentum)");
    check(tide_sampler_register(comm, t.sampler, "sampler"), "tide_sampler_register");
    check(tide_state_register(comm, "stats", &t.st, sizeof t.st), "tide_state_register(stats)");
    tide_elastic_on_reset(comm, on_reset, &t);

    /* The schedule spans the epochs asked for; --max-steps only stops the run early,
     * so a run cut at step N is exactly the first N steps of the full run. */
    uint64_t steps_per_epoch = tide_sampler_steps_per_epoch(t.sampler);
    t.schedule = o.epochs * steps_per_epoch;
    t.total = t.schedule;
    if (o.max_steps && o.max_steps < t.total) t.total = o.max_steps;

    if (my_rank == 0 && !o.quiet && !o.json)
        printf("fmnist-train: %d rank(s), %zu parameters, global batch %" PRIu64 ", %" PRIu64
               " steps/epoch, %zu train / %zu test samples\n",
               tide_size(comm), m.n_params, o.batch, steps_per_epoch, train.n, test.n);
    fflush(stdout);

    t.t_start = t.t_epoch = now_s();
    rc = tide_elastic_run(comm, step, &t);
    my_rank = tide_rank(comm);
    if (rc == TIDE_ESTOPPED) {
        /* Notice, or the job ended without this member: it leaves cleanly. */
        if (!o.quiet)
            fprintf(stderr, "%s: left the job at step %" PRIu64 "\n", prog, t.st.step);
        tide_finalize(comm);
        return 0;
    }
    check(rc, "tide_elastic_run");
    double wall = now_s() - t.t_start;

    /* The ranks applied the same updates to the same slab, so their slabs must be
     * bit-identical; a CRC that differs between ranks means a broken allreduce (or
     * a broken state restore). */
    uint32_t crc = (uint32_t)crc32_z(0L, (const Bytef *)m.params, m.n_params * sizeof(float));
    int64_t crc_range[2] = {(int64_t)crc, -(int64_t)crc};
    check(tide_allreduce(comm, crc_range, crc_range, 2, TIDE_INT64, TIDE_MAX),
          "tide_allreduce(checksum)");
    if (crc_range[0] != (int64_t)crc || -crc_range[1] != (int64_t)crc)
        die("parameter slabs differ between ranks (crc32 %08x here)", crc);

    uint64_t epoch_now;
    tide_sampler_cursor(t.sampler, &epoch_now, NULL);
    double rate = t.train_time > 0 ? (double)t.samples_here / t.train_time : 0.0;
    if (my_rank == 0 && o.json)
        printf("{\"final\":true,\"epochs\":%" PRIu64 ",\"step\":%" PRIu64 ",\"train_loss\":%.6f,"
               "\"test_loss\":%.6f,\"test_accuracy\":%.4f,\"samples_per_s\":%.1f,"
               "\"wall_s\":%.3f,\"ranks\":%d,\"params_crc32\":\"%08x\"}\n",
               epoch_now, t.st.step, t.st.last_loss, t.st.last_test_loss, t.st.last_acc, rate, wall,
               tide_size(comm), crc);
    else if (my_rank == 0)
        printf("final: steps %" PRIu64 "  train_loss %.4f  test_accuracy %.4f  %.0f samples/s  "
               "wall %.2f s  ranks %d  params_crc32 %08x\n",
               t.st.step, t.st.last_loss, t.st.last_acc, rate, wall, tide_size(comm), crc);
    fflush(stdout);
    /* After the CRC check, so the file holds what every rank holds. */
    if (my_rank == 0 && o.save_params &&
        fm_params_save(o.save_params, m.params, m.n_params, err, sizeof err) != 0)
        die("--save-params: %s", err);

    free(t.idx);
    free(t.labels);
    tide_sampler_destroy(t.sampler);
    fm_mlp_free(&m);
    fm_dataset_free(&train);
    fm_dataset_free(&test);
    check(tide_finalize(comm), "tide_finalize");
    return 0;
}
