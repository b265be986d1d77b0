#!/usr/bin/env bash
# Issue 15's device checks, prepared for the one short run a lent GPU allows (the device tool
# gives 10 minutes a command and 15 minutes a session): run from the repository root with the
# simpy wheel carried (`carry: [".whl"]`; `pip download --no-deps simpy==4.1.2 -d .whl` here),
#   bash bench/gpu_session.sh
# Everything lands in $OUT (the device tool's folder): the machine's versions, measured
# profiles, the NCCL sweep and the nccl-vs-gloo training test. Each step has its own time limit
# so a hang costs one step, not the run; a step that fails says so in $OUT/steps.txt and the
# next one runs. Not a test: CI never runs it.
set -u
OUT=${OUT:-out/gpu-session}
mkdir -p "$OUT"
PY=${PY:-python3}
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then  # the packages the device image lacks (simpy)
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi
export SCAPE_PROFILE_DIR="$OUT/profiles"  # measured profiles written here, not in ~

step() {  # step NAME SECONDS COMMAND...: run it with a limit, log it, record how it ended
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    echo "$name rc=$rc $((SECONDS - t0))s" | tee -a "$OUT/steps.txt"
}

step env 30 bash -c "nvidia-smi; $PY -c 'import torch, sys; print(sys.version); \
print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version(), \
torch.cuda.get_device_name())'; date -u"
# 1. compute on the GPU: matmul peak, copy bandwidth, the optimizer and SCAPE kernels,
#    forward/backward of the paper's models at the authors' micro-batch (issue 15 item 1)
step compute-gpt-345m 150 $PY -m cli calibrate compute --out gpu --model gpt-345m \
    --micro-batch 8 --max-ranks 1
step compute-llama-500m 120 $PY -m cli calibrate compute --out gpu-llama-500m \
    --model llama-500m --micro-batch 8 --max-ranks 1
# 2. real NCCL between ranks sharing the GPU, over its socket transport (item 2)
step nccl-collectives 180 $PY -m cli calibrate collectives --out gpu-nccl-sockets \
    --backend nccl --share-gpu --nprocs 2,4 --repeats 5
# 3. every scheme: NCCL's losses against gloo's, same seed (item 3; marker gpu)
step gpu-tests 150 $PY -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu.py
echo "done; see $OUT/steps.txt"
