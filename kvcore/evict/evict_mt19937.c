/* mt19937, the 32-bit Mersenne Twister (Matsumoto & Nishimura 1998), as
 * C++'s std::mt19937 and numpy's MT19937 state generator define it. */
#include "evict/evict_impl.h"

void kv_mt19937_seed(kv_mt19937 *g, uint32_t seed)
{
    g->s[0] = seed;
    for (int i = 1; i < 624; i++)
        g->s[i] = 1812433253u * (g->s[i - 1] ^ (g->s[i - 1] >> 30)) + (uint32_t)i;
    g->i = 624;
}

static void twist(kv_mt19937 *g)
{
    for (int i = 0; i < 624; i++) {
        uint32_t y = (g->s[i] & 0x80000000u) | (g->s[(i + 1) % 624] & 0x7fffffffu);
        g->s[i] = g->s[(i + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    g->i = 0;
}

uint32_t kv_mt19937_next(kv_mt19937 *g)
{
    if (g->i >= 624)
        twist(g);
    uint32_t y = g->s[g->i++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

double kv_mt19937_double(kv_mt19937 *g)
{
    uint32_t a = kv_mt19937_next(g) >> 5, b = kv_mt19937_next(g) >> 6;
    return (a * 67108864.0 + b) / 9007199254740992.0;
}
