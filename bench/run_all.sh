#!/usr/bin/env bash
# Run every benchmark of issue 8 and keep the figures (see bench/README.md).
#
#   bench/run_all.sh vm       # a small shared machine: short runs, one after another
#   bench/run_all.sh device   # the 16-core H200 machine: background footprint, pinned CPUs
#
# Environment:
#   RESULTS   where the JSON/text results go (default build/bench-out)
#   BEFORE    another copy of the package's source root (e.g. the code before a
#             change): growth and serving also run against it, for before/after
#   LIVE_S    seconds of the live footprint (vm 120, device 420)
#   DEADLINE  seconds after which no new foreground step starts (device 470)
#   GROWTH_SIZES, SERVING_SIZES, SERVE_S, BEFORE_GROWTH_SIZES, BEFORE_SERVING_SIZES
#             override the sizes (comma-separated N) and seconds per serving shape
#
# Layout on the device (16 CPUs): live footprint agent on CPU 0, its workers and
# load on 1-3; the 100,000-pass run on 4 (stubs on 5); everything else one step
# at a time on 6-15 (agent 6, workers/stubs 7-9, scrapers 10-15).
set -u
cd "$(dirname "$0")/.." || exit 1
MODE=${1:-vm}
RESULTS=${RESULTS:-build/bench-out}
mkdir -p "$RESULTS"
export PYTHONPATH="$PWD/agent${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
START=$SECONDS

# taskset prefixes (empty where the machine has fewer CPUs than the layout)
FG=() GPUBENCH=() GPULOAD=()
if [ "$MODE" = device ]; then
    LIVE_S=${LIVE_S:-420}
    DEADLINE=${DEADLINE:-470}
    if [ "$(nproc)" -ge 16 ] && command -v taskset >/dev/null; then
        FG=(taskset -c 6-15) GPUBENCH=(taskset -c 6-14) GPULOAD=(taskset -c 15)
    fi
else
    LIVE_S=${LIVE_S:-120}
    DEADLINE=${DEADLINE:-100000}
fi

say() { echo "=== [$((SECONDS - START))s] $*"; }
left() { echo $((DEADLINE - (SECONDS - START))); }
# step SECONDS_NEEDED LABEL COMMAND...: run unless the deadline is too close
step() {
    local need=$1 label=$2
    shift 2
    if [ "$(left)" -lt "$need" ]; then
        say "SKIPPED $label (needs ${need}s, $(left)s left before the deadline)"
        return
    fi
    say "$label"
    timeout --kill-after=10 "$(($(left) + 60))" "$@" 2>&1 | tee "$RESULTS/$label.txt"
    say "$label: exit ${PIPESTATUS[0]}"
}

say "machine"
{
    "$PY" -c 'import platform, os; print(platform.python_version(), os.cpu_count(), "cpus")'
    grep -m1 "model name" /proc/cpuinfo
    uname -r
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
} 2>&1 | tee "$RESULTS/machine.txt"

if [ "$MODE" = device ]; then
    # Footprint in the background, on CPUs of their own, while the rest runs.
    say "footprint live (${LIVE_S}s) and passes in the background"
    "$PY" bench/bench_footprint.py live --duration "$LIVE_S" --warmup 30 \
        --agent-cpus 0 --worker-cpus 1-3 --json "$RESULTS/footprint_live.json" \
        >"$RESULTS/footprint_live.txt" 2>&1 &
    LIVE_PID=$!
    "$PY" bench/bench_footprint.py passes --passes 100000 --max-seconds $((LIVE_S + 20)) \
        --agent-cpus 4 --worker-cpus 5 --json "$RESULTS/footprint_passes.json" \
        >"$RESULTS/footprint_passes.txt" 2>&1 &
    PASSES_PID=$!

    # GPU collection: idle, then beside a PyTorch matmul load holding 16 GiB.
    step 60 gpu_idle "${FG[@]}" "$PY" bench/bench_gpu_collect.py --label idle \
        --json "$RESULTS/gpu_idle.json"
    if "$PY" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
        CTL=$(mktemp) READY=$(mktemp -u)
        echo run >"$CTL"
        "${GPULOAD[@]}" "$PY" bench/device/gpu_load.py --gib 16 --control "$CTL" --ready "$READY" \
            >"$RESULTS/gpu_load_process.txt" 2>&1 &
        LOAD_PID=$!
        for _ in $(seq 120); do [ -s "$READY" ] && break; sleep 0.5; done
        cat "$READY" 2>/dev/null
        step 60 gpu_load "${GPUBENCH[@]}" "$PY" bench/bench_gpu_collect.py --label load \
            --json "$RESULTS/gpu_load.json"
        echo stop >"$CTL"
        for _ in $(seq 60); do kill -0 "$LOAD_PID" 2>/dev/null || break; sleep 0.5; done
        kill "$LOAD_PID" 2>/dev/null
    fi
fi

step 30 engine_parse "${FG[@]}" "$PY" bench/bench_engine_parse.py
if [ "$MODE" = device ]; then
    GROWTH=(--cpus 6 --stub-cpus 7-9 --sizes "${GROWTH_SIZES:-1,2,4,8,16,32,64}")
    SERVING=(--agent-cpus 6 --worker-cpus 7-9 --client-cpus 10-15 --client-procs 6
             --sizes "${SERVING_SIZES:-1,8,32}" --duration "${SERVE_S:-12}")
else
    GROWTH=(--sizes "${GROWTH_SIZES:-1,2,4,8,16,32}" --passes 15 --stub-procs 2)
    SERVING=(--sizes "${SERVING_SIZES:-1,8}" --duration "${SERVE_S:-8}" --client-procs 2)
fi
step 60 growth "$PY" bench/bench_growth.py "${GROWTH[@]}" --json "$RESULTS/growth.json"
if [ -n "${BEFORE:-}" ]; then
    step 40 growth_before env INFERWATCH_SRC="$BEFORE" "$PY" bench/bench_growth.py \
        "${GROWTH[@]}" --sizes "${BEFORE_GROWTH_SIZES:-1,4,16,64}" --passes 15 \
        --json "$RESULTS/growth_before.json"
fi
step 150 serving "$PY" bench/bench_serving.py "${SERVING[@]}" --json "$RESULTS/serving.json"
if [ -n "${BEFORE:-}" ]; then
    step 60 serving_before env INFERWATCH_SRC="$BEFORE" "$PY" bench/bench_serving.py \
        "${SERVING[@]}" --sizes "${BEFORE_SERVING_SIZES:-8,32}" --shapes paced,burst \
        --duration 10 --json "$RESULTS/serving_before.json"
fi

if [ "$MODE" = device ]; then
    say "waiting for the footprint runs"
    wait "$LIVE_PID" "$PASSES_PID"
    cat "$RESULTS/footprint_live.txt" "$RESULTS/footprint_passes.txt"
else
    step 10 footprint_live "$PY" bench/bench_footprint.py live --duration "$LIVE_S" --warmup 15 \
        --json "$RESULTS/footprint_live.json"
    say "footprint passes: run it on its own, it takes long here:"
    echo "  $PY bench/bench_footprint.py passes --json $RESULTS/footprint_passes.json"
fi
if "$PY" -c 'import matplotlib' 2>/dev/null && [ -s "$RESULTS/growth.json" ]; then
    "$PY" bench/bench_growth.py --from "$RESULTS/growth.json" --plot "$RESULTS/perf-growth.png" \
        >/dev/null
fi
say "done; results in $RESULTS"
