"""transformers + peft on an 8B-shaped Llama with random bf16 weights: the peer of
Strata's LlamaGpu.EightBShapedLoraStepTimeAndPeakMemory (LoRA r 8 on q/k/v/o/gate/up/down,
batch 2 x 512 tokens, AdamW). Prints one JSON line per setting. Run on the GPU machine
right after Strata's figure:  python3 scripts/bench/peer_llama.py"""
import json, time
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from peft import LoraConfig, get_peft_model

cfg = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                  num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0,
                  torch_dtype=torch.bfloat16, attn_implementation="sdpa")
torch.manual_seed(0)
with torch.device("cuda"):
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=[
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
params = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.AdamW(params, lr=1e-4)
ids = torch.randint(0, cfg.vocab_size, (2, 512), device="cuda")
for ckpt in (False, True):
    if ckpt:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    def step():
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    for _ in range(3): step()
    torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats(); times = []
    for _ in range(8):
        t0 = time.perf_counter(); step(); torch.cuda.synchronize(); times.append(time.perf_counter() - t0)
    times.sort()
    print(json.dumps({"peer": "transformers+peft", "grad_ckpt": ckpt, "step_s_median": round(times[len(times) // 2], 4),
                      "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)}), flush=True)
