# bench_env.sh — sourced by the benchmark scripts: the environment a measurement runs in.
#
# Benchmarks run OpenBLAS's own choice of kernels (the project's rule: some machines force
# OPENBLAS_CORETYPE to Haswell, and OPENBLAS_L2_SIZE with it), except where KVBENCH_ISA forces
# kvbench's AVX2 kernels: then OpenBLAS runs its Haswell (AVX2) kernels too, so the whole run
# is what an AVX2-only machine runs. Without it a forced-AVX2 run would still prefill with
# OpenBLAS's AVX-512 kernels, a mix no machine has, whose full cache alone is faster than an
# AVX2 machine's.
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
if [ "${KVBENCH_ISA:-}" = avx2 ]; then
  export OPENBLAS_CORETYPE=Haswell
fi

# bench_levels KVBENCH: "kernels LEVEL (-march=M), OpenBLAS CORE" as that binary runs here
# (OpenBLAS's configuration names its core just before MAX_THREADS). The -march matters for
# a forced AVX2 run: only an x86-64-v3 build (meson setup build-v3 -Dmarch=x86-64-v3) runs the
# AVX2 kernels as an AVX2 machine does; a native build on an AVX-512 CPU gives them 32 registers.
bench_levels() {
  "$1" version --libraries | awk '/^kernels / { k = $2; m = $0
      sub(/.*built with -march=/, "", m); sub(/;.*/, "", m) }
    /^OpenBLAS / { for (i = 3; i <= NF; i++) if ($i ~ /^MAX_THREADS/) o = $(i - 1) }
    END { printf "kernels %s (-march=%s), OpenBLAS %s", k, m, o }'
}
