/* The in-order fast path of nettrail's TCP sequence analysis, in C (analysis/flows/tcp_fast.py).
 *
 * The exact subset of TcpAnalyzer.feed_columns' inlined path (analysis/flows/tcp_analysis.py):
 * in-order data segments and advancing pure ACKs of conversations Python registered as
 * eligible. Any packet it is not sure about -- and any packet that would raise a flag --
 * it hands back (nt_run returns its index) untouched, and Python runs the full state
 * machine on it. State of registered flows lives here between sync points; Python pulls
 * it back before it touches such a conversation and at the end of every batch.
 *
 * Keep in sync with: analysis/flows/tcp_analysis.py (feed_columns, the same checks in the
 * same order), analysis/flows/tcp_fast.py (field order of nt_flow_get/nt_flow_set).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define M32 0xFFFFFFFFLL
#define HALF 0x80000000LL
#define MAX_UNACKED 10000
#define NSCALAR 22

typedef struct {
    /* the scalar fields, in tcp_fast.py's FIELDS order */
    int64_t base_seq, nextseq, nextseqtime, maxseqtobeacked, lastack, lastacktime, window, win_scale,
        is_first_ack, dupacknum, lastnondupack, lastsegmentflags, ordered, lastacklen, packets, bytes,
        wire_bytes, data_segments, rtt_n, rtt_sum, rtt_min, rtt_max;
    int64_t *segs; /* unacked segments, 5 values each: seq, nextseq, frame, ts, karn */
    int64_t start, len, cap;
} flow_t;

typedef struct {
    int64_t src, dst, ports; /* ports = sport << 16 | dport; src == -1: empty slot */
    int64_t fwd, rev, conv, ok_data, ok_ack, active;
} side_t;

typedef struct {
    flow_t *flows;
    int64_t nflows, flows_cap;
    side_t *sides;
    int64_t mask, used;
    int64_t *conv_ts; /* per conversation slot: last timestamp written here, -1: none */
    int64_t convs_cap;
} nt_t;

static int gt(int64_t a, int64_t b) {
    int64_t d = (a - b) & M32;
    return d > 0 && d < HALF;
}

void *nt_new(void) {
    nt_t *h = calloc(1, sizeof(nt_t));
    h->mask = (1 << 12) - 1;
    h->sides = malloc(sizeof(side_t) * (h->mask + 1));
    for (int64_t i = 0; i <= h->mask; i++) h->sides[i].src = -1;
    return h;
}

void nt_free(void *p) {
    nt_t *h = p;
    for (int64_t i = 0; i < h->nflows; i++) free(h->flows[i].segs);
    free(h->flows);
    free(h->sides);
    free(h->conv_ts);
    free(h);
}

int64_t nt_flow_new(void *p) {
    nt_t *h = p;
    if (h->nflows == h->flows_cap) {
        h->flows_cap = h->flows_cap ? 2 * h->flows_cap : 256;
        h->flows = realloc(h->flows, sizeof(flow_t) * h->flows_cap);
    }
    flow_t *f = &h->flows[h->nflows];
    memset(f, 0, sizeof(flow_t));
    return h->nflows++;
}

void nt_flow_set(void *p, int64_t i, const int64_t *v) { memcpy(&((nt_t *)p)->flows[i], v, NSCALAR * 8); }
void nt_flow_get(void *p, int64_t i, int64_t *v) { memcpy(v, &((nt_t *)p)->flows[i], NSCALAR * 8); }
int64_t nt_segs_len(void *p, int64_t i) { return ((nt_t *)p)->flows[i].len; }

void nt_segs_get(void *p, int64_t i, int64_t *out) {
    flow_t *f = &((nt_t *)p)->flows[i];
    memcpy(out, f->segs + 5 * f->start, 8 * 5 * f->len);
}

static void reserve(flow_t *f, int64_t n) {
    if (f->start + n <= f->cap) return;
    if (f->start) { /* compact first */
        memmove(f->segs, f->segs + 5 * f->start, 8 * 5 * f->len);
        f->start = 0;
        if (n <= f->cap) return;
    }
    int64_t cap = f->cap ? f->cap : 16;
    while (cap < n) cap *= 2;
    f->segs = realloc(f->segs, 8 * 5 * cap);
    f->cap = cap;
}

void nt_segs_set(void *p, int64_t i, const int64_t *in, int64_t n) {
    flow_t *f = &((nt_t *)p)->flows[i];
    f->start = 0;
    f->len = 0;
    reserve(f, n);
    memcpy(f->segs, in, 8 * 5 * n);
    f->len = n;
}

static side_t *find(nt_t *h, int64_t src, int64_t dst, int64_t ports) {
    uint64_t x = (uint64_t)src * 0x9E3779B97F4A7C15ULL ^ (uint64_t)dst * 0xC2B2AE3D27D4EB4FULL ^ (uint64_t)ports;
    x ^= x >> 29;
    int64_t i = (int64_t)(x & (uint64_t)h->mask);
    for (;;) {
        side_t *s = &h->sides[i];
        if (s->src == -1 || (s->src == src && s->dst == dst && s->ports == ports)) return s;
        i = (i + 1) & h->mask;
    }
}

static void grow_sides(nt_t *h) {
    side_t *old = h->sides;
    int64_t n = h->mask + 1;
    h->mask = 2 * n - 1;
    h->sides = malloc(sizeof(side_t) * 2 * n);
    for (int64_t i = 0; i < 2 * n; i++) h->sides[i].src = -1;
    for (int64_t i = 0; i < n; i++)
        if (old[i].src != -1) *find(h, old[i].src, old[i].dst, old[i].ports) = old[i];
    free(old);
}

void nt_side_set(void *p, int64_t src, int64_t sport, int64_t dst, int64_t dport, int64_t fwd, int64_t rev,
                 int64_t conv, int64_t ok_data, int64_t ok_ack) {
    nt_t *h = p;
    if (2 * (h->used + 1) > h->mask + 1) grow_sides(h);
    side_t *s = find(h, src, dst, sport << 16 | dport);
    if (s->src == -1) h->used++;
    s->src = src;
    s->dst = dst;
    s->ports = sport << 16 | dport;
    s->fwd = fwd;
    s->rev = rev;
    s->conv = conv;
    s->ok_data = ok_data;
    s->ok_ack = ok_ack;
    s->active = 1;
    if (conv >= h->convs_cap) {
        int64_t cap = h->convs_cap ? h->convs_cap : 256;
        while (cap <= conv) cap *= 2;
        h->conv_ts = realloc(h->conv_ts, 8 * cap);
        for (int64_t k = h->convs_cap; k < cap; k++) h->conv_ts[k] = -1;
        h->convs_cap = cap;
    }
}

void nt_side_off(void *p, int64_t src, int64_t sport, int64_t dst, int64_t dport) {
    side_t *s = find(p, src, dst, sport << 16 | dport);
    if (s->src != -1) s->active = 0;
}

/* -> the conversation slot's last timestamp written by nt_run since the last call, or -1 */
int64_t nt_conv_ts(void *p, int64_t conv) {
    nt_t *h = p;
    if (conv >= h->convs_cap) return -1;
    int64_t v = h->conv_ts[conv];
    h->conv_ts[conv] = -1;
    return v;
}

/* Can this ACK retire rev's segments by the ordered-prefix rule alone? -> the prefix length
 * (0: nothing to retire), or -1: the general rule is needed (hand the packet back). */
static int64_t prefix(flow_t *rev, int64_t rack, int64_t ts, int64_t *rtt, int *have) {
    *have = 0;
    if (!rev->len) return 0;
    int64_t *s = rev->segs + 5 * rev->start;
    if (rev->ordered && !gt(rack, s[0])) return 0;
    if (!rev->ordered) return -1;
    int64_t n = 0;
    for (int64_t k = 0; k < rev->len; k++, s += 5) {
        int64_t nxt = s[1];
        if (nxt == rack) {
            if (!*have) {
                *rtt = ts - s[3];
                *have = 1;
            }
        } else if (gt(nxt, rack)) {
            if (gt(rack, s[0])) return -1; /* partly acknowledged */
            break;
        }
        n++;
    }
    return n;
}

int64_t nt_run(void *p, int64_t start, int64_t n, const int64_t *frame, const int64_t *ts, const int64_t *src,
               const int64_t *sport, const int64_t *dst, const int64_t *dport, const int64_t *seq, const int64_t *ack,
               const int64_t *flags, const int64_t *win, const int64_t *seglen, const int64_t *ip_len,
               const int8_t *slow) {
    nt_t *h = p;
    for (int64_t i = start; i < n; i++) {
        if ((flags[i] & 0x17) != 0x10 || slow[i] || win[i] == 0) return i;
        side_t *sd = find(h, src[i], dst[i], sport[i] << 16 | dport[i]);
        if (sd->src == -1 || !sd->active) return i;
        flow_t *fwd = &h->flows[sd->fwd], *rev = &h->flows[sd->rev];
        int64_t rseq = (seq[i] - fwd->base_seq) & M32, rack = (ack[i] - rev->base_seq) & M32;
        int64_t maxrev = rev->maxseqtobeacked, len = seglen[i], t = ts[i];
        if (rseq != fwd->nextseq || !rseq || (maxrev && gt(rack, maxrev))) return i;
        int64_t rtt = 0;
        int have = 0;
        int64_t cut = prefix(rev, rack, t, &rtt, &have);
        if (cut < 0) return i;
        if (len) {
            int64_t end = (rseq + len) & M32, lastack_r = rev->lastack;
            if (!sd->ok_data || rack != fwd->lastack || (len == 1 && rev->window == 0) ||
                (lastack_r && !gt(end, lastack_r)))
                return i;
            int64_t ws = rev->win_scale;
            if (ws != -1) {
                int64_t shift = (rev->is_first_ack || ws == -2) ? 0 : ws;
                if (end == ((lastack_r + ((rev->window << shift) & M32)) & M32)) return i; /* window full */
            }
            if (fwd->len < MAX_UNACKED) {
                if (fwd->len && fwd->ordered) {
                    int64_t *last = fwd->segs + 5 * (fwd->start + fwd->len - 1);
                    if (gt(last[0], rseq) || gt(last[1], end)) fwd->ordered = 0;
                }
                reserve(fwd, fwd->len + 1);
                int64_t *e = fwd->segs + 5 * (fwd->start + fwd->len);
                e[0] = rseq;
                e[1] = end;
                e[2] = frame[i];
                e[3] = t;
                e[4] = 0;
                fwd->len++;
            }
            fwd->lastacklen = len;
            fwd->nextseq = end;
            fwd->nextseqtime = t;
            if (rseq == fwd->maxseqtobeacked || !fwd->maxseqtobeacked) fwd->maxseqtobeacked = end;
            fwd->data_segments++;
            fwd->bytes += len;
        } else {
            if (!sd->ok_ack || rack == fwd->lastack) return i;
            fwd->lastnondupack = frame[i];
            fwd->dupacknum = 0;
            if (rseq == fwd->maxseqtobeacked || !fwd->maxseqtobeacked) fwd->maxseqtobeacked = fwd->nextseq;
        }
        fwd->window = win[i];
        fwd->lastack = rack;
        fwd->lastacktime = t;
        fwd->lastsegmentflags = 0;
        if (cut) {
            rev->start += cut;
            rev->len -= cut;
            if (!rev->len) rev->start = 0;
        }
        if (have) {
            rev->rtt_n++;
            rev->rtt_sum += rtt;
            if (rev->rtt_n == 1 || rtt < rev->rtt_min) rev->rtt_min = rtt;
            if (rtt > rev->rtt_max) rev->rtt_max = rtt;
        }
        h->conv_ts[sd->conv] = t;
        fwd->packets++;
        fwd->wire_bytes += ip_len[i];
    }
    return n;
}

/* A conversation handed to C in one call: both flows' scalars (2 x NSCALAR), their unacked
 * segments (n1 then n2 entries), both directions registered with their eligibility. */
void nt_own(void *p, int64_t conv, int64_t i1, int64_t i2, const int64_t *v, const int64_t *segs, int64_t n1,
            int64_t n2, int64_t a1, int64_t p1, int64_t a2, int64_t p2, int64_t d1, int64_t k1, int64_t d2,
            int64_t k2) {
    nt_t *h = p;
    nt_flow_set(p, i1, v);
    nt_flow_set(p, i2, v + NSCALAR);
    flow_t *f1 = &h->flows[i1], *f2 = &h->flows[i2];
    f1->start = f1->len = f2->start = f2->len = 0;
    if (n1) nt_segs_set(p, i1, segs, n1);
    if (n2) nt_segs_set(p, i2, segs + 5 * n1, n2);
    nt_side_set(p, a1, p1, a2, p2, i1, i2, conv, d1, k1);
    nt_side_set(p, a2, p2, a1, p1, i2, i1, conv, d2, k2);
    h->conv_ts[conv] = -1;
}

/* ... and back: scalars into v (2 x NSCALAR), then the two segment counts; both directions
 * unregistered; -> the conversation's last timestamp written here, or -1. */
int64_t nt_pull(void *p, int64_t conv, int64_t i1, int64_t i2, int64_t *v, int64_t a1, int64_t p1, int64_t a2,
                int64_t p2) {
    nt_t *h = p;
    nt_flow_get(p, i1, v);
    nt_flow_get(p, i2, v + NSCALAR);
    v[2 * NSCALAR] = h->flows[i1].len;
    v[2 * NSCALAR + 1] = h->flows[i2].len;
    nt_side_off(p, a1, p1, a2, p2);
    nt_side_off(p, a2, p2, a1, p1);
    return nt_conv_ts(p, conv);
}

/* both flows' unacked segments, flow i1's first */
void nt_segs_get2(void *p, int64_t i1, int64_t i2, int64_t *out) {
    nt_segs_get(p, i1, out);
    nt_segs_get(p, i2, out + 5 * ((nt_t *)p)->flows[i1].len);
}
