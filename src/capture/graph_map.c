/* Replayed kernels back to their captures (graph_map.h): the node records and the copy records,
 * each sorted by node id and time, searched by halving. Layer: capture/. */
#include <stdlib.h>

#include "capture/graph_map.h"

enum { MAX_HOPS = 32 }; /* copies of copies: a clone of an instantiated clone is three */

struct lfc_graph_map {
    const lfc_rec **nodes, **copies; /* by (node id, time) */
    int64_t n_nodes, n_copies;
};

static int by_node_time(const void *a, const void *b)
{
    const lfc_rec *x = *(const lfc_rec *const *)a, *y = *(const lfc_rec *const *)b;
    if (x->graph_node_id != y->graph_node_id)
        return x->graph_node_id < y->graph_node_id ? -1 : 1;
    return (x->start > y->start) - (x->start < y->start);
}

lfc_graph_map *lfc_map_build(const lfc_rec *recs, int64_t n)
{
    lfc_graph_map *m = calloc(1, sizeof *m);
    int64_t nn = 0, nc = 0;
    for (int64_t i = 0; i < n; i++)
        nn += recs[i].kind == LFC_NODE, nc += recs[i].kind == LFC_NODE_COPY;
    if (m) {
        m->nodes = malloc((size_t)(nn ? nn : 1) * sizeof *m->nodes);
        m->copies = malloc((size_t)(nc ? nc : 1) * sizeof *m->copies);
    }
    if (!m || !m->nodes || !m->copies) {
        lfc_map_free(m);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) {
        if (recs[i].kind == LFC_NODE)
            m->nodes[m->n_nodes++] = &recs[i];
        else if (recs[i].kind == LFC_NODE_COPY)
            m->copies[m->n_copies++] = &recs[i];
    }
    if (m->n_nodes) /* (qsort of NULL, even of none, is undefined) */
        qsort(m->nodes, (size_t)m->n_nodes, sizeof *m->nodes, by_node_time);
    if (m->n_copies)
        qsort(m->copies, (size_t)m->n_copies, sizeof *m->copies, by_node_time);
    return m;
}

void lfc_map_free(lfc_graph_map *m)
{
    if (!m)
        return;
    free(m->nodes), free(m->copies);
    free(m);
}

/* The latest record of v (n, by node id and time) for node `node` made by t, or NULL. */
static const lfc_rec *latest(const lfc_rec *const *v, int64_t n, uint64_t node, int64_t t)
{
    int64_t lo = 0, hi = n; /* the first past (node, t) */
    while (lo < hi) {
        const int64_t mid = (lo + hi) / 2;
        if (v[mid]->graph_node_id < node || (v[mid]->graph_node_id == node && v[mid]->start <= t))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo > 0 && v[lo - 1]->graph_node_id == node ? v[lo - 1] : NULL;
}

const lfc_rec *lfc_map_origin(const lfc_graph_map *m, uint64_t node, int64_t t)
{
    for (int hop = 0; m && node && hop < MAX_HOPS; hop++) {
        const lfc_rec *made = latest(m->nodes, m->n_nodes, node, t);
        const lfc_rec *copy = latest(m->copies, m->n_copies, node, t);
        if (made && (!copy || made->start > copy->start)) /* a copy made at once wins: CUDA may report */
            return made;                                  /* the copy made as well as copied */
        if (!copy)
            return NULL;
        node = copy->from_node_id, t = copy->start; /* what it was copied from, as it stood then */
    }
    return NULL;
}
