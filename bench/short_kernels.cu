// Short kernels launched as fast as the host can: the most events a second a tracer must keep up
// with (bench/profile_overhead.py runs it plain and under `linfuse profile`). Each of T threads
// launches N one-block kernels on a stream of its own, after a warm-up; the launch loop's wall
// time is printed. Tagged with NVTX ranges ("launches" per thread) so the trace shows them.
// usage: short_kernels [N per thread (200000)] [T threads (1)]
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

__global__ void tiny(int *out)
{
    if (out) // never: the kernel does nothing but exist
        out[threadIdx.x] = (int)threadIdx.x;
}

typedef struct job {
    long n;
    pthread_barrier_t *start;
    int failed;
} job;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *launch(void *arg)
{
    job *j = (job *)arg;
    cudaStream_t s;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
        j->failed = 1;
        return NULL;
    }
    for (int i = 0; i < 1000; i++) // warm-up: module loaded, queues made
        tiny<<<1, 32, 0, s>>>(NULL);
    cudaStreamSynchronize(s);
    pthread_barrier_wait(j->start);
    nvtxRangePushA("launches");
    for (long i = 0; i < j->n; i++)
        tiny<<<1, 32, 0, s>>>(NULL);
    cudaStreamSynchronize(s);
    nvtxRangePop();
    j->failed = cudaGetLastError() != cudaSuccess;
    cudaStreamDestroy(s);
    return NULL;
}

int main(int argc, char **argv)
{
    const long n = argc > 1 ? atol(argv[1]) : 200000;
    const int threads = argc > 2 ? atoi(argv[2]) : 1;
    if (n < 1 || threads < 1 || threads > 64) {
        fprintf(stderr, "usage: short_kernels [N per thread] [T threads, 1 to 64]\n");
        return 2;
    }
    if (cudaFree(0) != cudaSuccess) {
        fprintf(stderr, "short_kernels: no CUDA device\n");
        return 1;
    }
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    pthread_t th[64];
    job jobs[64];
    for (int t = 0; t < threads; t++) {
        jobs[t] = (job){n, &start, 0};
        pthread_create(&th[t], NULL, launch, &jobs[t]);
    }
    pthread_barrier_wait(&start);
    const double t0 = now();
    int failed = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(th[t], NULL);
        failed |= jobs[t].failed;
    }
    const double wall = now() - t0;
    printf("short_kernels: %ld launches on %d threads in %.6f s: %.3f us a launch, %.0f launches/s\n", n * threads,
           threads, wall, wall * 1e6 / (double)(n * threads), (double)(n * threads) / wall);
    return failed;
}
