#!/bin/bash
# The agent's NVML backend on a real GPU: its /v1/status and /v1/gpus idle
# and under a bf16 matmul load (PyTorch), beside nvidia-smi, into $OUT.
#   CGO_ENABLED=1 go build -tags nvml -o replan-agent ./cmd/replan-agent
#   AGENT=./replan-agent OUT=/tmp/nvmlcheck bash examples/gpu/nvmlcheck.sh
set -u
A=${AGENT:-./replan-agent}; OUT=${OUT:-/tmp/nvmlcheck}; D=$(mktemp -d); S=$D/agent.sock; mkdir -p "$OUT"
get() { python3 - "$S" "${1:-/v1/status}" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
s.sendall(b"GET " + sys.argv[2].encode() + b" HTTP/1.0\r\nHost: agent\r\n\r\n")
b = b""
while True:
    d = s.recv(65536)
    if not d: break
    b += d
print(b.split(b"\r\n\r\n", 1)[1].decode())
PY
}
$A serve --socket $S --state-dir $D/state > $OUT/agent.log 2>&1 &
AP=$!
for i in $(seq 100); do [ -S $S ] && get > /dev/null 2>&1 && break; sleep 0.2; done
get > $OUT/status.json; get /v1/gpus > $OUT/idle.json
python3 -c "
import torch,time
x=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16)
t=time.time()
while time.time()-t<14:
    y=x@x
torch.cuda.synchronize()" &
P=$!
sleep 8
get /v1/gpus > $OUT/busy.json
nvidia-smi --query-gpu=name,uuid,memory.used,memory.total,utilization.gpu,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.max.sm,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,clocks_throttle_reasons.active --format=csv > $OUT/smi-busy.csv 2>&1
nvidia-smi --query-compute-apps=pid,used_memory --format=csv >> $OUT/smi-busy.csv 2>&1
nvidia-smi topo -m > $OUT/topo.txt 2>&1
wait $P
kill $AP; wait $AP
cat $OUT/status.json | head -12; head -c 2500 $OUT/busy.json; echo; cat $OUT/smi-busy.csv; tail -5 $OUT/agent.log
