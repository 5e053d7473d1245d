#!/usr/bin/env bash
# potato serve --backend cuda answering a replay request end to end on the GPU machine. Carry .dev/potato,
# or .dev/potato.xz (xz -6 of the binary: 12 MB against 46, where the tree and the binary together pass the
# device tool's 64 MiB), which is unpacked first (python's lzma where xz is not installed).
# Starts the server on the embedded default model, submits a text and a conversation over HTTP, waits for
# the job, fetches the tokens table as an Arrow IPC stream and reads it with pyarrow.
set -uo pipefail
export POTATO_CACHE=/tmp/potato-cache
if [[ ! -x .dev/potato && -f .dev/potato.xz ]]; then
  python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' .dev/potato.xz .dev/potato &&
    chmod +x .dev/potato || exit 1
fi
.dev/potato serve --backend cuda --listen 127.0.0.1:7878 --spill /tmp/spill > /tmp/serve.log 2>&1 &
pid=$!
python3 - <<'PY'
import json, time, urllib.request, io
import pyarrow.ipc as ipc
base = "http://127.0.0.1:7878/v1"
for _ in range(240):
    try:
        print("health:", urllib.request.urlopen(base + "/health").read().decode()); break
    except Exception:
        time.sleep(0.5)
info = json.load(urllib.request.urlopen(base + "/info"))
print("info: backend", info.get("backend"), "layers", info.get("layers"), "vocab", info.get("vocab"))
req = {"inputs": [{"text": "The capital of France is"},
                  {"conversation": {"messages": [{"role": "user", "content": "Hi there!"},
                                                 {"role": "assistant", "content": "Hello!"}], "thinking": False}}],
       "options": {"top_k": 3, "lens": [0, 4], "router": True}}
r = urllib.request.Request(base + "/jobs", data=json.dumps(req).encode(), headers={"Content-Type": "application/json"})
job = json.load(urllib.request.urlopen(r))
jid = job["id"]
while True:
    st = json.load(urllib.request.urlopen(base + "/jobs/" + jid))
    if st["state"] in ("done", "failed", "cancelled"):
        break
    time.sleep(0.2)
print("job", jid, st["state"], st.get("error", ""))
for name in ("tokens", "lens", "router"):
    t = ipc.open_stream(io.BytesIO(urllib.request.urlopen(base + "/jobs/%s/tables/%s" % (jid, name)).read())).read_all()
    print(name, t.num_rows, "rows;", ", ".join(t.schema.names), "; backend:", (t.schema.metadata or {}).get(b"potato.backend"))
    if name == "tokens":
        print(t.slice(0, 6).to_pandas()[["seq_id", "pos", "token", "logprob", "rank", "entropy"]].to_string())
PY
kill $pid; wait $pid 2>/dev/null
tail -3 /tmp/serve.log
