/* Per-thread record buffers: chunks of records and arenas for strings and shapes, touched when
 * they are made so recording never takes a page fault, registered with the session on a
 * thread's first event of a generation. Only the owning thread writes a buffer (no lock on the
 * hot path); the session reads and frees them. Layer: profiler/. */
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "profiler/prof_impl.h"

_Thread_local lf_tbuf *lf_prof_tls_buf;
_Thread_local uint64_t lf_prof_tls_gen;
static _Atomic uint64_t generation;
static _Atomic int64_t next_ext_id = 1 << 20;

uint64_t lf_prof_new_generation(void)
{
    return atomic_fetch_add(&generation, 1) + 1;
}

int64_t lf_prof_id_block(void)
{
    return atomic_fetch_add_explicit(&next_ext_id, 1 << 20, memory_order_relaxed);
}

/* A chunk whose pages are touched now. */
static lf_rec_chunk *chunk_new(void)
{
    lf_rec_chunk *c = malloc(sizeof *c);
    if (c) {
        memset(c, 0, sizeof *c);
        atomic_init(&c->n, 0);
    }
    return c;
}

lf_tbuf *lf_prof_thread_buf_slow(lf_profiler *p)
{
    lf_tbuf *b = calloc(1, sizeof *b);
    lf_rec_chunk *c = b ? chunk_new() : NULL;
    if (!c) {
        free(b);
        atomic_fetch_add(&p->lost, 1);
        return NULL;
    }
    b->head = b->tail = c;
    b->tid = (int64_t)syscall(SYS_gettid);
    pthread_mutex_lock(&p->mu);
    b->next = p->bufs;
    p->bufs = b;
    pthread_mutex_unlock(&p->mu);
    lf_prof_tls_buf = b;
    lf_prof_tls_gen = p->gen;
    return b;
}

int lf_prof_grow(lf_tbuf *b)
{
    lf_rec_chunk *c = chunk_new();
    if (!c)
        return 0;
    b->tail->next = c;
    b->tail = c;
    return 1;
}

void *lf_prof_arena_alloc(lf_tbuf *b, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n > LF_ARENA_CHUNK)
        return NULL;
    if (!b->arena || LF_ARENA_CHUNK - b->arena->used < n) {
        lf_arena *a = malloc(sizeof *a);
        if (!a)
            return NULL;
        memset(a->data, 0, sizeof a->data); /* fault the pages in now, not while recording */
        a->used = 0;
        a->next = b->arena;
        b->arena = a;
    }
    void *r = b->arena->data + b->arena->used;
    b->arena->used += n;
    return r;
}

const char *lf_prof_arena_str(lf_tbuf *b, const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = lf_prof_arena_alloc(b, n);
    if (d)
        memcpy(d, s, n);
    return d;
}

void lf_prof_spend_timing(lf_rec *r)
{
    if (r->kind == REC_KERNEL && r->u.k.timing) {
        int64_t a, b;
        r->u.k.resolve(r->u.k.timing, &a, &b);
        r->u.k.timing = NULL;
    }
}

void lf_prof_free_bufs(lf_tbuf *b)
{
    while (b) {
        lf_tbuf *next = b->next;
        for (lf_rec_chunk *c = b->head, *cn; c; c = cn) {
            cn = c->next;
            for (int64_t i = 0; i < atomic_load(&c->n); i++)
                lf_prof_spend_timing(&c->rec[i]);
            free(c);
        }
        for (lf_arena *a = b->arena, *an; a; a = an) {
            an = a->next;
            free(a);
        }
        free(b);
        b = next;
    }
}
