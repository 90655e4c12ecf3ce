/*
 * report_cmd.c - `tide report FILE [--png OUT]`: prints the summary of a run
 * report and, with --png, draws it: world size and samples/s over time, with a
 * marker per event colored by its kind.
 *
 * The file is checked (tide__report_read) before anything is drawn, so a
 * malformed report is an error naming the file and the field, never a crash or a
 * half-drawn picture. The drawing is plain cairo on an image surface; it needs no
 * display.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cairo.h>
#include <fontconfig/fontconfig.h>
#include <jansson.h>

#include "cli/cli.h"
#include "cli/report.h"
#include "core/param.h"

typedef struct {
    double r, g, b;
} rgb_t;

/* One color per event kind, fixed so that pictures of different runs compare. */
static const struct {
    const char *kind;
    rgb_t c;
} kind_colors[] = {
    {"kill", {0.84, 0.15, 0.16}},
    {"preempt", {1.00, 0.50, 0.05}},
    {"freeze", {0.12, 0.47, 0.71}},
    {"join", {0.17, 0.63, 0.17}},
    {"coordinator-restart", {0.58, 0.40, 0.74}},
    {"loss", {0.55, 0.34, 0.29}},
    {"leave", {0.89, 0.47, 0.76}},
};
#define NKIND_COLORS (sizeof kind_colors / sizeof kind_colors[0])
static const rgb_t other_color = {0.50, 0.50, 0.50};
static const rgb_t world_color = {0.10, 0.10, 0.10};
static const rgb_t rate_color = {0.09, 0.75, 0.81};

static rgb_t color_of(const char *kind)
{
    for (size_t i = 0; i < NKIND_COLORS; i++)
        if (kind && !strcmp(kind, kind_colors[i].kind)) return kind_colors[i].c;
    return other_color;
}

typedef struct {
    double x0, y0, w, h;    /* the plot area in pixels */
    double tmax, ymin, ymax;
} panel_t;

static double px(const panel_t *p, double t)
{
    return p->x0 + p->w * (t / p->tmax);
}

static double py(const panel_t *p, double v)
{
    return p->y0 + p->h * (1.0 - (v - p->ymin) / (p->ymax - p->ymin));
}

/* A step of 1, 2 or 5 times a power of ten giving about `want` ticks over range. */
static double nice_step(double range, int want)
{
    if (!(range > 0)) return 1;
    double raw = range / want, mag = pow(10, floor(log10(raw))), f = raw / mag;
    return mag * (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10);
}

static void set_rgb(cairo_t *cr, rgb_t c)
{
    cairo_set_source_rgb(cr, c.r, c.g, c.b);
}

static void text_at(cairo_t *cr, double x, double y, const char *s, double ax, double ay)
{
    cairo_text_extents_t e;
    cairo_text_extents(cr, s, &e);
    cairo_move_to(cr, x - e.width * ax - e.x_bearing, y - e.height * ay - e.y_bearing);
    cairo_show_text(cr, s);
}

static void fmt_tick(char *buf, size_t n, double v, double step)
{
    if (step >= 1 || v == 0) snprintf(buf, n, "%.0f", v);
    else snprintf(buf, n, "%.*f", (int)ceil(-log10(step)), v);
    if (fabs(v) >= 1e4 && step >= 1) {
        if (fabs(v) >= 1e6) snprintf(buf, n, "%gM", v / 1e6);
        else snprintf(buf, n, "%gk", v / 1e3);
    }
}

/* Frame, grid, ticks and axis label of one panel. */
static void draw_axes(cairo_t *cr, const panel_t *p, const char *ylabel, int integer_y,
                      int xlabels)
{
    char buf[32];
    cairo_set_line_width(cr, 1);
    double ystep = nice_step(p->ymax - p->ymin, 5);
    if (integer_y && ystep < 1) ystep = 1;
    cairo_set_font_size(cr, 12);
    /* Ticks by index, with a relative slack and a cap, so that no scale (however
     * odd the file) can make these loops long. */
    double v0 = ceil(p->ymin / ystep) * ystep;
    for (int k = 0; k < 100 && v0 + k * ystep <= p->ymax + 1e-9 * ystep; k++) {
        double v = v0 + k * ystep;
        double y = py(p, v);
        cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
        cairo_move_to(cr, p->x0, y);
        cairo_line_to(cr, p->x0 + p->w, y);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
        fmt_tick(buf, sizeof buf, v, ystep);
        text_at(cr, p->x0 - 8, y, buf, 1.0, 0.5);
    }
    double tstep = nice_step(p->tmax, 8);
    for (int k = 0; k < 100 && k * tstep <= p->tmax + 1e-9 * tstep; k++) {
        double t = k * tstep;
        double x = px(p, t);
        cairo_set_source_rgb(cr, 0.93, 0.93, 0.93);
        cairo_move_to(cr, x, p->y0);
        cairo_line_to(cr, x, p->y0 + p->h);
        cairo_stroke(cr);
        if (xlabels) {
            cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
            fmt_tick(buf, sizeof buf, t, tstep);
            text_at(cr, x, p->y0 + p->h + 8, buf, 0.5, 0.0);
        }
    }
    cairo_set_source_rgb(cr, 0.3, 0.3, 0.3);
    cairo_rectangle(cr, p->x0, p->y0, p->w, p->h);
    cairo_stroke(cr);
    cairo_save(cr);
    cairo_set_font_size(cr, 13);
    cairo_translate(cr, p->x0 - 58, p->y0 + p->h / 2);
    cairo_rotate(cr, -M_PI / 2);
    text_at(cr, 0, 0, ylabel, 0.5, 0.5);
    cairo_restore(cr);
}

static double jnum(const json_t *o, const char *k)
{
    return json_number_value(json_object_get(o, k));
}

static void draw_world(cairo_t *cr, const panel_t *p, const json_t *ws)
{
    size_t n = json_array_size(ws);
    if (!n) return;
    cairo_save(cr);
    cairo_rectangle(cr, p->x0, p->y0, p->w, p->h);
    cairo_clip(cr);
    set_rgb(cr, world_color);
    cairo_set_line_width(cr, 2.5);
    for (size_t i = 0; i < n; i++) {
        const json_t *o = json_array_get(ws, i);
        double x = px(p, jnum(o, "t")), y = py(p, jnum(o, "world_size"));
        if (i == 0) cairo_move_to(cr, x, y);
        else cairo_line_to(cr, x, y); /* the vertical of the step */
        double tnext = i + 1 < n ? jnum(json_array_get(ws, i + 1), "t") : p->tmax;
        cairo_line_to(cr, px(p, tnext), y);
    }
    cairo_stroke(cr);
    cairo_restore(cr);
}

static void draw_rate(cairo_t *cr, const panel_t *p, const json_t *rates)
{
    size_t n = json_array_size(rates);
    if (!n) return;
    cairo_save(cr);
    cairo_rectangle(cr, p->x0, p->y0, p->w, p->h);
    cairo_clip(cr);
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < n; i++) {
            const json_t *o = json_array_get(rates, i);
            double x = px(p, jnum(o, "t")), y = py(p, jnum(o, "samples_per_s"));
            if (i == 0 && pass == 0) cairo_move_to(cr, x, py(p, 0));
            if (i == 0 && pass == 1) cairo_move_to(cr, x, y);
            else cairo_line_to(cr, x, y);
        }
        if (pass == 0) {
            cairo_line_to(cr, px(p, jnum(json_array_get(rates, n - 1), "t")), py(p, 0));
            cairo_close_path(cr);
            cairo_set_source_rgba(cr, rate_color.r, rate_color.g, rate_color.b, 0.18);
            cairo_fill(cr);
        } else {
            set_rgb(cr, rate_color);
            cairo_set_line_width(cr, 1.8);
            cairo_stroke(cr);
        }
    }
    cairo_restore(cr);
}

/* A dashed line per event across both panels and a dot on top of the first. */
static void draw_events(cairo_t *cr, const panel_t *top, const panel_t *bottom,
                        const json_t *events)
{
    size_t i;
    const json_t *e;
    double dash[] = {4, 3};
    json_array_foreach(events, i, e)
    {
        double x = px(top, jnum(e, "t"));
        set_rgb(cr, color_of(json_string_value(json_object_get(e, "kind"))));
        cairo_set_line_width(cr, 1.2);
        cairo_set_dash(cr, dash, 2, 0);
        cairo_move_to(cr, x, top->y0);
        cairo_line_to(cr, x, bottom->y0 + bottom->h);
        cairo_stroke(cr);
        cairo_set_dash(cr, NULL, 0, 0);
        cairo_arc(cr, x, top->y0, 4.5, 0, 2 * M_PI);
        cairo_fill(cr);
    }
}

static void legend_entry(cairo_t *cr, double x, double *y, rgb_t c, const char *label, int dot)
{
    set_rgb(cr, c);
    if (dot) {
        cairo_arc(cr, x + 9, *y, 4.5, 0, 2 * M_PI);
        cairo_fill(cr);
    } else {
        cairo_set_line_width(cr, 3);
        cairo_move_to(cr, x, *y);
        cairo_line_to(cr, x + 18, *y);
        cairo_stroke(cr);
    }
    cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
    text_at(cr, x + 26, *y, label, 0.0, 0.5);
    *y += 20;
}

static void draw_legend(cairo_t *cr, double x, double y, const json_t *events)
{
    cairo_set_font_size(cr, 12);
    cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
    text_at(cr, x, y, "Legend", 0.0, 0.5);
    y += 22;
    legend_entry(cr, x, &y, world_color, "world size", 0);
    legend_entry(cr, x, &y, rate_color, "samples/s", 0);
    y += 6;
    /* Event kinds in the order of the color table, then one "other" entry. */
    int other = 0;
    size_t i;
    const json_t *e;
    for (size_t k = 0; k < NKIND_COLORS; k++) {
        size_t count = 0;
        json_array_foreach(events, i, e)
        {
            if (!strcmp(json_string_value(json_object_get(e, "kind")), kind_colors[k].kind))
                count++;
        }
        if (count) {
            char label[64];
            snprintf(label, sizeof label, "%s (%zu)", kind_colors[k].kind, count);
            legend_entry(cr, x, &y, kind_colors[k].c, label, 1);
        }
    }
    json_array_foreach(events, i, e)
    {
        rgb_t c = color_of(json_string_value(json_object_get(e, "kind")));
        if (c.r == other_color.r && c.g == other_color.g && c.b == other_color.b) other++;
    }
    if (other) {
        char label[64];
        snprintf(label, sizeof label, "other event (%d)", other);
        legend_entry(cr, x, &y, other_color, label, 1);
    }
}

static int render(const json_t *j, const char *name, const char *out, int width, int height,
                  char *err, size_t errlen)
{
    const json_t *ws = json_object_get(j, "world_size_timeline");
    const json_t *rates = json_object_get(j, "rate_timeline");
    const json_t *events = json_object_get(j, "events");
    size_t i;
    const json_t *o;

    double tmax = jnum(j, "wall_s"), wmax = 1, rmax = 0;
    json_array_foreach(ws, i, o)
    {
        tmax = fmax(tmax, jnum(o, "t"));
        wmax = fmax(wmax, jnum(o, "world_size"));
    }
    json_array_foreach(rates, i, o)
    {
        tmax = fmax(tmax, jnum(o, "t"));
        rmax = fmax(rmax, jnum(o, "samples_per_s"));
    }
    json_array_foreach(events, i, o) tmax = fmax(tmax, jnum(o, "t"));
    /* The file was checked for types, not for sense: keep the scales finite. */
    if (!(tmax > 0) || !isfinite(tmax)) tmax = 1;
    if (!(rmax > 0) || !isfinite(rmax)) rmax = 1;
    if (!isfinite(wmax)) wmax = 1;
    tmax = fmin(fmax(tmax, 1e-3), 1e12);
    rmax = fmin(fmax(rmax, 1e-3), 1e15);
    wmax = fmin(wmax, 1e9);

    cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height);
    cairo_t *cr = cairo_create(s);
    if (cairo_status(cr) != CAIRO_STATUS_SUCCESS) {
        snprintf(err, errlen, "cannot draw: %s", cairo_status_to_string(cairo_status(cr)));
        cairo_destroy(cr);
        cairo_surface_destroy(s);
        return -1;
    }
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);

    double left = 90, right = 210, top = 78, bottom = 62, gap = 34;
    double plot_w = width - left - right, plot_h = height - top - bottom - gap;
    panel_t pw = {left, top, plot_w, plot_h * 0.42, tmax, 0, floor(wmax * 1.15) + 1};
    panel_t pr = {left, top + plot_h * 0.42 + gap, plot_w, plot_h * 0.58, tmax, 0, rmax * 1.12};

    /* Title and a line of headline numbers. */
    char line[512];
    cairo_set_source_rgb(cr, 0.05, 0.05, 0.05);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_BOLD);
    cairo_set_font_size(cr, 17);
    const char *base = strrchr(name, '/');
    snprintf(line, sizeof line, "Tide run report: %.200s", base ? base + 1 : name);
    text_at(cr, left, 28, line, 0.0, 0.5);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, 13);
    int n = snprintf(line, sizeof line, "%lld steps in %.1f s, %.1f samples/s",
                     (long long)json_integer_value(json_object_get(j, "steps")), jnum(j, "wall_s"),
                     jnum(j, "samples_per_s"));
    const json_t *g = json_object_get(j, "goodput");
    if (json_is_number(g) && n > 0 && (size_t)n < sizeof line)
        n += snprintf(line + n, sizeof line - (size_t)n, ", goodput %.1f%%",
                      100 * json_number_value(g));
    const json_t *med = json_object_get(j, "median_recovery_ms");
    if (json_is_number(med) && n > 0 && (size_t)n < sizeof line)
        n += snprintf(line + n, sizeof line - (size_t)n, ", median recovery %.0f ms",
                      json_number_value(med));
    if (n > 0 && (size_t)n < sizeof line)
        snprintf(line + n, sizeof line - (size_t)n, ", %zu events", json_array_size(events));
    cairo_set_source_rgb(cr, 0.3, 0.3, 0.3);
    text_at(cr, left, 52, line, 0.0, 0.5);

    draw_axes(cr, &pw, "world size", 1, 0);
    draw_axes(cr, &pr, "samples/s", 0, 1);
    draw_rate(cr, &pr, rates);
    draw_world(cr, &pw, ws);
    draw_events(cr, &pw, &pr, events);
    cairo_set_font_size(cr, 13);
    cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
    text_at(cr, left + plot_w / 2, height - 18, "time since start (s)", 0.5, 0.5);
    draw_legend(cr, left + plot_w + 24, top + 8, events);

    cairo_surface_flush(s);
    cairo_status_t st = cairo_status(cr);
    if (st == CAIRO_STATUS_SUCCESS) st = cairo_surface_write_to_png(s, out);
    cairo_destroy(cr);
    cairo_surface_destroy(s);
    /* cairo and fontconfig keep font caches for the life of the process; drop them
     * so that a leak checker sees only real leaks. */
    cairo_debug_reset_static_data();
    FcFini();
    if (st != CAIRO_STATUS_SUCCESS) {
        snprintf(err, errlen, "%s: cannot write the PNG: %s", out, cairo_status_to_string(st));
        return -1;
    }
    return 0;
}

static void report_usage(FILE *f)
{
    fprintf(f, "usage: tide report FILE [--png OUT] [--size WxH]\n"
               "  prints the summary of a run report (tide run --report FILE);\n"
               "  --png draws world size, samples/s and events over time (default 1200x720)\n");
}

int tide__cli_report(int argc, char **argv)
{
    const char *in = NULL, *png = NULL;
    int width = 1200, height = 720;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--png") && i + 1 < argc) {
            png = argv[++i];
        } else if (!strcmp(a, "--size") && i + 1 < argc) {
            const char *v = argv[++i], *x = strchr(v, 'x');
            char wbuf[16];
            int64_t w, h;
            if (!x || (size_t)(x - v) >= sizeof wbuf) goto bad_size;
            memcpy(wbuf, v, (size_t)(x - v));
            wbuf[x - v] = '\0';
            if (tide__parse_int(wbuf, 400, 8000, &w) || tide__parse_int(x + 1, 300, 8000, &h))
                goto bad_size;
            width = (int)w;
            height = (int)h;
            continue;
        bad_size:
            fprintf(stderr, "tide report: --size \"%s\": expected WxH, 400..8000 x 300..8000\n",
                    v);
            return 2;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            report_usage(stdout);
            return 0;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "tide report: unknown option \"%s\"\n", a);
            report_usage(stderr);
            return 2;
        } else if (!in) {
            in = a;
        } else {
            fprintf(stderr, "tide report: one report at a time (\"%s\" and \"%s\")\n", in, a);
            return 2;
        }
    }
    if (!in) {
        report_usage(stderr);
        return 2;
    }
    char err[512];
    json_t *j = NULL;
    if (tide__report_read(in, &j, err, sizeof err)) {
        fprintf(stderr, "tide report: %s\n", err);
        return 1;
    }
    tide__report_print_summary_json(j, stdout);
    int rc = 0;
    if (png) {
        if (render(j, in, png, width, height, err, sizeof err)) {
            fprintf(stderr, "tide report: %s\n", err);
            rc = 1;
        } else {
            printf("wrote %s (%dx%d)\n", png, width, height);
        }
    }
    json_decref(j);
    return rc;
}
