"""The one-off profile behind issue 55 README's warm-up step figures (session 37): one SmolLM2 warm-up step on 16 random
rows of 280-420 prompt and 10 answer tokens, four ways. Run: OMP_NUM_THREADS=1 PYTHONPATH=. python THIS smollm2-dir
Prints (forward+backward s, optimizer s) for 3 steps after one untimed step. A record, not a benchmark."""
import time, random, torch, sys
from transformers import AutoModelForCausalLM, AutoTokenizer
from gigpo.trainer.sft_warmup import batch_loss_backward, AnswerWeights
from gigpo.infra.cpu_bf16 import bf16_matmuls
path = sys.argv[1]
torch.manual_seed(0); rng = random.Random(0)
tok = AutoTokenizer.from_pretrained(path)
batch = [([rng.randrange(1000, 40000) for _ in range(rng.randrange(280, 420))], [rng.randrange(1000, 40000) for _ in range(10)]) for _ in range(16)]
wts = AnswerWeights(tok, 0.5)
def run(model, dtype, micro, n=3, autocast=True):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    ts = []
    for i in range(n + 1):
        t = time.perf_counter()
        opt.zero_grad()
        with bf16_matmuls(dtype):
            loss = batch_loss_backward(model, batch, tok.pad_token_id, wts, micro, torch.device("cpu"), bf16=autocast)
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); opt.step()
        ts.append((t2 - t, time.perf_counter() - t2))
    return ts[1:]
m = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32); m.train()
print("fp32 weights + bf16 autocast, micro 2048:", run(m, "bf16", 2048), flush=True)
print("fp32 weights + bf16 autocast, micro 8192:", run(m, "bf16", 8192), flush=True)
print("fp32 weights, fp32, micro 2048:", run(m, "fp32", 2048, autocast=False), flush=True)
mb = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16); mb.train()
print("bf16 weights, no autocast, micro 2048:", run(mb, "bf16", 2048, autocast=False), flush=True)
