/* Collectives on CUDA: NCCL, opened at run time the first time a communicator is made, so a
 * program that never leaves one GPU needs no NCCL (libnccl.so.2 on the library path, or
 * LINFUSE_NCCL_LIBRARY naming it). Each communicator owns a stream on its GPU: a collective waits
 * there for the work queued so far on the GPU's stream (an event), runs, and marks its end (an
 * event) that the GPU's stream waits for, at once or at comm_wait. Events are what CUDA graph
 * capture follows, so a captured forward holds its collectives too. NVLink multicast (NVLS) is
 * NCCL's own business: linfuse never asks for it. Layer: backend/cuda. */
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_impl.h"
#include "linfuse/settings.h"

/* NCCL's entry points, as its header declares them */
static struct {
    __typeof__(ncclGetVersion) *get_version;
    __typeof__(ncclGetUniqueId) *get_unique_id;
    __typeof__(ncclCommInitRank) *init_rank;
    __typeof__(ncclCommInitAll) *init_all;
    __typeof__(ncclAllReduce) *all_reduce;
    __typeof__(ncclCommDestroy) *destroy;
    __typeof__(ncclGetErrorString) *error_string;
    __typeof__(ncclGetLastError) *last_error;
} nccl;
static char nccl_why[512];
static char nccl_version[32];

static void load_nccl(void)
{
    const char *path = lf_setting_get(LF_SET_NCCL_LIBRARY);
    if (!path)
        path = "libnccl.so.2";
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(nccl_why, sizeof nccl_why, "NCCL is not installed here (%s); set LINFUSE_NCCL_LIBRARY to its path",
                 dlerror());
        return;
    }
    struct {
        void **slot;
        const char *name;
    } syms[] = {{(void **)&nccl.get_version, "ncclGetVersion"},      {(void **)&nccl.get_unique_id, "ncclGetUniqueId"},
                {(void **)&nccl.init_rank, "ncclCommInitRank"},      {(void **)&nccl.init_all, "ncclCommInitAll"},
                {(void **)&nccl.all_reduce, "ncclAllReduce"},        {(void **)&nccl.destroy, "ncclCommDestroy"},
                {(void **)&nccl.error_string, "ncclGetErrorString"}, {(void **)&nccl.last_error, "ncclGetLastError"}};
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++)
        if (!(*syms[i].slot = dlsym(h, syms[i].name))) {
            snprintf(nccl_why, sizeof nccl_why, "%s has no %s: NCCL 2.x is needed", path, syms[i].name);
            memset(&nccl, 0, sizeof nccl);
            dlclose(h);
            return;
        }
    int v = 0;
    nccl.get_version(&v); /* 22809 = 2.28.9 */
    snprintf(nccl_version, sizeof nccl_version, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
}

static lf_status nccl_ready(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, load_nccl);
    return nccl.all_reduce ? LF_OK : lf_fail(LF_EDEVICE, "cuda collectives: %s", nccl_why);
}

static lf_status nccl_status(ncclResult_t r, const char *call, ncclComm_t comm)
{
    if (r == ncclSuccess)
        return LF_OK;
    const char *detail = comm && nccl.last_error ? nccl.last_error(comm) : NULL;
    return lf_fail(LF_EDEVICE, "NCCL: %s: %s%s%s", call, nccl.error_string(r), detail && *detail ? ": " : "",
                   detail ? detail : "");
}

/* One rank's communicator: NCCL's, on one GPU, with a stream of its own. */
typedef struct cu_comm {
    ncclComm_t nc;
    int ordinal;
    cudaStream_t stream;
    cudaEvent_t ready, done; /* the GPU's stream's work so far; the collectives' end */
    int pending;             /* async collectives the GPU's stream has not waited for */
} cu_comm;

/* The stream and events of a communicator on GPU d (made on d). */
static lf_status comm_stream(cu_comm *c, const lf_cuda_dev *d)
{
    c->ordinal = d->ordinal;
    LF_CU_TRY(RUNTIME, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    LF_CU_TRY(RUNTIME, cudaEventCreateWithFlags(&c->ready, cudaEventDisableTiming));
    return LF_CU_CHECK(RUNTIME, cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming));
}

static void comm_release(cu_comm *c)
{
    if (!c)
        return;
    if (c->nc)
        nccl.destroy(c->nc);
    if (c->done)
        cudaEventDestroy(c->done);
    if (c->ready)
        cudaEventDestroy(c->ready);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    free(c);
}

lf_status lf_cuda_comm_unique_id(unsigned char id[LF_COMM_ID_BYTES])
{
    LF_TRY(nccl_ready());
    _Static_assert(sizeof(ncclUniqueId) == LF_COMM_ID_BYTES, "NCCL's id travels as LF_COMM_ID_BYTES bytes");
    ncclUniqueId u;
    LF_TRY(nccl_status(nccl.get_unique_id(&u), "ncclGetUniqueId", NULL));
    memcpy(id, &u, sizeof u);
    return LF_OK;
}

lf_status lf_cuda_comm_init(void **out, const unsigned char id[LF_COMM_ID_BYTES], int rank, int world)
{
    LF_TRY(nccl_ready());
    lf_cuda_dev *d = lf_cuda_cur();
    if (!d)
        return LF_EDEVICE;
    cu_comm *c = calloc(1, sizeof *c);
    if (!c)
        return lf_fail(LF_ENOMEM, "cuda collectives: out of memory");
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    lf_status s = nccl_status(nccl.init_rank(&c->nc, world, u, rank), "ncclCommInitRank", NULL);
    if (s == LF_OK)
        s = comm_stream(c, d);
    if (s != LF_OK) {
        comm_release(c);
        return s;
    }
    *out = c;
    return LF_OK;
}

lf_status lf_cuda_comm_init_all(void **out, int n)
{
    LF_TRY(nccl_ready());
    if (n < 1 || n > lf_cuda_device_count())
        return lf_fail(LF_EDEVICE, "cuda collectives: %d ranks asked, the driver sees %d GPU%s", n,
                       lf_cuda_device_count(), lf_cuda_device_count() == 1 ? "" : "s");
    ncclComm_t nc[LF_CUDA_MAX_DEVICES] = {0};
    int devs[LF_CUDA_MAX_DEVICES];
    for (int i = 0; i < n; i++)
        devs[i] = i;
    for (int i = 0; i < n; i++) /* every GPU started (its stream and handles) before NCCL uses it */
        if (!lf_cuda_dev_get(i))
            return LF_EDEVICE;
    int prev = 0;
    LF_CU_TRY(RUNTIME, cudaGetDevice(&prev));
    lf_status s = nccl_status(nccl.init_all(nc, n, devs), "ncclCommInitAll", NULL);
    for (int i = 0; i < n && s == LF_OK; i++) {
        cu_comm *c = calloc(1, sizeof *c);
        if (!c) {
            s = lf_fail(LF_ENOMEM, "cuda collectives: out of memory");
            break;
        }
        c->nc = nc[i], nc[i] = NULL;
        out[i] = c;
        s = LF_CU_CHECK(RUNTIME, cudaSetDevice(i)); /* the stream and events live on the rank's GPU */
        if (s == LF_OK)
            s = comm_stream(c, lf_cuda_dev_get(i));
    }
    cudaSetDevice(prev);
    if (s != LF_OK)
        for (int i = 0; i < n; i++) {
            if (nc[i])
                nccl.destroy(nc[i]);
            comm_release(out[i]);
            out[i] = NULL;
        }
    return s;
}

static ncclDataType_t nccl_type(lf_dtype dt)
{
    return dt == LF_DTYPE_BF16 ? ncclBfloat16 : dt == LF_DTYPE_F16 ? ncclFloat16 : ncclFloat32;
}

lf_status lf_cuda_all_reduce(const lf_collective *x, lf_kernel_info *info)
{
    cu_comm *c = x->comm;
    lf_cuda_dev *d = lf_cuda_cur();
    if (!d)
        return LF_EDEVICE;
    if (d->ordinal != c->ordinal)
        return lf_fail(LF_EDEVICE, "all_reduce: the communicator is on cuda:%d but this thread runs on cuda:%d",
                       c->ordinal, d->ordinal);
    /* the collective's stream first waits for what the GPU's stream has queued (x's producers) */
    LF_CU_TRY(RUNTIME, cudaEventRecord(c->ready, lf_cuda_stream(d)));
    LF_CU_TRY(RUNTIME, cudaStreamWaitEvent(c->stream, c->ready, 0));
    lf_status s =
        nccl_status(nccl.all_reduce(x->data, x->data, (size_t)x->count, nccl_type(x->dtype), ncclSum, c->nc, c->stream),
                    "ncclAllReduce", c->nc);
    if (s == LF_OK)
        s = LF_CU_CHECK(RUNTIME, cudaEventRecord(c->done, c->stream));
    if (s == LF_OK && !x->async)
        s = LF_CU_CHECK(RUNTIME, cudaStreamWaitEvent(lf_cuda_stream(d), c->done, 0));
    else if (s == LF_OK)
        c->pending = 1;
    if (s == LF_OK && info) {
        static const char *names[LF_DTYPE_COUNT] = {"nccl:all_reduce f32", "nccl:all_reduce bf16",
                                                    "nccl:all_reduce f16"};
        info->name = names[x->dtype]; /* CUPTI reports NCCL's own kernel and its name */
        info->bytes = 2.0 * (double)x->count * (double)lf_dtype_size(x->dtype);
        info->device_index = d->ordinal;
    }
    return s;
}

lf_status lf_cuda_comm_wait(void *comm)
{
    cu_comm *c = comm;
    lf_cuda_dev *d = lf_cuda_dev_get(c->ordinal);
    if (!d)
        return LF_EDEVICE;
    if (!c->pending)
        return LF_OK;
    c->pending = 0;
    return LF_CU_CHECK(RUNTIME, cudaStreamWaitEvent(lf_cuda_stream(d), c->done, 0));
}

void lf_cuda_comm_free(void *comm)
{
    cu_comm *c = comm;
    if (c && c->stream)
        cudaStreamSynchronize(c->stream);
    comm_release(c);
}

const char *lf_cuda_comm_library(void)
{
    static char text[48];
    if (!nccl_version[0])
        return NULL;
    snprintf(text, sizeof text, "nccl %s", nccl_version);
    return text;
}
