/* The seeded generator behind weight initialisation and test data: xoshiro256** (Blackman and
 * Vigna), state filled by splitmix64 so any 64-bit seed is a good seed. Layer: tensor/. */
#include "linfuse/tensor.h"

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void lf_rng_seed(lf_rng *rng, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        rng->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t lf_rng_next(lf_rng *rng)
{
    uint64_t *s = rng->s;
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

double lf_rng_uniform(lf_rng *rng)
{
    return (double)(lf_rng_next(rng) >> 11) * 0x1p-53;
}
