/* From a replayed kernel back to the capture that made its node: CUDA numbers the nodes of an
 * executable graph apart from the graph they were captured into (instantiation copies each node),
 * so a kernel's node id leads to its capture through the copies the collector recorded
 * (LFC_NODE_COPY), each taken as it stood when the kernel was launched (an executable graph updated
 * from another graph replays the other's nodes from then on). Plain C over capture.h's records.
 * Layer: capture/. */
#ifndef LF_CAPTURE_GRAPH_MAP_H
#define LF_CAPTURE_GRAPH_MAP_H

#include "capture/capture.h"

typedef struct lfc_graph_map lfc_graph_map;

/* A map over the LFC_NODE and LFC_NODE_COPY records among recs (others are passed over; recs is
 * only read, and must outlive the map). NULL when out of memory. */
lfc_graph_map *lfc_map_build(const lfc_rec *recs, int64_t n);
void lfc_map_free(lfc_graph_map *m);
/* The LFC_NODE record that node `node`, launched at time t, was made as: following its copies (at
 * each step the latest made by t), or NULL when no record leads there (a graph made before the
 * collector started, or a node whose record was lost). */
const lfc_rec *lfc_map_origin(const lfc_graph_map *m, uint64_t node, int64_t t);

#endif
