#!/usr/bin/env bash
# The GPU path on a CUDA machine, in one command of a few minutes (docs/benchmark.md, "GPU"):
# the `gpu` tests (tests/test_gpu.py), then benchmarks/bench_gpu.py (update time, CUDA vs CPU).
#
#     benchmarks/gpu_check.sh            # from anywhere; PYTHON=path/to/python to choose one
#
# Assumes a Python with evtrain's test extras installed (PYTHON, default .venv/bin/python of
# this checkout, else python3); downloads nothing, and runs this checkout's code (src/ and
# writers/ first on PYTHONPATH).  Writes under $OUT when set, else benchmarks/out/gpu-check:
# device.txt (nvidia-smi, torch and its CUDA), gpu-tests.txt and gpu-tests.xml (pytest's
# report, JUnit XML), bench_gpu.txt and gpu.json (the benchmark's table and JSON).
#
# Without a CUDA device it stops at once (exit 2) rather than let every test skip;
# EVTRAIN_TEST_ACCELERATOR=cpu runs the same steps on the CPU (how it was checked without a
# GPU). Exit status: 0 when the tests passed and the benchmark ran.
set -uo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-.venv/bin/python}
[ -x "$python" ] || python=python3
out=${OUT:-benchmarks/out/gpu-check}
accelerator=${EVTRAIN_TEST_ACCELERATOR:-cuda}
mkdir -p "$out"
export PYTHONPATH="$PWD/src:$PWD/writers${PYTHONPATH:+:$PYTHONPATH}"
export EVTRAIN_TEST_ACCELERATOR=$accelerator

# One Python answers it all (importing torch takes seconds): its version, CUDA's and the
# devices on stdout; exit 3 when torch cannot be imported, 4 when it sees no CUDA device.
torch_info=$("$python" -c 'import sys
try:
    import torch
except Exception:
    sys.exit(3)
print("python", sys.version.split()[0], "torch", torch.__version__, "CUDA", torch.version.cuda)
print("devices:", [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])
sys.exit(0 if torch.cuda.is_available() else 4)' 2>&1)
torch_status=$?
if [ "$torch_status" -eq 3 ]; then
    echo "gpu_check: $python cannot import torch; set PYTHON to the Python of the venv" \
        "evtrain is installed in" >&2
    exit 2
fi

{
    date -u '+%Y-%m-%d %H:%M:%S UTC'
    if command -v nvidia-smi >/dev/null; then nvidia-smi; else echo "nvidia-smi: not on PATH"; fi
    echo "$torch_info"
} 2>&1 | tee "$out/device.txt"

if [ "${accelerator%%:*}" = cuda ] && [ "$torch_status" -eq 4 ]; then
    echo "gpu_check: torch sees no CUDA device here; nothing to check" \
        "(EVTRAIN_TEST_ACCELERATOR=cpu runs the same steps on the CPU)" >&2
    exit 2
fi

start=$SECONDS
"$python" -m pytest -m gpu tests/test_gpu.py -q -rs -p no:cacheprovider \
    --junitxml "$out/gpu-tests.xml" 2>&1 | tee "$out/gpu-tests.txt"
tests=${PIPESTATUS[0]}
echo "gpu tests: exit $tests in $((SECONDS - start)) s" | tee -a "$out/gpu-tests.txt"

start=$SECONDS
EVTRAIN_BENCH_OUT="$out" "$python" benchmarks/bench_gpu.py \
    --updates "${UPDATES:-20}" --warmup "${WARMUP:-3}" --budget "${BUDGET:-15}" --threads "${THREADS:-1}" \
    2>&1 | tee "$out/bench_gpu.txt"
bench=${PIPESTATUS[0]}
echo "bench_gpu: exit $bench in $((SECONDS - start)) s" | tee -a "$out/bench_gpu.txt"

[ "$tests" -eq 0 ] && [ "$bench" -eq 0 ]
