#!/usr/bin/env bash
# Issue 15's device checks, prepared for the one short run a lent GPU allows (the device tool
# gives 10 minutes a command and 15 minutes a session): run from the repository root with the
# simpy wheel and iproute2 carried (`carry: [".whl", ".netbed-tools"]`; here: `pip download
# --no-deps simpy==4.1.2 -d .whl` and `bash bench/netbed_tools.sh`),
#   bash bench/gpu_session.sh
# The whole script is more than one 15-minute lease holds: SKIP="step ..." leaves out what an
# earlier session measured (results/gpu-sessions/README.md says which).
# Everything lands in $OUT (the device tool's folder): the machine's versions, measured
# profiles, the NCCL sweep and the nccl-vs-gloo training test. Each step has its own time limit
# so a hang costs one step, not the run; a step that fails says so in $OUT/steps.txt and the
# next one runs. Not a test: CI never runs it.
set -u
OUT=${OUT:-out/gpu-session}
mkdir -p "$OUT"
# The device tool returns at most 8 files from $OUT: work in $W and pack it into one archive
# after every step, so a run cut off by its limit still returns what it finished.
W=${W:-/tmp/gpu-session}
mkdir -p "$W"
PY=${PY:-python3}
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then  # the packages the device image lacks (simpy)
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi
export SCAPE_PROFILE_DIR="$W/profiles"  # measured profiles written here, not in ~

SKIP=${SKIP:-}  # steps not to run, e.g. SKIP="env gpu-compute" (a rerun of what failed)
PARTS=${PARTS:-fwd_bwd,optimizer,select,quantize}  # bench/gpu_compute.py's --parts
GPU_TESTS=${GPU_TESTS:-tests/test_gpu.py}  # step 2's tests, e.g. one test's node id
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True  # big [N] buffers come and go

# MPS=1: the ranks' kernels run side by side through CUDA's multi-process service (a daemon
# this script starts and stops; the GPU's compute mode and settings are left as they are)
# instead of taking turns in time slices, which made a timed block take its usual time or
# 4-20 ms more from step to step (results/gpu-sessions, sessions 12 and 13)
TAG=""
no_mps() {  # no_mps WHY: say it in steps.txt, return what there is, stop
    echo "MPS=1 but $1" | tee -a "$W/steps.txt"
    tar czf "$OUT/gpu-session.tgz" -C "$W" .
    exit 1
}
if [ "${MPS:-0}" = 1 ]; then
    MPSCTL=$(command -v nvidia-cuda-mps-control || ls /usr/local/nvidia/bin/nvidia-cuda-mps-control 2>/dev/null)
    [ -n "$MPSCTL" ] || no_mps "this machine has no nvidia-cuda-mps-control"
    export CUDA_MPS_PIPE_DIRECTORY=$W/mps-pipe CUDA_MPS_LOG_DIRECTORY=$W/mps-log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    "$MPSCTL" -d || no_mps "the MPS daemon did not start"
    echo "mps daemon started ($MPSCTL)" | tee -a "$W/steps.txt"
    trap 'echo quit | "$MPSCTL"' EXIT  # the profiles record the mode (network_gpu_sharing)
    export NCCL_CUMEM_ENABLE=0  # cuMem allocations under MPS: not needed by the socket transport
    TAG="-mps"
fi

step() {  # step NAME SECONDS COMMAND...: run it with a limit, log it, record how it ended
    local name=$1 limit=$2
    shift 2
    case " $SKIP " in *" $name "*) echo "$name skipped" | tee -a "$W/steps.txt"; return;; esac
    local t0=$SECONDS
    echo "$name start $(date -u +%T)" | tee -a "$W/steps.txt"
    timeout "$limit" "$@" >"$W/$name.log" 2>&1
    local rc=$?
    echo "$name rc=$rc $((SECONDS - t0))s" | tee -a "$W/steps.txt"
    tail -n 40 "$W/$name.log"
    # the runs' checkpoints are left out (276 MB of them kept the archive from coming back
    # once); their logs and summaries (each step's timed blocks) come back
    tar czf "$OUT/gpu-session.tgz" -C "$W" --exclude=checkpoint .
}

step env 30 bash -c "nvidia-smi; $PY -c 'import torch, sys; print(sys.version); \
print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version(), \
torch.cuda.get_device_name())'; date -u; uname -r; command -v ip tc unshare nsenter"
# 0. the open kernel questions of issues 57 and 61 (bench/kernel_probe.py: attention against
#    sequence length per SDPA backend; the host time a local expert adds, SequentialMLP-shaped,
#    torch._grouped_mm and Transformer Engine's GroupedLinear where they import); first, as
#    the cheapest and the one no earlier session measured
step kernel-probe 150 $PY bench/kernel_probe.py --out "$W/kernel-probe.json"
# 1. compute on the GPU: forward/backward of the paper's models at the authors' micro-batch
#    (bf16, FlashAttention), the optimizer step of dense AdamS and both SCAPE variants for
#    Llama-1.8B, selection at 1e8 and 1e9, quantize (issue 15 item 1)
step gpu-compute 200 $PY bench/gpu_compute.py --parts "$PARTS" --out "$W/gpu-compute.json"
# ... where the SCAPE steps that miss the 20 ms goal spend their time, op by op (torch.profiler)
step gpu-profile 120 $PY bench/gpu_compute.py --parts profile,bits --out "$W/gpu-profile.json"
# ... a real step's Kineto trace (Llama-500M, micro-batch 2 and 4), fitted by scape calibrate
#     trace on the first and predicted on the second (issues 41 and 44)
step gpu-trace 150 $PY bench/gpu_trace.py --model llama-500m --fit-mb 2 --check-mb 4 \
    --out "$W/gpu-trace"
# ... and the hardware profile: matmul peak, copy bandwidth, kernel fits, Llama-1.8B's MFU
step calibrate-compute 100 $PY -m cli calibrate compute --backend nccl --out gpu --model llama-1.8b \
    --micro-batch 8 --max-ranks 1
# 2. every scheme: NCCL's losses against gloo's, same seed (item 3; marker gpu)
step gpu-tests 170 $PY -m pytest -q --tb=short -m gpu -p no:cacheprovider $GPU_TESTS
# 3. real NCCL between ranks sharing the GPU, over its socket transport (item 2)
#    (from 256 KiB: below it every call takes the sockets' ~5 ms floor and the fit finds no
#    bandwidth, as the first run on 2026-11-26 showed)
step nccl-collectives 100 $PY -m cli calibrate collectives --out gpu-nccl-sockets \
    --backend nccl --share-gpu --nprocs 2,4 --repeats 5 --sizes 256KiB..64MiB
# 4. validation on NCCL (item 2): a profile of tiny-gpt on ranks sharing this GPU (compute with
#    1..4 ranks sharing it, NCCL's sockets), then real training steps of each scheme on 2 and
#    4 ranks against the simulator's prediction from that profile
step validate-compute 50 $PY -m cli calibrate compute --backend nccl --out gpu-val --model tiny-gpt \
    --micro-batch 16 --max-ranks 4
step validate-collectives 80 $PY -m cli calibrate collectives --out gpu-val --backend nccl \
    --share-gpu --nprocs 2,4 --repeats 5 --sizes 256KiB..64MiB
step validate 140 $PY -m cli validate --profile measured/gpu-val --backend nccl --share-gpu \
    --nprocs 2,4 --steps 8 --out "$W/validation-gpu" \
    --schemes dense-ddp,dense-adams,quantized:8,topk:0.99,scape:0.99,scape-partitioned:0.99
# 5. the shaped netbed (item 2 at two rates): each rank in its own namespace behind a tbf link,
#    NCCL's sockets over the veth; the device has no ip or tc of its own (2026-11-26)
if [ -x .netbed-tools/bin/ip ]; then export PATH=$PWD/.netbed-tools/bin:$PATH; fi
step netbed-probe 40 $PY -m cli netbed --netbed rate=1gbit --seconds 2
# sizes where the shaped link's bandwidth, not the shared GPU's ~5 ms a call, sets the time
# profile names stamped with the run's time: a name the checkout already holds (a committed
# profile of an earlier session) is refused, as the second call on 2026-11-26 found
STAMP=$(date -u +%Y%m%d-%H%M)
for rate in ${NETBED_RATES:-1gbit 200mbit}; do
    case $rate in 1gbit) sizes=64KiB..16MiB;; *) sizes=16KiB..4MiB;; esac
    prof="gpu-netbed-$rate$TAG-$STAMP"
    step "netbed-compute-$rate" 50 $PY -m cli calibrate compute --backend nccl --out "$prof" \
        --model tiny-gpt --micro-batch 16 --max-ranks 4
    step "netbed-collectives-$rate" 150 $PY -m cli calibrate collectives \
        --out "$prof" --backend nccl --share-gpu --netbed "rate=$rate" \
        --nprocs 2,4 --repeats 5 --sizes "$sizes"
    # 24 steps a run: a step there takes its usual time or ~20 ms more (ranks taking turns on
    # the GPU), and the median of 8 landed on either (session 12: the same runs repeated to
    # within a median 4-9%, at most 27-53%)
    step "netbed-validate-$rate" 200 $PY -m cli validate --profile "measured/$prof" \
        --nprocs 2,4 --steps 24 --out "$W/validation-netbed-$rate$TAG" \
        --schemes dense-ddp,dense-adams,quantized:8,topk:0.99,scape:0.99,scape-partitioned:0.99
done
echo "done; see $OUT/gpu-session.tgz (steps.txt)"
