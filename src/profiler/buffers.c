/* Threads and their buffers. Each thread that records has a slot in a process-wide list whose
 * count is odd while the thread is inside a hook (lf_prof_enter .. lf_prof_leave); a session
 * that swaps its buffers or ends waits for the odd counts to move on, so the hot path takes no
 * lock and nothing is freed under a writer. Records go into per-thread chunks and arenas,
 * touched when they are made so recording never takes a page fault, registered with the
 * session on a thread's first event of a generation. Layer: profiler/. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "profiler/prof_impl.h"

_Thread_local lf_tls lf_prof_tls;
static _Atomic uint64_t generation;
static _Atomic int64_t next_ext_id = 1 << 20;

/* --- slots --- */

static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;
static lf_prof_slot *slots; /* never freed: reachable, and reused after their thread exits */
static pthread_key_t slot_key;
static pthread_once_t slot_once = PTHREAD_ONCE_INIT;

static void slot_release(void *s)
{
    atomic_store(&((lf_prof_slot *)s)->taken, 0);
}

static void slot_key_make(void)
{
    pthread_key_create(&slot_key, slot_release);
}

/* This thread's slot, taken (a free one reused, else a new one) on its first hook. */
static lf_prof_slot *slot_take(void)
{
    pthread_once(&slot_once, slot_key_make);
    pthread_mutex_lock(&slots_lock);
    lf_prof_slot *s = slots;
    while (s && atomic_load(&s->taken))
        s = s->next;
    if (!s && (s = calloc(1, sizeof *s))) {
        s->next = slots;
        slots = s;
    }
    if (s)
        atomic_store(&s->taken, 1);
    pthread_mutex_unlock(&slots_lock);
    if (s)
        pthread_setspecific(slot_key, s);
    lf_prof_tls.slot = s;
    return s;
}

lf_profiler *lf_prof_enter(void)
{
    lf_prof_slot *s = lf_prof_tls.slot;
    if (__builtin_expect(!s, 0) && !(s = slot_take()))
        return NULL;
    uint64_t q = atomic_load_explicit(&s->seq, memory_order_relaxed);
    /* seq_cst: the store is ordered before the loads below, which a session's swap relies on */
    atomic_store_explicit(&s->seq, q + 1, memory_order_seq_cst);
    lf_profiler *p = atomic_load_explicit(&lf_prof_active, memory_order_seq_cst);
    if (!p) {
        atomic_store_explicit(&s->seq, q + 2, memory_order_release);
        return NULL;
    }
    if (__builtin_expect(lf_prof_tls.session != p->serial, 0)) { /* a new session: start afresh */
        lf_prof_tls.session = p->serial;
        lf_prof_tls.buf = NULL;
        lf_prof_tls.gen = 0;
        lf_prof_tls.depth = 0;
    }
    return p;
}

void lf_prof_leave(void)
{
    lf_prof_slot *s = lf_prof_tls.slot;
    uint64_t q = atomic_load_explicit(&s->seq, memory_order_relaxed);
    atomic_store_explicit(&s->seq, q + 1, memory_order_release);
}

void lf_prof_quiesce(void)
{
    pthread_mutex_lock(&slots_lock);
    for (lf_prof_slot *s = slots; s; s = s->next) {
        if (s == lf_prof_tls.slot)
            continue; /* the caller is not inside a hook */
        uint64_t q = atomic_load_explicit(&s->seq, memory_order_seq_cst);
        if (q & 1)
            while (atomic_load_explicit(&s->seq, memory_order_acquire) == q)
                sched_yield();
    }
    pthread_mutex_unlock(&slots_lock);
}

/* --- ids and generations --- */

uint64_t lf_prof_new_generation(void)
{
    return atomic_fetch_add(&generation, 1) + 1;
}

int64_t lf_prof_id_block(void)
{
    return atomic_fetch_add_explicit(&next_ext_id, 1 << 20, memory_order_relaxed);
}

/* --- buffers --- */

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

lf_tbuf *lf_prof_thread_buf_slow(lf_profiler *p, uint64_t gen)
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
    lf_prof_tls.buf = b;
    lf_prof_tls.gen = gen;
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
